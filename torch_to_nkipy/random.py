"""Random ATen ops on the device: each gets a seed drawn per call.

Before partitioning, :func:`seed_random_ops` rewrites every random ATen node
with a lowering in :mod:`spike_torch.lowering.aten_random` into
``nkipy_rng.<op>(seed, *args)``, its seed a new graph input (a placeholder
after the others). The compiled graph's caller (:func:`with_seeds`) appends
the seeds to the inputs of each call: :func:`draw_seed` draws an int64 from
the generator the eager op would use (the default CPU generator for CPU
tensors, ``torch.nkipy``'s for nkipy tensors, the CPU one for the ops whose
eager nkipy kernels are the CPU fallback: dropout, normal with tensor
mean or std), so calls differ and
``torch.manual_seed`` makes a compiled run reproducible.
The values are Philox4x32-10's (not eager's): with ``fallback_random`` set
(``$NKIPY_FALLBACK_RANDOM=1``) random ops run in CPU partitions as eager ones,
equal to eager (inductor's ``fallback_random``).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
import torch.fx

from spike_torch.lowering import AtenOpRegistry, aten_random, target_name
from spike_torch.dtypes import numpy_dtype, numpy_to_torch, torch_to_numpy
from spike_torch.lowering.codegen import _has_unlowerable_dtype

#: Random ops stay in CPU partitions, equal to eager (default: $NKIPY_FALLBACK_RANDOM).
fallback_random: bool = os.environ.get("NKIPY_FALLBACK_RANDOM", "0") not in ("", "0")

_SEED_BOUND = 2 ** 62


#: Ops whose eager kernels on the nkipy device are the CPU fallback: they draw
#: from the CPU generator there, and so do their lowerings.
CPU_GENERATOR_OPS = frozenset({"aten.native_dropout.default", "aten.normal.Tensor_float",
                               "aten.normal.float_Tensor", "aten.normal.Tensor_Tensor"})


def draw_seed(device: torch.device, generator_device: Any = None) -> torch.Tensor:
    """An int64 seed of shape () on ``device``, drawn from the default generator
    of ``generator_device`` (``device`` if None): one draw per random op per
    call, as an eager op draws."""
    gdev = torch.device(generator_device) if generator_device is not None else device
    seed = torch.empty((), dtype=torch.int64, device=gdev).random_(0, _SEED_BOUND)
    return seed if gdev == torch.device(device) else seed.to(device)


_TARGETS: Dict[str, Callable] = {}


def _from_numpy(a: Any, device: torch.device) -> Any:
    if isinstance(a, (tuple, list)):
        return tuple(_from_numpy(x, device) for x in a)
    return numpy_to_torch(np.array(a, copy=True)).to(device)


def _target(name: str) -> Callable:
    """The FX target ``nkipy_rng.<name>``: on tensors, the NumPy reference."""
    if name not in _TARGETS:
        impl = AtenOpRegistry.get(f"nkipy_rng.{name}")

        def run(seed: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            dev = seed.device
            conv = [torch_to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args]
            kw = {k: (numpy_dtype(v) if isinstance(v, torch.dtype) else v)
                  for k, v in kwargs.items() if k not in ("device", "layout", "pin_memory")}
            conv = [numpy_dtype(a) if isinstance(a, torch.dtype) else a for a in conv]
            return _from_numpy(impl(torch_to_numpy(seed), *conv, **kw), dev)

        run.__name__ = run.__qualname__ = name
        run.__module__ = "nkipy_rng"
        _TARGETS[name] = run
    return _TARGETS[name]


def _out_device(node: torch.fx.Node) -> Any:
    val = node.meta.get("val")
    val = val[0] if isinstance(val, (tuple, list)) else val
    return val.device if isinstance(val, torch.Tensor) else None


def seed_random_ops(gm: torch.fx.GraphModule) -> List[Tuple[torch.device, torch.device]]:
    """Rewrites the random nodes of ``gm`` that the device can run (see the
    module docstring); returns, per seed input it appended in order, the seed's
    device and its generator's (none with ``fallback_random``)."""
    if fallback_random:
        return []
    devices: List[Tuple[torch.device, torch.device]] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        name = aten_random.SEEDED.get(target_name(node.target))
        dev = _out_device(node)
        if name is None or dev is None or node.kwargs.get("generator") is not None \
                or _has_unlowerable_dtype(node):
            continue
        after = placeholders[-1] if placeholders else None
        if after is None:
            with gm.graph.inserting_before(next(iter(gm.graph.nodes))):
                seed = gm.graph.placeholder(f"nkipy_seed_{len(devices)}")
        else:
            with gm.graph.inserting_after(after):
                seed = gm.graph.placeholder(f"nkipy_seed_{len(devices)}")
        placeholders.append(seed)
        seed.meta["val"] = torch.empty((), dtype=torch.int64)
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(_target(name), (seed,) + tuple(node.args),
                                         dict(node.kwargs))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gen = torch.device("cpu") if target_name(node.target) in CPU_GENERATOR_OPS else dev
        gm.graph.erase_node(node)
        devices.append((dev, gen))
    if devices:
        gm.graph.lint()
        gm.recompile()
    return devices


def with_seeds(run: Callable[[List[Any]], Any],
               devices: Sequence[Tuple[torch.device, torch.device]]
               ) -> Callable[[List[Any]], Any]:
    """``run`` (boxed) called with a fresh seed per (device, generator device)
    in ``devices`` appended to its inputs (one draw each, in graph order)."""
    devices = list(devices)

    def run_seeded(args: List[Any]) -> Any:
        seeds = [draw_seed(d, g) for d, g in devices]
        full = list(args) + seeds
        args.clear()
        return run(full)
    run_seeded._boxed_call = True  # type: ignore[attr-defined]
    return run_seeded
