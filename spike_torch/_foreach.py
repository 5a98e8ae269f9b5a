"""``torch._foreach_*`` ops on the device: one kernel for the whole list.

PyTorch runs a foreach op on a device without its own foreach kernels as a
loop of per-tensor ops (its "slow path"): an optimizer step over a model's N
parameters becomes N small kernels per foreach op, each paying a launch. Here
the in-place foreach ops are served whole (:data:`SERVED`): their call reaches
the device's fallback with every tensor of its lists, and the traced graph is
the same per-tensor ops (:func:`decompositions`, PyTorch has no foreach
decompositions) lowered into one kernel. The arithmetic is the slow path's
exactly: each element op is the one that path calls.

One kernel pays where launches dominate; on large tensors it measured slower
than the loop (AdamW over 36 tensors of 8 M elements: 34 ms fused, 26 ms op
by op; over 40 tensors of 62 K elements: 0.78 ms fused, 1.35 ms op by op).
So only tensors of at most :data:`SMALL` elements are fused, at most
:data:`FUSE_LIMIT` elements to a kernel: a call beyond that is split
(:func:`run_in_groups`) into runs of small tensors (one kernel each) and
larger tensors, each PyTorch's per-tensor op.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import torch

#: the most elements a tensor may have to be fused with others, and the most
#: a fused call's first list may hold
SMALL = 1 << 14
FUSE_LIMIT = 1 << 18

#: the dispatch keys of PyTorch's per-tensor loop of a foreach op
LOOP = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)

#: foreach op -> (per-tensor op, {foreach overload: per-tensor overload})
_ELEMENT_OPS = {
    "add": ("add", {"List": "Tensor", "Scalar": "Scalar", "ScalarList": "Scalar",
                    "Tensor": "Tensor"}),
    "sub": ("sub", {"List": "Tensor", "Scalar": "Scalar", "ScalarList": "Scalar"}),
    "mul": ("mul", {"List": "Tensor", "Scalar": "Scalar", "ScalarList": "Scalar",
                    "Tensor": "Tensor"}),
    "div": ("div", {"List": "Tensor", "Scalar": "Scalar", "ScalarList": "Scalar",
                    "Tensor": "Tensor"}),
    "addcmul": ("addcmul", {"Scalar": "default", "ScalarList": "default"}),
    "addcdiv": ("addcdiv", {"Scalar": "default", "ScalarList": "default"}),
    "lerp": ("lerp", {"Scalar": "Scalar", "List": "Tensor"}),
    "sqrt": ("sqrt", {"default": "default"}),
    "neg": ("neg", {"default": "default"}),
    "exp": ("exp", {"default": "default"}),
    "zero": ("zero", {"default": "default"}),
}

#: the in-place foreach ops whose calls the device serves whole (the forms
#: optimizers call; a functional form returns a list, which the C++ call
#: cache does not build, so those keep PyTorch's per-tensor loop)
SERVED = tuple(f"_foreach_{name}_.{overload}" if overload != "default" else
               f"_foreach_{name}_"
               for name, (_, overloads) in _ELEMENT_OPS.items() for overload in overloads)


def fused(args: Any) -> bool:
    """Whether a served foreach call runs as one kernel: each tensor of its first
    list small, all of them within :data:`FUSE_LIMIT`."""
    sizes = [t.numel() for t in args[0]]
    return all(n <= SMALL for n in sizes) and sum(sizes) <= FUSE_LIMIT


def _extent(t: torch.Tensor) -> Tuple[int, int]:
    """The bytes [lo, hi) a (non-empty) tensor's elements span."""
    lo = t.data_ptr()
    if t.is_contiguous():
        return lo, lo + t.nbytes
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return lo, lo + (last + 1) * t.element_size()


