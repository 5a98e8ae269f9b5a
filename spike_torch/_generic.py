"""The nkipy device's eager ops: every ATen op that has no kernel of its own
for the device.

The PrivateUse1 fallback (the kernel of every operator nothing else
implements for the device) is C++ (``spike_torch/csrc/eager.cpp``): a call
whose kernel is already loaded runs from its C++ cache, without Python. Every
other call comes here: ``import spike_torch`` registers :func:`_fallback` as
the fallback of PrivateUse2, a key no tensor carries, which the C++ fallback
redispatches to. A call takes one of two paths:

* **the device path**: the single op is traced with ``make_fx`` on fake CPU
  tensors of the inputs' shapes and dtypes, with the core ATen decompositions
  the ``torch.compile`` backend uses, functionalized (an in-place or ``out=``
  op becomes its functional form plus copies into the mutated arguments). When
  every node of that graph is one the ATen op registry lowers
  (:mod:`spike_torch.lowering`), its generated NumPy source is executed in
  memory, traced with PyTorch's dtype semantics (int64 and float64 computed in
  64 bits), compiled by nkipy and loaded on the tensors' core. The loaded
  kernel is cached under (op, input shapes/dtypes/devices, non-tensor
  arguments); later calls run it directly on the tensors' own device memory
  (non-contiguous inputs are made contiguous on the device first) and copy the
  values of mutated arguments into them on the device (``out=`` tensors are
  resized as PyTorch resizes them).
* **the CPU path**: the op runs on host copies of the tensors and the results
  are copied back (mutated arguments written back into the device tensors),
  with a warning once per operator (``SPIKE_TORCH_FALLBACK_WARN=0`` silences
  it). A signature that cannot be lowered (an op without a registry entry,
  data-dependent output shapes, random ops, complex or unsupported dtypes,
  tensors on several devices, ...) is remembered, so later
  calls go straight to it. Ops returning a view of an input are refused: on
  the host they could only return a copy.

A call served by a device kernel files that kernel with the C++ cache
(``_C.eager_cache.eager_register``) under the call's key, when the kernel
takes the call's tensors as they are (every tensor on the device, results
that are single tensors, mutated arguments of the result's sizes): the next
call with that key stays in C++.

``op_stats()`` counts both paths (``device_calls``, the C++ cache's calls
included, ``cpu_fallback_calls``, ``compiles``).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import threading
import types
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

import spike

from . import _C, _env, _foreach, _numbers, _scalar_slots, device_module, dtypes

logger = logging.getLogger("spike_torch")

#: "nkipy", or "spyre" when torch_spyre loaded the device library
DEVICE_TYPE = torch._C._get_privateuse1_backend_name()

#: where eager ops on the device ran through Python (spike_torch.op_stats() adds
#: the C++ cache's calls)
stats = {"device_calls": 0, "cpu_fallback_calls": 0, "compiles": 0}

#: dtypes a kernel computes exactly (int64 and float64 in 64 bits)
_KERNEL_DTYPES = dtypes.TORCH_DTYPES

#: How many kernels one op may compile for one tensor signature (they differ in
#: their scalar arguments, which kernels bake in) before new scalar values run
#: on the CPU instead of compiling again (a learning rate that changes every
#: step would otherwise compile a kernel per step).
MAX_SCALAR_VARIANTS = 16

#: How the device stores tensors, when not strided: set by the front end that
#: loaded the library (torch_spyre's 128-byte stick tiles, see
#: :func:`set_storage_policy`). None: tensors are strided over their storage,
#: kernels read and write them by address.
_storage: Optional[Any] = None


def _compiler_args() -> str:
    return getattr(_storage, "compiler_args", "") if _storage is not None else ""


def set_storage_policy(policy: Any) -> None:
    """Makes eager kernels read and write tensors in the layout ``policy``
    describes (once, before any op runs). The policy gives:

    * ``key(t)``: what of tensor ``t`` beyond shape, dtype and device a kernel
      depends on (its strides, offset and storage layout), for the cache key;
    * ``wrap(f, ts, written)``: ``(g, fakes, images, logical)``; ``g`` computes
      ``f``'s results from the raw storages of the call's tensors ``ts``
      (``fakes``: CPU tensors of the storages' shapes and dtypes, to trace ``g``
      with) and returns them in the device layout, followed by the new contents
      of the storages of the tensors whose indices are listed in ``images``
      (those of ``written``, the tensors the op writes); once traced,
      ``logical`` holds the (shape, dtype) of each result and ``g.resized``
      the new shape of each written tensor the op resized (an empty ``out=``);
    * ``copy_storage(dst, src, nbytes)``: copies the first bytes of ``src``'s
      storage into ``dst``'s;
    * ``cpu_allowed(name)``: whether op ``name`` runs on the CPU (every other
      op the device cannot compute raises NotImplementedError);
    * ``warn_fallback(name, stacklevel)``: warns, once per op, that it runs on
      the CPU;
    * ``on_launch(name, n_in, n_out)``: a kernel is about to run (debug logs);
    * ``compiler_args`` (optional): C compiler flags for every kernel built.
    """
    global _storage
    _storage = policy


class ArgumentError(RuntimeError):
    """A fault of the call itself (tensors on two devices, say) that a storage
    policy found while planning: raised to the caller, never taken for the
    device's inability to compute the op."""


_CPU = object()          # cache value: this signature runs on the CPU
_CAPPED = object()       # not cached: MAX_SCALAR_VARIANTS kernels exist, the CPU serves
_NO_SLOTS = object()     # cache value of a slot key: the kernel bakes the values in
_SLOT = ("slot",)        # a scalar slot in a cache key (_scalar_slots)
_cache: Dict[Any, Any] = {}
_variants: Dict[Any, int] = {}
_ops: Dict[Any, "_OpInfo"] = {}
_lock = threading.RLock()
_warned: set = set()
_compile_failed: set = set()
_decomp_table: Optional[Dict[Any, Any]] = None


def clear_cache() -> None:
    """Forgets the loaded kernels and the signatures remembered for the CPU path
    (the compile cache on disk stays)."""
    with _lock:
        _cache.clear()
        _variants.clear()
        _C.eager_cache.eager_clear()


def clear_fallback_warnings() -> None:
    """Lets every operator warn once more when it runs on the CPU."""
    _warned.clear()


# ---- what an op is ----------------------------------------------------------------

#: Arguments an op's CPU kernel writes without its schema saying so (PyTorch's
#: native_batch_norm and its out= form update the running statistics in
#: training): the CPU path writes them back like any mutated argument.
_UNMARKED_WRITES: Dict[str, Tuple[Tuple[int, str], ...]] = {
    "aten::native_batch_norm": ((3, "running_mean"), (4, "running_var")),
}


#: how a call checks its written tensors for overlap (the C++ check_overlap):
#: 1, partial overlap with an argument; 2, that and overlap with itself (as
#: PyTorch's TensorIterator does, for pointwise ops); 3, any overlap with
#: another argument and with itself (index_select's assert_no_overlap)
OVERLAP_PARTIAL, OVERLAP_POINTWISE, OVERLAP_ANY = 1, 2, 3

#: ops without the pointwise tag whose CPU kernels refuse overlapping written
#: tensors (their in-place and out= forms). copy_ checks partial overlap only:
#: the device's own write-backs copy into expanded tensors that ops such as
#: masked_fill_ may write on the CPU.
_OVERLAP_OPS = {"copy": OVERLAP_PARTIAL, "where": OVERLAP_POINTWISE,
                "cumsum": OVERLAP_POINTWISE, "cumprod": OVERLAP_POINTWISE,
                "floor_divide": OVERLAP_POINTWISE, "index_select": OVERLAP_ANY}


