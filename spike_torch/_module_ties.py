"""Tied parameters survive ``Module.to("nkipy")``, ``.nkipy()`` and ``.cpu()``.

``Module._apply`` keeps a parameter's identity (``param.data = new``) only when
PyTorch finds the old and new tensors of "compatible shallow-copy type", and
its list of such devices (c10 ``TensorImpl::has_compatible_shallow_copy_type``)
names CPU, CUDA and a few others but not PrivateUse1. Across the nkipy/CPU
boundary every parameter therefore becomes a new ``Parameter``, one per place
it appears: GPT-2's ``wte`` and ``lm_head``, which share one weight, came out as
two tensors that training then moved apart.

This wraps ``Module._apply`` once, at the outermost call: tensors that appear
in more than one place (parameters or buffers, by identity) are converted once,
and every place is pointed at the one converted object afterwards, as the tie
was before. Untied models are left exactly as ``_apply`` makes them.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Tuple

import torch

__all__ = ["install"]

_state = threading.local()
_original_apply = torch.nn.Module._apply

Place = Tuple[torch.nn.Module, str, str]      # (module, "_parameters" or "_buffers", name)


def _shared_places(root: torch.nn.Module) -> List[List[Place]]:
    """Groups of places under ``root`` that hold the same tensor object."""
    by_id: Dict[int, Tuple[torch.Tensor, List[Place]]] = {}
    for module in root.modules():
        for kind in ("_parameters", "_buffers"):
            for name, t in getattr(module, kind).items():
                if t is not None:
                    by_id.setdefault(id(t), (t, []))[1].append((module, kind, name))
    return [places for _, places in by_id.values() if len(places) > 1]


def _apply(self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor],
           *args: Any, **kwargs: Any) -> torch.nn.Module:
    if getattr(_state, "active", False):           # a child's call inside ours
        return _original_apply(self, fn, *args, **kwargs)
    groups = _shared_places(self)
    if not groups:
        return _original_apply(self, fn, *args, **kwargs)
    shared = {id(getattr(m, k)[n]): getattr(m, k)[n] for m, k, n in (g[0] for g in groups)}
    converted: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def once(t: torch.Tensor) -> torch.Tensor:
        # a tied tensor is converted once (no second device copy); the others
        # go through fn as before
        if id(t) in shared and shared[id(t)] is t:
            hit = converted.get(id(t))
            if hit is None:
                hit = converted[id(t)] = (t, fn(t))
            return hit[1]
        return fn(t)

    _state.active = True
    try:
        result = _original_apply(self, once, *args, **kwargs)
    finally:
        _state.active = False
    for places in groups:
        module, kind, name = places[0]
        tied = getattr(module, kind)[name]
        for module, kind, name in places[1:]:
            if getattr(module, kind)[name] is not tied:
                getattr(module, kind)[name] = tied
    return result


def install() -> None:
    """Wraps ``torch.nn.Module._apply`` (idempotent)."""
    if torch.nn.Module._apply is not _apply:
        torch.nn.Module._apply = _apply
