"""``SpikeProfiler``: the runtime with a log line per execution (the original's
debugging wrapper of ``Spike``).

Every execution through it appends one line to ``target_file``: the process
id, the source line that asked for it (the first frame outside spike) and the
model's name. Everything else is the runtime's own method. For timings, use
``SpikeModel.benchmark`` or ``SystemTraceSession``; this answers "which code
ran which kernel, in which process".
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Optional

from .spike_singleton import get_spike_singleton

_HERE = os.path.dirname(os.path.abspath(__file__))
#: the runtime's calls that run a model (each logs one line)
_EXECUTES = ("execute", "execute_async", "execute_at", "execute_staged", "benchmark")


def _caller() -> str:
    f = sys._getframe(2)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back
    return "<unknown>" if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


class SpikeProfiler:
    """The process's runtime (``get_spike_singleton()``), logging each execution.

    Args:
        verbose_level: kept for the original's signature; the runtime's own
            verbosity is ``spike.configure``'s.
        target_file: the log (appended to; created private, never through a
            symbolic link). Default ``debug_rank_<RANK>.txt`` in the current
            directory (``RANK`` from the environment, else 0).
    """

    def __init__(self, verbose_level: int = 0, target_file: Optional[str] = None) -> None:
        if isinstance(verbose_level, bool) or not isinstance(verbose_level, int) \
                or verbose_level < 0:
            raise ValueError(f"verbose_level must be an int >= 0, not {verbose_level!r}")
        self.verbose_level = verbose_level
        self.target_file = os.fspath(target_file) if target_file is not None else \
            f"debug_rank_{os.environ.get('RANK', '0')}.txt"
        self._spike = get_spike_singleton()
        self._lock = threading.Lock()

    def _log(self, model: Any) -> None:
        name = getattr(model, "name", None) or "<model>"
        line = f"pid={os.getpid()} {_caller()} kernel={name}\n"
        with self._lock:
            fd = os.open(self.target_file,
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._spike, name)
        if name not in _EXECUTES:
            return attr

        def logged(model: Any, *args: Any, **kwargs: Any) -> Any:
            self._log(model)
            return attr(model, *args, **kwargs)
        logged.__doc__ = attr.__doc__
        return logged

    def __repr__(self) -> str:
        return f"SpikeProfiler(target_file={self.target_file!r})"