class _OpInfo:
    """What the schema of one op overload says, computed once per op."""

    __slots__ = ("name", "view", "random", "n_returns", "ret_alias", "mutable", "n_marked",
                 "device_op", "tensor_args", "slots", "overlap", "checked")

    def __init__(self, op: Any) -> None:
        schema = op._schema
        overload = schema.overload_name
        #: "aten::add.Tensor" (the name the warnings and logs show)
        self.name = schema.name + ("." + overload if overload else "")
        # a return aliasing an input without writing it is a view
        self.view = any(r.alias_info is not None and not r.alias_info.is_write
                        for r in schema.returns)
        self.random = torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())
        self.n_returns = len(schema.returns)
        args = schema.arguments
        #: (position, name) of the Tensor arguments (where a wrapped number may come
        #: as a Python scalar)
        self.tensor_args: List[Tuple[int, str]] = [
            (i, a.name) for i, a in enumerate(args) if str(a.type) in ("Tensor", "Optional[Tensor]")]
        #: (position, name) of every argument the op writes (in-place self, out=)
        self.mutable: List[Tuple[int, str]] = [
            (i, a.name) for i, a in enumerate(args)
            if a.alias_info is not None and a.alias_info.is_write]
        #: how many of those the schema marks (the first ones)
        self.n_marked = len(self.mutable)
        # Ops whose kernels write arguments their schema does not mark: batch norm
        # in training updates running_mean/running_var in place.
        self.mutable += [m for m in _UNMARKED_WRITES.get(schema.name, ())
                         if m not in self.mutable]
        #: per return: the (position, name) of the argument it aliases, or None
        self.ret_alias: List[Optional[Tuple[int, str]]] = []
        for r in schema.returns:
            found = None
            if r.alias_info is not None and r.alias_info.is_write:
                for i, a in enumerate(args):
                    if a.alias_info is not None and a.alias_info.is_write and \
                            a.alias_info.before_set == r.alias_info.before_set:
                        found = (i, a.name)
                        break
            self.ret_alias.append(found)
        #: (position, name) of the arguments whose floats kernels read at run time
        self.slots = _scalar_slots.slot_positions(schema)
        #: how a call checks its written tensors for overlap (0: not at all)
        base = schema.name.split("::")[-1].rstrip("_")
        self.overlap = 0
        if self.mutable and not base.startswith("_foreach"):
            self.overlap = _OVERLAP_OPS.get(base, OVERLAP_POINTWISE if torch.Tag.pointwise in
                                            getattr(op, "tags", ()) else 0)
        #: whether its alpha or value is checked (_scalar_slots.check)
        self.checked = base in _scalar_slots.CHECKED_OPS
        #: whether a device kernel may serve it at all
        self.device_op = not self.view and not self.random and not any(
            r.alias_info is not None and r.alias_info.is_write and a is None
            for r, a in zip(schema.returns, self.ret_alias))


def _info(op: Any) -> _OpInfo:
    info = _ops.get(op)
    if info is None:
        info = _ops[op] = _OpInfo(op)
    return info


