"""Device buffers that a compiled function or bundle reuses call after call.

Inputs given on the host are written into the same device tensors every call
(no allocation per call); with pipelining two sets alternate, each
remembering the execution that last read it, so a set is rewritten only once
that execution is done.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from nkipy.runtime import DeviceTensor


class BufferSet:
    """One set of input buffers by name (and, for outputs read back to the
    host, output buffers); the execution that last used them (``event``); and
    what a prefetch wrote into them (``prefetched``, the bundle engine's)."""

    def __init__(self, core_id: int) -> None:
        self.core_id = core_id
        self.inputs: Dict[str, DeviceTensor] = {}
        self.outputs: Optional[Dict[str, DeviceTensor]] = None
        self.event: Any = None
        self.prefetched: Optional[Tuple[int, int]] = None

    def buffer(self, name: str, shape: Sequence[int], dtype: Any) -> DeviceTensor:
        """The input buffer ``name`` of ``shape`` and ``dtype`` (made, or remade
        when either changed)."""
        shape = tuple(shape)
        buf = self.inputs.get(name)
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = DeviceTensor.empty(shape, dtype, name=name, core_id=self.core_id)
            self.inputs[name] = buf
        return buf

    def wait(self) -> None:
        """Waits for the execution that last used this set (raises its error)."""
        ev, self.event = self.event, None
        if ev is not None:
            ev.wait()
