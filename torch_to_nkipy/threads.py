"""Compiled functions called from several threads while one of them compiles.

Dynamo refuses to run a compiled function while FX symbolic tracing is active
("Detected that you are using FX to symbolically trace a dynamo-optimized
function"), and asks ``torch.fx._symbolic_trace.is_fx_symbolic_tracing()``,
which reads one process-wide flag. AOTAutograd sets that flag while it traces a
graph (``Tracer.trace``), so when one thread compiles -- a new shape, a dynamic
recompile -- every other thread calling any compiled function in that window
failed (95 of 26,050 calls from 8 threads). The question is per thread: is
*this* thread tracing? :func:`install` makes it so, by counting
``Tracer.trace`` frames per thread and answering from that count; a thread
that really traces a compiled function still gets Dynamo's error.

Installed when torch_to_nkipy is imported, before user code calls
``torch.compile`` (Dynamo's wrapper looks the function up when it is made).
"""
from __future__ import annotations

import functools
import threading
from typing import Any

import torch
import torch.fx._symbolic_trace as _st

_local = threading.local()
_installed = False


def tracing_here() -> bool:
    """Whether this thread is inside ``torch.fx.Tracer.trace``."""
    return getattr(_local, "depth", 0) > 0


def _is_fx_symbolic_tracing() -> bool:
    return tracing_here() and _st._is_fx_tracing_flag and not torch.compiler.is_compiling()


def install() -> None:
    """Makes ``is_fx_symbolic_tracing`` answer for the calling thread (idempotent)."""
    global _installed
    if _installed:
        return
    original = _st.Tracer.trace

    @functools.wraps(original)
    def trace(self: Any, *args: Any, **kwargs: Any) -> Any:
        _local.depth = getattr(_local, "depth", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.depth -= 1

    _st.Tracer.trace = trace  # type: ignore[method-assign]
    _st.is_fx_symbolic_tracing = _is_fx_symbolic_tracing
    _installed = True