def _arg(args: Sequence[Any], kwargs: Dict[str, Any], pos: int, name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[pos] if pos < len(args) else None


# ---- signatures -------------------------------------------------------------------

def _sig(a: Any, ts: List[torch.Tensor]) -> Any:
    """The cache-key part of one argument; appends its tensors to ``ts`` (the
    order :func:`_fill` puts them back in)."""
    if isinstance(a, torch.Tensor):
        ts.append(a)
        if _storage is not None:
            return (a.shape, a.dtype, a.device, _storage.key(a))
        if a.device.type == DEVICE_TYPE and not a.is_contiguous():
            return (a.shape, a.dtype, a.device, _perm(a))
        return (a.shape, a.dtype, a.device)
    if isinstance(a, (list, tuple)):
        return tuple([_sig(x, ts) for x in a])
    if isinstance(a, float):
        return ("f", a.hex())     # 0.0 and -0.0 differ, NaN equals itself
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return ("i", a)
    return a


def _perm(t: torch.Tensor) -> Optional[Tuple[int, ...]]:
    """The order of a non-contiguous tensor's dims from the outermost in memory,
    when in that order it is contiguous (a transpose or permute of a contiguous
    block: kernels read it as it lies); else None (the call copies it
    contiguous). The C++ cache's ``dense_perm`` is the same rule."""
    if t.is_contiguous():
        return None
    strides = t.stride()
    perm = tuple(sorted(range(t.dim()), key=lambda d: (-strides[d], d)))
    return perm if t.permute(perm).is_contiguous() else None


def _fill(a: Any, it: Any) -> Any:
    """``a`` with each tensor replaced by the next item of ``it``."""
    if isinstance(a, torch.Tensor):
        return next(it)
    if isinstance(a, (list, tuple)):
        return type(a)(_fill(x, it) for x in a)
    return a


def _written(info: _OpInfo, args: Sequence[Any], kwargs: Dict[str, Any],
             marked: bool = False) -> List[int]:
    """Indices, among a call's tensors in :func:`_sig` order, of those the op
    writes (``marked``: those its schema marks written)."""
    mutable = info.mutable[:info.n_marked] if marked else info.mutable
    positions = {p for p, _ in mutable}
    names = {n for _, n in mutable}
    out: List[int] = []
    idx = 0
    for pos, a in enumerate(args):
        n = len(_leaves(a))
        if pos in positions:
            out.extend(range(idx, idx + n))
        idx += n
    for name, v in kwargs.items():
        n = len(_leaves(v))
        if name in names:
            out.extend(range(idx, idx + n))
        idx += n
    return out


def _same_as(ts: List[torch.Tensor], written: Sequence[int]) -> Tuple[int, ...]:
    """Per index w of ``written``, the first other index of ``ts`` holding the very
    tensor ``ts[w]``, or -1: a written tensor that is also another argument
    (addcmul_'s ``out=`` self) may be updated in place by the kernel, so which
    one it is belongs to the key (the C++ cache's ``append_same_tensors``)."""
    return tuple(next((j for j, t in enumerate(ts) if j != w and t is ts[w]), -1)
                 for w in written)


def _map(a: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(a, (list, tuple)):
        return type(a)(_map(x, fn) for x in a)
    return fn(a)


# ---- the entry points -------------------------------------------------------------

def _fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    return call(op, args, kwargs)


def call(op: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
    """Runs ``op(*args, **kwargs)`` for tensors on the nkipy device: as a device
    kernel when the op lowers, else on the CPU."""
    hook = _HOOKS.get(op)
    if hook is not None:
        return hook(*args, **kwargs)
    info = _ops.get(op) or _info(op)
    if info.name in _FOREACH_SERVED:
        if _foreach.overlapping(args):     # one element after another, as the CPU
            return op.redispatch(_foreach.LOOP, *args, **kwargs)
        if not _foreach.fused(args):
            return _foreach.run_in_groups(op, args, kwargs)
    if info.device_op and (_storage is None or not _storage.cpu_allowed(info.name)):
        slots = _scalar_slots.take(info.slots, args, kwargs) \
            if info.slots and _storage is None else []
        key, plan, ts = _lookup(op, info, args, kwargs, slots)
        # what the CPU refuses raises here, in the CPU's order: overlapping
        # written tensors, then an alpha or value it cannot take (per slot,
        # the dtype its value must fit, which the C++ cache checks later)
        if info.overlap:
            _C.eager_cache.eager_check_overlap(ts, _written(info, args, kwargs), info.overlap)
        limits = _scalar_slots.check(op._schema, info.slots, args, kwargs) \
            if info.checked else []
        if plan is None:
            plan = _make_plan(op, info, key, args, kwargs, ts, len(slots))
        if plan is _NO_SLOTS:      # a kernel with these values baked in
            slots = []
            key, plan, ts = _lookup(op, info, args, kwargs, slots)
            if plan is None:
                plan = _make_plan(op, info, key, args, kwargs, ts, 0)
        if plan is _CAPPED:
            return _cpu(op, info, args, kwargs, capped=True)
        if plan is not _CPU:
            result = plan.run(args, kwargs, ts, slots)
            if plan.fast is not None:   # the next such call stays in C++
                _C.eager_cache.eager_register(info.name, ts, plan.kern.model_ref, *plan.fast,
                                              limits if slots else [], info.overlap)
            return result
    return _cpu(op, info, args, kwargs)


def _lookup(op: Any, info: _OpInfo, args: Sequence[Any], kwargs: Dict[str, Any],
            slots: Sequence[float]) -> Tuple[Any, Any, List[torch.Tensor]]:
    """(key, cached plan or None, tensors) of a call; with ``slots``, the key
    has a slot where each of them is (see :mod:`._scalar_slots`)."""
    ts: List[torch.Tensor] = []
    if slots:
        args, kwargs = _scalar_slots.substitute(info.slots, args, kwargs, [_SLOT] * len(slots))
    try:
        key = (op, bool(slots), tuple([_sig(a, ts) for a in args]),
               tuple([(k, _sig(v, ts)) for k, v in kwargs.items()]))
        if info.n_marked:
            key += (_same_as(ts, _written(info, args, kwargs, marked=True)),)
        return key, _cache.get(key), ts
    except TypeError:          # an unhashable argument
        return None, _CPU, ts


def _equal(self: torch.Tensor, other: torch.Tensor) -> bool:
    """``torch.equal``: a Python bool, which no kernel returns; computed as the
    device kernels of ``eq`` and ``all`` and one element read back."""
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return bool(torch.ops.aten.eq.Tensor(self, other).all().item())


def _flat_nonzero(flat: torch.Tensor) -> torch.Tensor:
    """The positions of the nonzero elements of a 1-D device tensor, ascending
    (int64): the count read back, then a sort of position keys in which the
    zero elements' come last (device kernels of known output shapes)."""
    n = flat.numel()
    mask = flat if flat.dtype == torch.bool else flat != 0
    k = int(mask.sum().item())
    pos = torch.arange(n, device=flat.device)
    if k == n:
        return pos
    keys = torch.where(mask, pos, pos + n)
    return torch.sort(keys).values[:k]


def _coords(flat_idx: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Flat positions as (k, ndim) coordinates in ``shape``."""
    cols = []
    rest = flat_idx
    for size in reversed(shape):
        cols.append(torch.remainder(rest, size))
        rest = torch.div(rest, size, rounding_mode="floor")
    return torch.stack(cols[::-1], dim=1)


def _nonzero(self: torch.Tensor) -> torch.Tensor:
    """``nonzero``: the output's length depends on the values, so the count is
    read back first and the indices computed by device kernels of that length."""
    if self.dim() == 0 or self.numel() == 0:
        k = int(self.ne(0).sum().item()) if self.numel() else 0
        return torch.zeros((k, self.dim()), dtype=torch.int64, device=self.device)
    idx = _flat_nonzero(self.reshape(-1))
    if idx.numel() == 0:
        return torch.zeros((0, self.dim()), dtype=torch.int64, device=self.device)
    return _coords(idx, self.shape)


def _nonzero_static(self: torch.Tensor, *, size: int, fill_value: int = -1) -> torch.Tensor:
    """``nonzero_static``: the first ``size`` rows of :func:`_nonzero`, padded with
    ``fill_value``."""
    rows = _nonzero(self)[:size]
    if rows.shape[0] == size:
        return rows.contiguous()
    pad = torch.full((size - rows.shape[0], self.dim()), fill_value, dtype=torch.int64,
                     device=self.device)
    return torch.cat([rows, pad])


def _masked_select(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_select``: the broadcast elements where ``mask`` holds, by their
    positions (:func:`_flat_nonzero`)."""
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    a, m = torch.broadcast_tensors(self, mask)
    idx = _flat_nonzero(m.reshape(-1))
    return a.reshape(-1)[idx]


#: ops whose result is not a tensor or has a data-dependent shape, run as the
#: device ops they are made of
_HOOKS: Dict[Any, Callable[..., Any]] = {
    torch.ops.aten.equal.default: _equal,
    torch.ops.aten.nonzero.default: _nonzero,
    torch.ops.aten.nonzero_static.default: _nonzero_static,
    torch.ops.aten.masked_select.default: _masked_select,
}


# ---- the CPU path -----------------------------------------------------------------

def _warn(info: _OpInfo) -> None:
    if info.name not in _warned:
        _warned.add(info.name)
        if _storage is not None:
            _storage.warn_fallback(info.name, _user_level())
        elif _env.fallback_warnings_enabled():
            warnings.warn(f"{DEVICE_TYPE}: operator '{info.name}' has no {DEVICE_TYPE} implementation for these "
                          "arguments; it runs on the CPU (tensors are copied to the host and "
                          "back). This warning is shown once per operator; set "
                          "SPIKE_TORCH_FALLBACK_WARN=0 to silence it.", stacklevel=_user_level())


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


_DYNAMO_DIR = os.path.join(os.path.dirname(torch.__file__), "_dynamo") + os.sep


def _user_level() -> int:
    """The ``stacklevel`` of the first frame outside spike_torch (the user's call),
    past the Dynamo wrapper the kernels are registered under (device_module.Library)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith((_PACKAGE_DIR, _DYNAMO_DIR)):
        level += 1
        frame = frame.f_back
    return level


def _target_device(args: Sequence[Any], kwargs: Dict[str, Any]) -> Optional[torch.device]:
    """The nkipy device the results go to: that of the first nkipy tensor (or
    device argument). Raises PyTorch's error, as CUDA does, when tensors lie on
    two nkipy devices, or a floating CPU tensor that is not a scalar (0-dim)
    comes with nkipy tensors."""
    found: List[torch.device] = []
    tensor_device: List[torch.device] = []

    host: List[torch.device] = []

    def look(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.device.type == DEVICE_TYPE:
            if tensor_device and a.device != tensor_device[0]:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    f"devices, {tensor_device[0]} and {a.device}!")
            tensor_device.append(a.device)
            found.append(a.device)
        elif isinstance(a, torch.Tensor) and a.dim() > 0 and \
                (a.is_floating_point() or a.is_complex()):
            host.append(a.device)     # CPU data beside device data (index tensors are fine)
        elif isinstance(a, torch.device) and a.type == DEVICE_TYPE:
            found.append(a if a.index is not None else
                         torch.device(DEVICE_TYPE, _C.lib.spike_torch_get_device()))
        return a

    for a in list(args) + list(kwargs.values()):
        _map(a, look)
    if tensor_device and host:
        raise RuntimeError("Expected all tensors to be on the same device, but found at least "
                           f"two devices, {tensor_device[0]} and {host[0]}!")
    return found[0] if found else None


def _cpu(op: Any, info: _OpInfo, args: Sequence[Any], kwargs: Dict[str, Any],
         capped: bool = False) -> Any:
    """Runs ``op`` on host copies of the device tensors; results come back to the device.

    A device whose front end allows the CPU only for some ops (``cpu_allowed``
    of the storage policy) still runs here what the device has a kernel for
    but may not compile again (``capped``: MAX_SCALAR_VARIANTS scalar variants)
    and random ops (their generator state lives with the CPU path), both with
    the front end's fallback warning; any other op raises NotImplementedError."""
    device = _target_device(args, kwargs)     # tensors on two devices: PyTorch's error
    if _storage is not None and not (capped or info.random or _storage.cpu_allowed(info.name)):
        raise NotImplementedError(
            f"Could not run '{info.name}' with arguments from the '{DEVICE_TYPE}' backend: no "
            f"{DEVICE_TYPE} kernel computes it for these arguments")
    stats["cpu_fallback_calls"] += 1
    _warn(info)
    if _env.debug_enabled():
        _C.lib.spike_torch_debug_log(f"CPU fallback: {info.name}".encode())
    if info.view:
        raise RuntimeError(
            f"{DEVICE_TYPE}: operator '{info.name}' returns a view of its input, which the CPU fallback "
            "can only return as a copy (writes through it would be lost); it is not supported "
            "on the nkipy device")

    def to_cpu(a: Any) -> Any:
        if isinstance(a, torch.Tensor) and a.device.type == DEVICE_TYPE:
            return a.cpu()
        if isinstance(a, torch.device) and a.type == DEVICE_TYPE:
            return torch.device("cpu")
        return a

    host_args = [_map(a, to_cpu) for a in args]
    host_kwargs = {k: _map(v, to_cpu) for k, v in kwargs.items()}
    if info.tensor_args and _numbers.has_numbers(info, host_args, host_kwargs):
        host_args, host_kwargs = _numbers.unwrap(info, host_args, host_kwargs,
                                                 _numbers.maker(info, host_args, host_kwargs))
        res = _numbers.opmath_call(info, op, host_args, host_kwargs)
    else:
        res = op(*host_args, **host_kwargs)

    # write what the op mutated back into the device tensors
    for pos, name in info.mutable:
        orig = _arg(args, kwargs, pos, name)
        host = _arg(host_args, host_kwargs, pos, name)
        for o, h in zip(_leaves(orig), _leaves(host)):
            if o is h:             # a CPU tensor: mutated where it is
                continue
            if o.shape != h.shape:
                o.resize_(h.shape)
            o.copy_(h)

    def back(r: Any) -> Any:
        if isinstance(r, torch.Tensor) and device is not None and r.device.type == "cpu":
            return r.to(device)
        return r

    if info.n_returns == 0:
        return None
    rets = list(res) if info.n_returns > 1 else [res]
    out = []
    for r, alias in zip(rets, info.ret_alias):
        if alias is not None:
            out.append(_arg(args, kwargs, *alias))
        else:
            out.append(_map(r, back))
    return tuple(out) if info.n_returns > 1 else out[0]


def _leaves(a: Any) -> List[Any]:
    if isinstance(a, torch.Tensor):
        return [a]
    if isinstance(a, (list, tuple)):
        return [t for x in a for t in _leaves(x)]
    return []


# ---- the device path: planning ----------------------------------------------------

def _decompositions() -> Dict[Any, Any]:
    global _decomp_table
    if _decomp_table is None:
        from .lowering.registry import core_decompositions

        table = core_decompositions()
        # batch norm in training writes its running statistics without its schema
        # saying so (_UNMARKED_WRITES): it runs as the registry's functional form,
        # whose new statistics copy_ writes back (functionalization turns that into
        # updates the plan makes on the device)
        table[torch.ops.aten.native_batch_norm.default] = _batch_norm_update
        table[torch.ops.aten._batch_norm_with_update_functional.default] = \
            _batch_norm_with_update_functional
        # a foreach op's graph: its per-tensor ops (one kernel for the list)
        table.update(_foreach.decompositions())
        _decomp_table = table
    return _decomp_table


#: How many times a plan traces an op again, each time decomposing the ops of
#: its graph that the registry does not lower but PyTorch can decompose.
_MAX_EXTRA_DECOMPOSITION_ROUNDS = 3

#: Graph nodes the plan itself handles (copies and resizes into mutated inputs).
_PLAN_NODES = ("aten::copy_", "aten::resize_", "aten::as_strided_")


def _extra_decompositions(gm: torch.fx.GraphModule, table: Dict[Any, Any]) -> Dict[Any, Any]:
    """Decompositions (from PyTorch's whole table, beyond the core ATen ones) of
    the ops in ``gm`` that the registry does not lower and ``table`` does not
    decompose yet."""
    from torch._decomp import decomposition_table

    lowering = _lowering()
    extra: Dict[Any, Any] = {}
    for n in gm.graph.nodes:
        t = n.target
        if n.op != "call_function" or not isinstance(t, torch._ops.OpOverload) or \
                t in table or t in extra or t._schema.name in _PLAN_NODES:
            continue
        fn = decomposition_table.get(t)
        if fn is not None and not lowering.is_supported_node(n):
            extra[t] = _not_half(fn)
    return extra


_HALF = (torch.float16, torch.bfloat16)


def _not_half(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a decomposition beyond core ATen) for operands in float32, float64
    and integer dtypes; half-precision operands decline it (the op runs on the
    CPU). Those decompositions compute in the operands' dtype step by step, and
    PyTorch's CPU kernels for half differ among themselves: upsampling computes
    in float32 and rounds once, grid_sampler_2d rounds every step; neither
    matches a device kernel across ops."""
    def run(*args: Any, **kwargs: Any) -> Any:
        if any(t.dtype in _HALF for t in _leaves(list(args) + list(kwargs.values()))):
            return NotImplemented
        return fn(*args, **kwargs)
    return run


# ---- backend helpers ----------------------------------------------------------------
#
# Some public ops are CompositeExplicitAutograd kernels that call a per-backend
# helper, so the device's fallback receives the helper (cummax ->
# _cummax_helper, which writes its outputs into arguments its schema marks
# mutable but returns nothing; index_put_ -> _index_put_impl_). A helper traces
# as the public op it implements, which the registry lowers.

def _cum_helper(public: Any) -> Callable[..., None]:
    def run(self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> None:
        v, i = public(self, dim)
        values.copy_(v)
        indices.copy_(i)
    return run


def _index_put_impl_(self: torch.Tensor, indices: Any, values: torch.Tensor,
                     accumulate: bool = False, unsafe: bool = False) -> torch.Tensor:
    return self.copy_(torch.ops.aten.index_put.default(self, indices, values, accumulate))


_SUBSTITUTES: Dict[str, Callable[..., Any]] = {
    "aten::_cummax_helper": _cum_helper(torch.ops.aten.cummax.default),
    "aten::_cummin_helper": _cum_helper(torch.ops.aten.cummin.default),
    "aten::_logcumsumexp": torch.ops.aten.logcumsumexp.default,
    "aten::_index_put_impl_": _index_put_impl_,
    "aten::_cholesky_solve_helper": torch.ops.aten.cholesky_solve.default,
}


def _batch_norm_update(input: torch.Tensor, weight: Optional[torch.Tensor],
                       bias: Optional[torch.Tensor], running_mean: Optional[torch.Tensor],
                       running_var: Optional[torch.Tensor], training: bool, momentum: float,
                       eps: float) -> Any:
    """native_batch_norm in training with running statistics, as
    ``_native_batch_norm_legit_functional`` and copies into the statistics
    (other calls mutate nothing and lower as they are)."""
    if not (training and running_mean is not None and running_var is not None):
        return NotImplemented
    out, mean, invstd, new_mean, new_var = \
        torch.ops.aten._native_batch_norm_legit_functional.default(
            input, weight, bias, running_mean, running_var, True, momentum, eps)
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, mean, invstd


def _batch_norm_with_update_functional(
        input: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
        running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float,
        eps: float) -> Any:
    """The functional form of ``_batch_norm_with_update`` (what ``F.batch_norm``
    calls in training) as ``_native_batch_norm_legit_functional`` and an empty
    reserve buffer."""
    out, mean, invstd, new_mean, new_var = \
        torch.ops.aten._native_batch_norm_legit_functional.default(
            input, weight, bias, running_mean, running_var, True, momentum, eps)
    reserve = torch.empty((0,), dtype=torch.uint8, device=input.device)
    return out, mean, invstd, reserve, new_mean, new_var


def _lowering() -> Any:
    """spike_torch.lowering with every module of entries registered (the nn
    entries of ``aten_nn`` too, where the tree has them)."""
    from . import lowering

    if importlib.util.find_spec("spike_torch.lowering.aten_nn") is not None:
        importlib.import_module("spike_torch.lowering.aten_nn")
    return lowering


class _NoSlots(Exception):
    """The op's kernel cannot read its scalars at run time: one with the call's
    values baked in serves it."""


class _Refuse(Exception):
    """This signature runs on the CPU (the reason is logged at DEBUG)."""


def _small_like(a: Any, it: Any, as_float: bool) -> Any:
    """``a`` with each tensor replaced by a one-element CPU tensor of its rank
    and dtype (float32 for a non-float one with ``as_float``), taking the
    tensors' metadata from ``it`` in order. A module-level function: a nested
    recursive one is a reference cycle that kept the call's device tensors
    alive until the next garbage collection."""
    if isinstance(a, torch.Tensor):
        t = next(it)
        dt = torch.float32 if as_float and not t.is_floating_point() else t.dtype
        return torch.zeros((1,) * t.dim(), dtype=dt)
    if isinstance(a, (list, tuple)):
        return type(a)(_small_like(b, it, as_float) for b in a)
    if isinstance(a, torch.device):
        return torch.device("cpu")
    return a


def _cpu_accepts_dtypes(op: Any, args: Sequence[Any], kwargs: Dict[str, Any],
                        ts: List[torch.Tensor]) -> None:
    """Raises _Refuse where a bool or integer input is one the CPU kernel
    refuses (relu, abs or floor of a mask, gelu of integers, ``1 - mask``): the
    op's meta function, which the device's kernels are traced with, accepts
    many of those. Probed once per signature on one-element CPU tensors of the
    same dtypes and ranks; the call then runs on the CPU, which raises its own
    error for the real arguments."""
    if all(t.is_floating_point() for t in ts):
        return
    outs = {a.name for a in op._schema.arguments if a.is_out}

    def probe(as_float: bool) -> Optional[str]:
        it = iter(ts)
        small = [_small_like(a, it, as_float) for a in args]
        small_kw = {k: _small_like(v, it, as_float) for k, v in kwargs.items()}
        # out= tensors without elements, which the op resizes silently (a
        # one-element out made cat.out warn of its resize on the user's call)
        for k in outs.intersection(small_kw):
            small_kw[k] = _map(small_kw[k], lambda t: t.new_empty((0,)) if
                               isinstance(t, torch.Tensor) else t)
        try:
            op(*small, **small_kw)
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
            # the message only: the exception's traceback holds the frames that
            # hold the call's device tensors, which would live until a gc pass
            return f"{type(exc).__name__}: {exc}"
        return None

    refused = probe(False)
    # a refusal of the dtypes only: the same call with float tensors goes through
    # (a probe that fails either way says nothing about the dtypes)
    if refused is not None and probe(True) is None:
        raise _Refuse(f"the CPU kernel refuses these dtypes: {refused}")


def _make_plan(op: Any, info: _OpInfo, key: Any, args: Sequence[Any],
               kwargs: Dict[str, Any], ts: List[torch.Tensor], n_slots: int) -> Any:
    with _lock:
        plan = _cache.get(key)
        if plan is not None:
            return plan
        # signatures differing in scalars only: at most MAX_SCALAR_VARIANTS kernels
        # (or refusals) each, the CPU serves new values beyond that, uncached
        tkey = (op, tuple([(t.shape, t.dtype, t.device) for t in ts]))
        n = _variants.get(tkey, 0)
        if n >= MAX_SCALAR_VARIANTS:
            return _CAPPED
        _variants[tkey] = n + 1
        try:
            _cpu_accepts_dtypes(op, args, kwargs, ts)
            plan = _Plan(op, info, args, kwargs, ts, n_slots)
        except _NoSlots as exc:
            logger.debug("eager %s bakes its scalars in: %s", info.name, exc)
            _variants[tkey] = n
            plan = _NO_SLOTS
        except _Refuse as exc:
            logger.debug("eager %s on the CPU: %s", info.name, exc)
            plan = _CPU
        except ArgumentError:
            _variants[tkey] = n
            raise
        except Exception as exc:   # tracing or compiling failed: the CPU computes it
            from nkipy.compiler.build import CompileError

            # a lowering declining its arguments is expected; a kernel that does not
            # compile is a fault the user should see (once per op)
            log = logger.warning if isinstance(exc, CompileError) and \
                info.name not in _compile_failed else logger.debug
            if isinstance(exc, CompileError):
                _compile_failed.add(info.name)
            log("eager %s on the CPU: %s: %s", info.name, type(exc).__name__, exc)
            plan = _CPU
        _cache[key] = plan
        return plan


def _check_inputs(ts: List[torch.Tensor]) -> torch.device:
    device = None
    for t in ts:
        if t.device.type == DEVICE_TYPE:
            if device is None:
                device = t.device
            elif t.device != device:
                raise _Refuse(f"tensors on {device} and {t.device}")
        elif not (t.device.type == "cpu" and (t.dim() == 0 or not t.is_floating_point())):
            # CPU index tensors (index_put's indices) are copied to the device per call
            raise _Refuse(f"a tensor on {t.device}")
        if t.dtype not in _KERNEL_DTYPES:
            raise _Refuse(f"dtype {t.dtype}")
        if t.layout != torch.strided or t.is_conj() or t.is_neg():
            raise _Refuse("not a plain strided tensor")
    if device is None:
        raise _Refuse("no tensor on the nkipy device")
    return device


_KERNEL_NAME = re.compile(r"[^0-9A-Za-z_]")


def _may_fail(graph: Any) -> bool:
    """Whether a traced kernel can fail when it runs (nkipy's run-time checks:
    indices in range, no integer division by zero)."""
    return any(n.op in ("check_index", "fail_if") or n.attrs.get("zero_div") == "raise"
               for n in graph.nodes)


def _shares_memory(t: torch.Tensor, others: Sequence[torch.Tensor], skip: int = -1) -> bool:
    """Whether ``t``'s storage is that of one of ``others`` (but ``others[skip]``)."""
    ptr = t.untyped_storage().data_ptr()
    return any(k != skip and o.untyped_storage().data_ptr() == ptr for k, o in enumerate(others))


class _Plan:
    """A loaded kernel for one signature and how a call maps onto it."""

    def __init__(self, op: Any, info: _OpInfo, args: Sequence[Any], kwargs: Dict[str, Any],
                 ts: List[torch.Tensor], n_slots: int = 0) -> None:
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.func import functionalize

        self.info = info
        self.device = _check_inputs(ts)
        #: the call's slots: how many, and per slot input of the kernel (after
        #: the tensors, in in_order's numbering) its (slot, dtype)
        self.n_slots = n_slots
        self.slot_inputs: List[Tuple[int, np.dtype, Optional[np.dtype]]] = []
        # (1) the functional graph of the op on fake CPU tensors
        #: per tensor: the order of its dims in memory when it is a permutation of
        #: a contiguous block (a transpose), which the kernel reads as it lies
        written = set(_written(info, args, kwargs)) if _storage is None else set()
        written |= {j for j, t in enumerate(ts) if any(t is ts[w] for w in written)}
        #: per ts index of a tensor the schema marks written, the first other ts
        #: index of that very tensor (an out= self), or -1: the key's _same_as,
        #: kept as indices since a cached plan must not hold the call's tensors
        marked = _written(info, args, kwargs, marked=True)
        self._same: Dict[int, int] = dict(zip(marked, _same_as(ts, marked)))
        self.perms = [_perm(t) if _storage is None and t.device.type != "cpu" and
                      i not in written else None for i, t in enumerate(ts)]
        fakes = [t if t.device.type == "cpu" else
                 torch.empty(t.shape if p is None else [t.shape[d] for d in p], dtype=t.dtype)
                 for t, p in zip(ts, self.perms)]
        unpermute = [None if p is None else [p.index(d) for d in range(len(p))]
                     for p in self.perms]
        trace_kwargs = {k: _map(v, _cpu_device) for k, v in kwargs.items()}
        trace_args = [_map(a, _cpu_device) for a in args]
        counts: List[int] = []
        numbers = bool(info.tensor_args) and _numbers.has_numbers(info, args, kwargs)
        # the slots hold one set of sentinels while tracing, then the other
        sentinels = [_scalar_slots.sentinels(n_slots, w) for w in (1, 0)] if n_slots else []
        traced_with = [trace_args, trace_kwargs]

        def f(*flat: torch.Tensor) -> List[torch.Tensor]:
            it = iter([x if u is None else x.permute(u) for x, u in zip(flat, unpermute)])
            a = [_fill(x, it) for x in traced_with[0]]
            k = {n: _fill(v, it) for n, v in traced_with[1].items()}
            if numbers:   # baked into the kernel, as the cache key has them
                a, k = _numbers.unwrap(info, a, k, _numbers.maker(info, a, k))
                res = _numbers.opmath_call(info, op, a, k)
            else:
                res = op(*a, **k)
            rets = list(res) if info.n_returns > 1 else [res] if info.n_returns else []
            out: List[torch.Tensor] = []
            counts.clear()
            for r, alias in zip(rets, info.ret_alias):
                if alias is not None:
                    counts.append(0)      # the argument itself is returned
                elif isinstance(r, torch.Tensor):
                    counts.append(1)
                    out.append(r)
                elif r is None:
                    counts.append(-1)
                elif isinstance(r, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in r):
                    counts.append(len(r) + 2)   # a list of n tensors: n + 2
                    out.extend(r)
                else:
                    raise _Refuse(f"returns a {type(r).__name__}")
            return out

        sub = _SUBSTITUTES.get(info.name)
        if sub is not None:
            op = sub     # a backend helper: traced as the public ops it implements
        #: tiled storage: the ts indices whose storages the kernel's last outputs
        #: rewrite, and the (shape, dtype) of the results it tiles
        self.images: Optional[List[int]] = None
        self.logical: List[Tuple[Tuple[int, ...], torch.dtype]] = []
        if _storage is not None:
            f, fakes, self.images, self.logical = _storage.wrap(
                f, ts, _written(info, args, kwargs))
            wrapped = f
        # core ATen decompositions first; an op the registry does not lower is
        # decomposed further with PyTorch's other decompositions where it has one
        # (upsample_bilinear2d.default, the backend form the eager op dispatches to)
        def trace_fx() -> torch.fx.GraphModule:
            table = _decompositions()
            for _ in range(_MAX_EXTRA_DECOMPOSITION_ROUNDS + 1):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # e.g. out= resize warnings: the call's
                    gm = make_fx(functionalize(f, remove="mutations_and_views"),
                                 decomposition_table=table, tracing_mode="fake")(*fakes)
                extra = _extra_decompositions(gm, table)
                if not extra:
                    return gm
                table = {**table, **extra}
            return gm

        gens = []
        for values in sentinels or [None]:
            if values is not None:
                traced_with[:] = _scalar_slots.substitute(info.slots, trace_args, trace_kwargs,
                                                          values)
            gm = trace_fx()
            self.counts = list(counts)
            #: tiled storage: new shapes of empty out= tensors the op resizes
            self.resized: Dict[int, Tuple[int, ...]] = \
                dict(wrapped.resized) if self.images is not None else {}
            gens.append(self._rewrite(gm))
        self._compile(gens[-1], [fakes[i] for i in self.in_idx], ts,
                      (gens[0], sentinels) if sentinels else None)

    def _rewrite(self, gm: torch.fx.GraphModule) -> Any:
        """Drops the trailing copies into mutated inputs (the plan does them on the
        device), checks every node lowers, then generates the kernel's source."""
        lowering = _lowering()
        graph = gm.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        output = next(n for n in graph.nodes if n.op == "output")
        results = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else \
            [output.args[0]]
        mutations: List[Tuple[int, torch.fx.Node]] = []     # (tensor index, value)
        copy_ = torch.ops.aten.copy_.default
        # an out= tensor resized (or, holding no elements, restrided) to the result's shape
        resizes = (torch.ops.aten.resize_.default, torch.ops.aten.as_strided_.default)
        for n in list(graph.nodes):
            if n.op == "call_function" and n.target is copy_ and not n.users:
                dst = n.args[0]
                if isinstance(dst, torch.fx.Node) and dst.op == "call_function" and \
                        dst.target in resizes:
                    dst = dst.args[0]
                if isinstance(dst, torch.fx.Node) and dst.op == "placeholder":
                    mutations.append((placeholders.index(dst), n.args[1]))
                    graph.erase_node(n)
        # a copy into a tensor of the graph's own (functionalization leaves those
        # of ops writing arguments their schema does not mark, batch norm's
        # running statistics): later readers of it read the copied value
        order = {n: i for i, n in enumerate(graph.nodes)}
        for n in list(graph.nodes):
            if n.op == "call_function" and n.target is copy_ and \
                    isinstance(n.args[0], torch.fx.Node) and n.args[0].op != "placeholder" and \
                    isinstance(n.args[1], torch.fx.Node):
                dst, src = n.args[0], n.args[1]
                dv, sv = dst.meta.get("val"), src.meta.get("val")
                if not (isinstance(dv, torch.Tensor) and isinstance(sv, torch.Tensor) and
                        dv.shape == sv.shape and dv.dtype == sv.dtype):
                    continue
                for user in list(dst.users):
                    if user is not n and order[user] > order[n]:
                        user.replace_input_with(dst, src)
                n.replace_all_uses_with(src)
                graph.erase_node(n)
        if mutations and self.images is not None:
            # tiled storage: the op's writes come back as storage images (wrap);
            # a write into a raw storage traced through views would be lost
            raise _Refuse("writes into its inputs' storages")
        for n in reversed(list(graph.nodes)):
            if n.op == "call_function" and n.target in resizes and not n.users and \
                    isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder":
                graph.erase_node(n)
        for n in graph.nodes:
            if n.op == "get_attr":
                raise _Refuse("a graph constant")
            if n.op != "call_function":
                continue
            target = n.target
            if isinstance(target, torch._ops.OpOverload):
                if target._schema.is_mutable:
                    raise _Refuse(f"mutating node {target}")
                if torch.Tag.nondeterministic_seeded in target.tags:
                    raise _Refuse(f"random node {target}")
            if not lowering.is_supported_node(n):
                raise _Refuse(f"no lowering for {lowering.target_name(target)}")
        outs = results + [v for _, v in mutations]
        for o in outs:
            val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
            if not isinstance(val, torch.Tensor):
                raise _Refuse("an output that is not a tensor")
            if val.dtype not in _KERNEL_DTYPES:
                raise _Refuse(f"output dtype {val.dtype}")
        output.args = (tuple(outs),)
        # inputs no node reads (out= tensors, shapes only) are not kernel inputs
        self.in_idx: List[int] = []
        for i, p in enumerate(placeholders):
            if p.users:
                self.in_idx.append(i)
            else:
                graph.erase_node(p)
        graph.lint()
        gm.recompile()
        self.out_specs = [(tuple(o.meta["val"].shape), o.meta["val"].dtype) for o in outs]
        self.n_results = len(results) - (len(self.images) if self.images is not None else 0)
        self.mutations = [i for i, _ in mutations]
        # a written tensor the kernel also reads, with the value's shape and
        # dtype, is updated in place: the kernel's output aliases that input
        # (per mutation, its position among the kernel's inputs, or -1)
        self.inplace = [self._inplace(i, self.out_specs[self.n_results + k], placeholders)
                        for k, i in enumerate(self.mutations)]
        examples = [torch.empty(0) for _ in self.in_idx]   # only "a tensor" matters here
        return lowering.generate_source(gm, examples)

    def _inplace(self, i: int, spec: Tuple[Tuple[int, ...], torch.dtype],
                 placeholders: List[torch.fx.Node]) -> int:
        """The position among the kernel's inputs of the tensor written as ts
        index ``i`` when the kernel can update it in place (it reads that very
        tensor -- as ``i`` itself, or as another argument when the schema marks
        ``i`` written (out= self) --, of the value's shape and dtype), else -1."""
        if self.images is not None:
            return -1
        for j in (i, self._same.get(i, -1)):    # (-1: no other argument holds it)
            val = placeholders[j].meta.get("val") if j >= 0 else None
            if j in self.in_idx and self.perms[j] is None and isinstance(val, torch.Tensor) \
                    and (tuple(val.shape), val.dtype) == spec:
                return self.in_idx.index(j)
        return -1

    def _compile(self, gen: Any, inputs: List[torch.Tensor], inputs_all: List[torch.Tensor],
                 slotted: Optional[Tuple[Any, List[List[float]]]] = None) -> None:
        """Compiles and loads the kernel ``gen`` generates; ``slotted``: the
        source generated with the other sentinels, and both sets (the last
        set is ``gen``'s), to make the slots kernel inputs."""
        from nkipy.core.dtypes import torch_semantics
        from nkipy.core.trace import trace
        from nkipy.runtime import DeviceKernel

        name = "nkipy_eager_" + _KERNEL_NAME.sub("_", self.info.name.replace("::", "_"))
        arrays = [np.broadcast_to(np.zeros((), dtypes.numpy_dtype(t.dtype)), tuple(t.shape))
                  for t in inputs]
        n_out = len(self.out_specs)

        def kernel_of(g: Any) -> Callable[..., Any]:
            mod = types.ModuleType(name)
            mod.__file__ = f"<{name}>"     # generated in memory: never read back from a file
            exec(compile(g.source, mod.__file__, "exec", dont_inherit=True), mod.__dict__)
            func = mod.nkipy_func

            def kernel(*xs: Any) -> Any:
                res = list(func(*xs))
                if len(res) != n_out:
                    raise _Refuse(f"the kernel returned {len(res)} values, expected {n_out}")
                for k, j in enumerate(self.inplace):
                    if j >= 0:     # written into the input: the output aliases it
                        xs[j][...] = res[self.n_results + k]
                        res[self.n_results + k] = xs[j]
                return tuple(res)

            kernel.__signature__ = _signature(g.tensor_inputs)   # inputs named p0, p1, ...
            return kernel

        with torch_semantics(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = trace(kernel_of(gen), *arrays, name=name)
            if any(j >= 0 for j in self.inplace) and _may_fail(graph):
                # a kernel that can fail (an index out of range, an integer
                # division by zero) must leave its arguments as they were, as
                # the CPU does: it writes fresh memory, copied after success
                self.inplace = [-1] * len(self.inplace)
                graph = trace(kernel_of(gen), *arrays, name=name)
            slot_names: List[str] = []
            if slotted is not None:
                other_gen, (other_values, values) = slotted
                other = trace(kernel_of(other_gen), *arrays, name=name)
                lifted = _scalar_slots.lift(graph, other, values, other_values)
                if lifted is None:
                    raise _NoSlots("the lowering computes with the values (the graphs traced "
                                   "with two sets of sentinels differ)")
                self.slot_inputs = lifted
                slot_names = [v.name for v in graph.inputs[len(graph.inputs) - len(lifted):]]
            kern = DeviceKernel.from_graph(graph, core_id=self.device.index,
                                           additional_compiler_args=_compiler_args())
        stats["compiles"] += 1
        ins = list(kern.input_tensors_info)
        names = list(gen.tensor_inputs) + slot_names
        if sorted(ins) != sorted(names):
            raise _Refuse(f"kernel inputs {ins} are not {names}")
        outs = list(kern.output_tensors_info.items())
        if len(outs) != n_out:
            raise _Refuse(f"the kernel has {len(outs)} outputs, expected {n_out}")
        aliases = [None] * self.n_results + [None if j < 0 else gen.tensor_inputs[j]
                                             for j in self.inplace]
        for (oname, meta), (shape, dtype), alias in zip(outs, self.out_specs, aliases):
            if meta.alias_of != alias or tuple(meta.shape) != shape or \
                    str(meta.dtype) != _KERNEL_DTYPES[dtype]:
                raise _Refuse(f"kernel output {oname} is {meta.dtype}{list(meta.shape)} "
                              f"aliasing {meta.alias_of}, expected {_KERNEL_DTYPES[dtype]}"
                              f"{list(shape)} aliasing {alias}")
        self.kern = kern
        # the model's inputs in its own order, as positions among ours (slot
        # input j is len(in_idx) + j)
        self.in_order = [names.index(n) for n in ins]
        self.fast = self._fast_spec(inputs_all)
        logger.debug("eager kernel %s compiled for %s", self.info.name,
                     [(tuple(t.shape), t.dtype) for t in inputs])

    def _fast_spec(self, ts: List[torch.Tensor]) -> Optional[Tuple[Any, ...]]:
        """The arguments of ``eager_register`` after ``(name, tensors, model)``, or None
        when the C++ cache cannot run this kernel as :meth:`run` does: a tensor
        not on the device (copied per call), a list of tensors returned, a
        mutated argument whose sizes differ from the result's (resized)."""
        if any(t.device != self.device for t in ts) or any(c >= 2 for c in self.counts):
            return None
        n = self.n_results
        if self.images is not None:
            # tiled: fresh results of the logical shapes, then the written
            # storages' images (copied over them); no resize in C++
            if self.resized:
                return None
            outs = list(self.logical) + list(self.out_specs[n:])
            mutations = list(self.images)
            inplace = [-1] * len(mutations)
        else:
            if any(tuple(ts[i].shape) != self.out_specs[n + k][0]
                   for k, i in enumerate(self.mutations)):
                return None
            outs, mutations = self.out_specs, self.mutations
            inplace = [-1 if j < 0 else self.in_order.index(j) for j in self.inplace]
        rets, k = [], 0
        for c, alias in zip(self.counts, self.info.ret_alias):
            if alias is not None:
                rets.append(("arg", alias[0]))
            elif c == -1:
                rets.append(("none", 0))
            else:
                rets.append(("output", k))
                k += 1
        n_in = len(self.in_idx)
        order = [self.in_idx[j] if j < n_in else -1 - (j - n_in) for j in self.in_order]
        return (self.device.index, order,
                [(list(shape), dtype) for shape, dtype in outs], n, mutations, rets,
                [(slot, dtypes.torch_dtype(dt),
                  None if via is None else dtypes.torch_dtype(via))
                 for slot, dt, via in self.slot_inputs], self.n_slots,
                [i >= 0 and self.perms[i] is not None for i in order], inplace)

    # ---- a call -----------------------------------------------------------------

    def run(self, args: Sequence[Any], kwargs: Dict[str, Any], ts: List[torch.Tensor],
            slots: Sequence[float] = ()) -> Any:
        kern = self.kern
        if not kern.model_ref.loaded:     # the runtime was reset: load it again
            self._reload()
            kern = self.kern
        dev = self.device
        if self.images is not None:
            return self._run_tiled(args, kwargs, ts)
        ins = []
        for i in self.in_idx:
            t = ts[i]
            if t.device.type != DEVICE_TYPE:
                t = t.to(dev)
            elif not t.is_contiguous() and self.perms[i] is None:
                t = t.contiguous()
            ins.append(t)
        outs = [torch.empty(shape, dtype=dtype, device=dev)
                for shape, dtype in self.out_specs[:self.n_results]]
        # a mutated tensor the kernel can write directly (an out= tensor of the
        # result's shape and dtype, contiguous, sharing no memory with an input)
        # is its own output buffer; others get a fresh one and a device copy.
        # One the kernel updates in place (self.inplace) is written where its
        # input lies: the tensor itself when contiguous and no other input
        # shares its memory, else a copy of it, copied back afterwards.
        direct = []
        for k, i in enumerate(self.mutations):
            dst = ts[i]
            j = self.inplace[k]
            if j >= 0:
                # the kernel writes its input j: not an argument's memory that is
                # not dst's alone (another argument sharing it, another tensor)
                arg = ts[self.in_idx[j]]
                if ins[j] is arg and (arg is not dst or _shares_memory(dst, ins, j)):
                    ins[j] = arg.clone()
                direct.append(ins[j] is dst)
                outs.append(ins[j])
                continue
            shape, dtype = self.out_specs[self.n_results + k]
            ok = dst.dtype == dtype and dst.shape == shape and dst.is_contiguous() and \
                dst.device == dev and not _shares_memory(dst, ins)
            direct.append(ok)
            outs.append(dst if ok else torch.empty(shape, dtype=dtype, device=dev))
        _C.check_live(ins + [ts[i] for i in self.mutations], f"{DEVICE_TYPE} {self.info.name}")
        # by address in the model's order (a zero-size tensor may have none);
        # the slots' values from one small buffer
        addresses = [t.data_ptr() for t in ins]
        if self.slot_inputs:
            raw = _scalar_slots.pack(slots, self.slot_inputs)
            buf = torch.tensor(list(raw), dtype=torch.uint8).to(dev)
            addresses += [buf.data_ptr() + _scalar_slots.SLOT_BYTES * j
                          for j in range(len(self.slot_inputs))]
        spike.get_spike_singleton().execute_at(
            kern.model_ref, [addresses[j] for j in self.in_order] +
            [t.data_ptr() for t in outs])
        stats["device_calls"] += 1
        for k, i in enumerate(self.mutations):
            if direct[k]:
                continue
            dst, val = ts[i], outs[self.n_results + k]
            if dst.shape != val.shape:
                if dst.numel() != 0:
                    warnings.warn(
                        f"An output with one or more elements was resized since it had shape "
                        f"{list(dst.shape)}, which does not match the required output shape "
                        f"{list(val.shape)}. This behavior is deprecated, and in a future "
                        "PyTorch release outputs will not be resized unless they have zero "
                        "elements. You can explicitly reuse an out tensor t by resizing it, "
                        "inplace, to zero elements with t.resize_(0).", stacklevel=_user_level())
                dst.resize_(val.shape)
            dst.copy_(val)
        return self._results(args, kwargs, outs)

    def _run_tiled(self, args: Sequence[Any], kwargs: Dict[str, Any],
                   ts: List[torch.Tensor]) -> Any:
        """A call on tiled storage: the kernel reads whole storages and writes
        the results' storages and new images of the written tensors' storages,
        copied into them after it ran."""
        dev = self.device
        ins = [ts[i] if ts[i].device == dev else ts[i].to(dev) for i in self.in_idx]
        outs = [torch.empty(shape, dtype=dtype, device=dev) for shape, dtype in self.logical]
        images = [torch.empty(shape, dtype=dtype, device=dev)
                  for shape, dtype in self.out_specs[self.n_results:]]
        _C.check_live(ins + [ts[i] for i in self.images], f"{DEVICE_TYPE} {self.info.name}")
        _storage.on_launch(self.info.name, len(ins), len(outs) + len(images))
        spike.get_spike_singleton().execute_at(
            self.kern.model_ref,
            [ins[j].untyped_storage().data_ptr() for j in self.in_order] +
            [t.untyped_storage().data_ptr() for t in outs + images])
        stats["device_calls"] += 1
        for i, image in zip(self.images, images):
            if i in self.resized:
                ts[i].resize_(self.resized[i])
            _storage.copy_storage(ts[i], image, image.numel() * image.element_size())
        return self._results(args, kwargs, outs)

    def _results(self, args: Sequence[Any], kwargs: Dict[str, Any],
                 outs: List[torch.Tensor]) -> Any:
        info = self.info
        if info.n_returns == 0:
            return None
        res: List[Any] = []
        k = 0
        for c, alias in zip(self.counts, info.ret_alias):
            if alias is not None:
                res.append(_arg(args, kwargs, *alias))
            elif c == -1:
                res.append(None)
            elif c == 1:
                res.append(outs[k])
                k += 1
            else:
                res.append(outs[k:k + c - 2])
                k += c - 2
        return tuple(res) if info.n_returns > 1 else res[0]

    def _reload(self) -> None:
        from nkipy.runtime import DeviceKernel

        with _lock:
            if not self.kern.model_ref.loaded:
                self.kern = DeviceKernel.from_graph(self.kern.graph, core_id=self.device.index,
                                                    additional_compiler_args=_compiler_args())


# ---- whole graphs ------------------------------------------------------------------

class _GraphInfo:
    """What :class:`_Plan` needs to know of a whole graph: ``n`` tensor results,
    no argument written (a graph that writes its inputs is refused)."""

    def __init__(self, name: str, n: int) -> None:
        self.name = name
        self.view = self.random = False
        self.device_op = True
        self.n_returns = n
        self.ret_alias: List[Optional[Tuple[int, str]]] = [None] * n
        self.mutable: List[Tuple[int, str]] = []
        self.n_marked = 0
        self.tensor_args: List[Tuple[int, str]] = []


_HALF = (torch.float16, torch.bfloat16)


class _RoundEachOp(torch.fx.Interpreter):
    """Runs a graph, rounding each op's new float16/bfloat16 result to its
    dtype as the op's eager kernel does (a fused kernel computes halves in
    float and would otherwise round only what it stores): traced, the graph's
    kernel gives the bits of its ops run eagerly, one by one. Views and
    results written in place are left alone (a copy would cut them off)."""

    def run_node(self, n: torch.fx.Node) -> Any:
        r = super().run_node(n)
        if n.op in ("call_function", "call_method", "call_module") and \
                isinstance(r, torch.Tensor) and r.dtype in _HALF:
            ins = _leaves([self.env.get(a) for a in n.all_input_nodes])
            if any(r is t for t in ins):        # written in place: rounded in place
                with torch.no_grad():
                    r.copy_(r.float().to(r.dtype))
            elif not r._is_view():              # a view's values were rounded already
                r = r.float().to(r.dtype)
        return r


def _outputs_alias(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph's outputs share memory with its inputs or with each
    other, or one is not on the device (a graph ending in ``.cpu()``), by the
    fake values Dynamo recorded (True when one is missing): one kernel returns
    fresh device tensors."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def ref(node: Any) -> Any:
        val = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None
        return StorageWeakRef(val.untyped_storage())

    seen = set()
    for p in gm.graph.nodes:
        if p.op == "placeholder":
            if "example_value" not in p.meta:
                return True
            r = ref(p)
            if r is not None:
                seen.add(r)
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    for o in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        if isinstance(o, torch.fx.Node):
            if "example_value" not in o.meta:
                return True
            val = o.meta["example_value"]
            if isinstance(val, torch.Tensor) and val.device.type != DEVICE_TYPE:
                return True
            r = ref(o)
            if r is not None:
                if r in seen:
                    return True
                seen.add(r)
    return False


def compile_graph(gm: torch.fx.GraphModule, name: str = "graph") -> Callable[..., Tuple[Any, ...]]:
    """A callable computing ``gm`` (a graph of torch ops, e.g. Dynamo's, returning
    a tuple) on device tensors as one device kernel per argument signature,
    built the way eager ops are (one kernel builder). A signature the device
    cannot compute as one kernel -- an op without a lowering, a graph that
    writes its inputs, tensors that need gradients -- runs ``gm`` op by op
    (each op an eager device op). Returns a tuple, as ``gm`` does."""
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    n_out = len(outputs) if isinstance(outputs, (list, tuple)) else 1
    info = _GraphInfo(name, n_out)
    plans: Dict[Any, Any] = {}
    # one kernel returns fresh tensors: a graph returning an input, a view of
    # one or two views of one tensor (which must stay views) runs op by op
    aliasing = _outputs_alias(gm)

    def body(*xs: Any) -> Any:
        r = _RoundEachOp(gm).run(*xs)
        r = tuple(r) if isinstance(r, (list, tuple)) else (r,)
        return r if n_out > 1 else r[0]

    def run(*args: Any) -> Tuple[Any, ...]:
        ts: List[torch.Tensor] = []
        try:
            key = tuple([_sig(a, ts) for a in args])
        except TypeError:
            return gm(*args)
        if aliasing or (torch.is_grad_enabled() and any(t.requires_grad for t in ts)):
            return gm(*args)     # views stay views; autograd records the eager ops
        plan = plans.get(key)
        if plan is None:
            try:
                with _lock:
                    plan = _Plan(body, info, args, {}, ts)
            except Exception as exc:
                logger.debug("graph %s runs op by op: %s: %s", name, type(exc).__name__, exc)
                plan = _CPU
            plans[key] = plan
        if plan is _CPU:
            return gm(*args)
        res = plan.run(args, {}, ts)
        return tuple(res) if n_out > 1 else (res,)

    return run


def _cpu_device(a: Any) -> Any:
    if isinstance(a, torch.device) and a.type == DEVICE_TYPE:
        return torch.device("cpu")
    return a


def _signature(names: Sequence[str]) -> Any:
    import inspect

    return inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                              for n in names])


# ---- registration -----------------------------------------------------------------

# kept alive for the process; kernels never compiled by Dynamo (device_module.Library)
_fallback_lib = device_module.Library("_", "IMPL")
_fallback_lib.fallback(_fallback, "PrivateUse2")   # reached from the C++ fallback


#: aten ops PyTorch has a composite kernel for, served by the fallback instead:
#: one kernel and one C++ cache lookup where the composite kernel would run
#: several ops (an empty result and the out= form, for structured ops; a batch
#: norm and an addcmul for layer norm).
SERVED_OPS = ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum", "minimum",
              "add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor",
              "neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "sin", "cos",
              "sum.dim_IntList", "mean.dim", "amax", "mm", "bmm", "addmm", "_softmax",
              "native_layer_norm")

_served_lib = device_module.Library("aten", "IMPL")


def _serve(name: str) -> None:
    """The C++ fallback becomes aten op ``name``'s PrivateUse1 kernel, and
    :func:`call` its PrivateUse2 kernel (which the fallback redispatches to;
    PrivateUse2 would otherwise run the composite kernel)."""
    packet, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, packet), overload or "default")
    _C.serve_op(name)
    _served_lib.impl(name, lambda *args, **kwargs: call(op, args, kwargs), "PrivateUse2")


for _name in SERVED_OPS + _foreach.SERVED:
    _serve(_name)
_FOREACH_SERVED = frozenset("aten::" + n for n in _foreach.SERVED)


def _lift_slots() -> None:
    """Tells the C++ call cache which arguments' floats are slots, for every
    overload of the ops of :data:`._scalar_slots.LIFT_OPS` (their keys then
    hold the slot, not the value)."""
    for base in sorted(_scalar_slots.LIFT_OPS):
        for name in (base, base + "_"):
            packet = getattr(torch.ops.aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                schema = getattr(packet, overload)._schema
                positions = _scalar_slots.slot_positions(schema)
                # (add.float and the like: TorchScript's, on no tensor, not dispatched)
                if positions and any("Tensor" in str(a.type) for a in schema.arguments):
                    full = schema.name + ("." + schema.overload_name if schema.overload_name
                                          else "")
                    _C.eager_cache.eager_lift(full, [pos for pos, _ in positions])


_lift_slots()


# ---- convolution --------------------------------------------------------------------
#
# PyTorch sends convolutions on devices other than CPU/CUDA to
# convolution_overrideable (forward) and convolution_backward_overrideable,
# whose default kernels raise. Both run here as the ops they stand for,
# aten.convolution and aten.convolution_backward: a device kernel where the
# registry lowers them, else the CPU.

def _convolution(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                 transposed: bool, output_padding: Sequence[int], groups: int) -> torch.Tensor:
    return call(torch.ops.aten.convolution.default,
                (input, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups), {})


def _convolution_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                          stride: Sequence[int], padding: Sequence[int],
                          dilation: Sequence[int], transposed: bool,
                          output_padding: Sequence[int], groups: int,
                          output_mask: Sequence[bool]) -> Tuple[Any, Any, Any]:
    channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return call(torch.ops.aten.convolution_backward.default,
                (grad_output, input, weight, [channels], stride, padding, dilation, transposed,
                 output_padding, groups, list(output_mask)), {})


_aten_lib = device_module.Library("aten", "IMPL")   # kept alive for the process
_aten_lib.impl("convolution_overrideable", _convolution, "PrivateUse1")
_aten_lib.impl("convolution_backward_overrideable", _convolution_backward, "PrivateUse1")