def overlapping(args: Any) -> bool:
    """Whether a tensor the foreach call writes (its first list) shares memory
    with another tensor of the call, but itself at its own position in another
    list (``_foreach_add_([a, a], ...)``, ``([a, b], [b, a])``, overlapping
    views): the CPU applies the list's elements one after another, each seeing
    the writes before it, so such a call runs as that loop. One sweep over the
    tensors' byte spans in address order."""
    spans = sorted((*_extent(t), li, pos, id(t))
                   for li, a in enumerate(args) if isinstance(a, (list, tuple))
                   for pos, t in enumerate(a) if isinstance(t, torch.Tensor) and t.numel())
    for k, (lo, hi, li, pos, tid) in enumerate(spans):
        for lo2, _, li2, pos2, tid2 in spans[k + 1:]:
            if lo2 >= hi:
                break
            if (li == 0 or li2 == 0) and not (pos == pos2 and tid == tid2):
                return True
    return False


def run_in_groups(op: Any, args: Any, kwargs: Any) -> None:
    """An in-place foreach call :func:`fused` refuses, as calls on runs of
    consecutive small tensors within :data:`FUSE_LIMIT` together (each one
    kernel, cached like any call) and, for a larger tensor, PyTorch's own
    per-tensor op. Every list argument (tensors or scalars) is split alike; the
    items of a foreach call are independent, so the grouping changes nothing."""
    n = len(args[0])
    groups: List[List[int]] = []
    run: List[int] = []
    size = 0
    for i, t in enumerate(args[0]):
        small = t.numel() <= SMALL
        if run and (not small or size + t.numel() > FUSE_LIMIT):
            groups.append(run)
            run, size = [], 0
        if not small:
            groups.append([i])
            continue
        run.append(i)
        size += t.numel()
    if run:
        groups.append(run)

    def pick(v: Any, idx: List[int]) -> Any:
        return [v[i] for i in idx] if isinstance(v, (list, tuple)) and len(v) == n else v

    for idx in groups:
        sub = [pick(a, idx) for a in args]
        sub_kwargs = {k: pick(v, idx) for k, v in kwargs.items()}
        if fused(sub):
            op(*sub, **sub_kwargs)
        else:
            op.redispatch(LOOP, *sub, **sub_kwargs)


def _per_tensor(element: Any) -> Callable[..., Any]:
    """A decomposition of a foreach op into ``element`` applied to the i-th
    item of each list argument (a scalar list's i-th scalar) and the other
    arguments as they are; a positional argument the element takes by keyword
    only (addcmul's ``value``) is passed by its name."""
    schema = element._schema
    positional = sum(1 for a in schema.arguments if not a.kwarg_only)
    keyword = [a.name for a in schema.arguments if a.kwarg_only]

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        out = []
        for i in range(len(args[0])):
            item = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
            kw = {k: v[i] if isinstance(v, (list, tuple)) else v for k, v in kwargs.items()}
            kw.update(zip(keyword, item[positional:]))
            out.append(element(*item[:positional], **kw))
        return out

    return decomposition


def _mul_rounded_scalar(x: torch.Tensor, s: Any) -> torch.Tensor:
    """``_foreach_mul_(tensors, s)``'s per-tensor product as the CPU's foreach
    kernel computes it: by ``s`` converted to the tensor's dtype first (a
    float16/bfloat16 list is multiplied by s rounded to half, where a plain
    ``t.mul_(s)`` takes s in float32; div takes it in float32 in both)."""
    dtype = x.dtype if x.dtype.is_floating_point else torch.result_type(x, s)
    return torch.ops.aten.mul.Tensor(x, torch.full((), s, dtype=dtype))


_mul_rounded_scalar._schema = torch.ops.aten.mul.Scalar._schema  # (for _per_tensor)


def decompositions() -> Dict[Any, Callable[..., Any]]:
    """{foreach op overload: its per-tensor decomposition}, for the functional
    forms (functionalization turns the served in-place forms into them)."""
    table: Dict[Any, Callable[..., Any]] = {}
    for name, (element, overloads) in _ELEMENT_OPS.items():
        packet = getattr(torch.ops.aten, f"_foreach_{name}", None)
        element_packet = getattr(torch.ops.aten, element)
        if packet is None:
            continue
        for overload, element_overload in overloads.items():
            op = getattr(packet, overload, None)
            if op is None:
                continue
            element_op = getattr(element_packet, element_overload)
            if element == "mul" and element_overload == "Scalar":
                element_op = _mul_rounded_scalar
            table[op] = _per_tensor(element_op)
    return table
