"""Ops the spyre device runs on the CPU, as torch-spyre does: ``arange``,
``sin`` and ``cos`` (and their ``out=`` forms). Each warns once with a
:class:`FallbackWarning` ("aten::sin is falling back to cpu"); its inputs are
copied to the host and its results back. Every other op the device cannot
compute raises ``NotImplementedError``."""
from __future__ import annotations

import warnings
from typing import FrozenSet, Set

__all__ = ["FallbackWarning", "FALLBACK_OPS", "warn_fallback"]


class FallbackWarning(UserWarning):
    """An op of spyre tensors ran on the CPU (tensors copied to the host and back)."""


#: the aten ops (overload names as the dispatcher gives them) that run on the CPU
FALLBACK_OPS: FrozenSet[str] = frozenset({
    "aten::arange", "aten::arange.start", "aten::arange.start_step", "aten::arange.out",
    "aten::arange.start_out", "aten::sin", "aten::sin.out", "aten::cos", "aten::cos.out",
})

_warned: Set[str] = set()


def warn_fallback(name: str, stacklevel: int = 2) -> None:
    """Warns, once per process and op, that ``name`` runs on the CPU."""
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(f"{name} is falling back to cpu", FallbackWarning, stacklevel=stacklevel)
