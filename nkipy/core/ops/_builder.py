"""Emitting IR nodes for the tracer: shape/dtype inference and normalisation.

Every helper takes and returns :class:`nkipy.core.ir.Value` objects of the active
trace context and keeps the IR conventions (elementwise operands share one dtype
and broadcast; axes non-negative and sorted; no 64-bit dtypes). Helpers skip
no-op nodes (a cast to the same dtype, a reshape to the same shape, ...).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Sequence

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import PREDICATES, Value
from nkipy.core.trace import TraceContext, current_context

BOOL = np.dtype(bool)
INT32 = np.dtype(np.int32)
FLOAT32 = np.dtype(np.float32)


def ctx() -> TraceContext:
    c = current_context()
    if c is None:  # pragma: no cover - callers check first
        raise RuntimeError("no kernel is being traced")
    return c


def emit1(op: str, inputs: Sequence[Value], attrs: dict | None, shape: Sequence[int],
          dtype: Any) -> Value:
    return ctx().emit(op, inputs, attrs, [(tuple(shape), dtype)]).output


def const(value: Any, dtype: Any = None) -> Value:
    return ctx().constant(value, dtype)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    a = int(axis)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(f"{what} {axis} is out of bounds for array of dimension {ndim}")
    return a % ndim if ndim else 0


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """None -> all axes; int or sequence -> sorted non-negative tuple (no repeats)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = [normalize_axis(a, ndim) for a in axis]
    else:
        axes = [normalize_axis(axis, ndim)]
    if len(set(axes)) != len(axes):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(axes))


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError("operands could not be broadcast together with shapes "
                         + " ".join(str(tuple(s)) for s in shapes)) from None


# -- elementwise ---------------------------------------------------------

def cast(v: Value, dtype: Any) -> Value:
    dt = _dt.check_supported(dtype, "a cast")
    if v.dtype == dt:
        return v
    torch8 = _dt.in_torch_semantics() and (_dt.is_float8(dt) or _dt.is_float8(v.dtype))
    if v.node is not None and v.node.op == "constant" and not torch8:
        return const(np.asarray(v.node.attrs["value"]).astype(dt))
    # under torch_semantics an 8-bit float converts as PyTorch's CPU does
    # (E4M3FN saturates, NaN is 0x7F; ctext.cast_c)
    attrs = {"dtype": dt, "float8": "torch"} if torch8 else {"dtype": dt}
    return emit1("cast", [v], attrs, v.shape, dt)


def unary(op: str, v: Value) -> Value:
    return emit1(op, [v], None, v.shape, BOOL if op in PREDICATES else v.dtype)


def binary(op: str, a: Value, b: Value) -> Value:
    if a.dtype != b.dtype:  # pragma: no cover - internal misuse
        raise TypeError(f"{op}: operand dtypes differ ({a.dtype}, {b.dtype})")
    shape = broadcast_shapes(a.shape, b.shape)
    attrs = None
    if op in INT_DIVISIONS and a.dtype.kind in "iu" and _dt.zero_div_raises():
        attrs = {"zero_div": "raise"}   # the kernel fails on a zero divisor
    return emit1(op, [a, b], attrs, shape, BOOL if op in PREDICATES else a.dtype)


#: Binary ops that divide integers: with ``zero_div="raise"`` a zero divisor
#: is an error of the execution (torch semantics), else the result is 0.
INT_DIVISIONS = frozenset({"div", "floor_div", "mod"})


def fail_if(bad: Value, x: Value, message: str) -> Value:
    """x, with the execution failing (``message``) where any element of
    ``bad`` (broadcastable to x) is true."""
    if bad.dtype != BOOL:
        bad = cast(bad, BOOL)
    if broadcast_shapes(bad.shape, x.shape) != x.shape:
        raise ValueError(f"fail_if: condition of shape {bad.shape} does not broadcast to "
                         f"{x.shape}")
    return emit1("fail_if", [bad, x], {"message": str(message)}, x.shape, x.dtype)


_OP_CONTEXT: contextvars.ContextVar[str | None] = contextvars.ContextVar("nkipy_op_context",
                                                                         default=None)


@contextlib.contextmanager
def op_context(name: str | None) -> Iterator[None]:
    """Names the operation being traced (an ATen op a lowering implements): the
    run-time checks it emits (index bounds) name it in their messages."""
    token = _OP_CONTEXT.set(name)
    try:
        yield
    finally:
        _OP_CONTEXT.reset(token)


def check_index(x: Value, low: int, size: int, axis: int) -> Value:
    """x (integer indices) with the execution failing (IndexError, naming the
    first bad value, the axis, its size and the op being traced) where a value
    lies outside ``[low, size)``: ``low`` is ``-size`` where negative indices
    count from the end (the result holds them as ``x + size``, in ``[0, size)``),
    0 where they are errors."""
    op = _OP_CONTEXT.get()
    message = (f"IndexError: index {{index}} is out of bounds for axis {axis} with size {size}"
               + (f" (in {op})" if op else ""))
    return emit1("check_index", [x], {"low": int(low), "size": int(size), "message": message},
                 x.shape, x.dtype)


def where(c: Value, a: Value, b: Value) -> Value:
    if c.dtype != BOOL:
        c = cast(c, BOOL)
    shape = broadcast_shapes(c.shape, a.shape, b.shape)
    return emit1("where", [c, a, b], None, shape, a.dtype)


# -- shapes --------------------------------------------------------------

def broadcast_to(v: Value, shape: Sequence[int]) -> Value:
    shape = tuple(int(s) for s in shape)
    if v.shape == shape:
        return v
    if broadcast_shapes(v.shape, shape) != shape:
        raise ValueError(f"cannot broadcast an array of shape {v.shape} to shape {shape}")
    return emit1("broadcast_to", [v], {"shape": shape}, shape, v.dtype)


def reshape(v: Value, shape: Sequence[int]) -> Value:
    shape = tuple(int(s) for s in shape)
    if int(np.prod(shape, dtype=np.int64)) != v.size:
        raise ValueError(f"cannot reshape array of size {v.size} into shape {shape}")
    if v.shape == shape:
        return v
    if v.node is not None and v.node.op == "reshape":  # reshape of a reshape
        v = v.node.inputs[0]
        if v.shape == shape:
            return v
    return emit1("reshape", [v], {"shape": shape}, shape, v.dtype)


def transpose(v: Value, perm: Sequence[int]) -> Value:
    perm = tuple(int(p) for p in perm)
    if sorted(perm) != list(range(v.ndim)):
        raise ValueError(f"axes {perm} don't match array of dimension {v.ndim}")
    if perm == tuple(range(v.ndim)):
        return v
    # a transpose that only moves size-1 axes is a reshape
    moved = [v.shape[p] for p in perm]
    if [d for d in perm if v.shape[d] != 1] == sorted(d for d in perm if v.shape[d] != 1):
        return reshape(v, moved)
    return emit1("transpose", [v], {"perm": perm}, moved, v.dtype)


def slice_(v: Value, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> Value:
    """Basic slicing with normalised (start, stop, step) per dim (``slice.indices``)."""
    starts, stops, steps = (tuple(int(x) for x in t) for t in (starts, stops, steps))
    empty = [not len(range(a, b, c)) for a, b, c in zip(starts, stops, steps)]
    if any(empty):  # every empty slice in one normal form: 0:0:1
        starts = tuple(0 if e else a for a, e in zip(starts, empty))
        stops = tuple(0 if e else b for b, e in zip(stops, empty))
        steps = tuple(1 if e else c for c, e in zip(steps, empty))
    shape = tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
    if shape == v.shape and all(c == 1 for c in steps):
        return v
    if v.node is not None and v.node.op == "constant":
        idx = tuple(slice(a, b if b >= 0 else None, c) for a, b, c in zip(starts, stops, steps))
        return const(np.asarray(v.node.attrs["value"])[idx])
    return emit1("slice", [v], {"starts": starts, "stops": stops, "steps": steps}, shape, v.dtype)


def slice_axis(v: Value, axis: int, start: int, stop: int, step: int = 1) -> Value:
    starts = [0] * v.ndim
    stops = list(v.shape)
    steps = [1] * v.ndim
    s = slice(start, stop, step).indices(v.shape[axis])
    starts[axis], stops[axis], steps[axis] = s
    return slice_(v, starts, stops, steps)


def concat(vs: Sequence[Value], axis: int) -> Value:
    vs = list(vs)
    if len(vs) == 1:
        return vs[0]
    nd = vs[0].ndim
    shape = list(vs[0].shape)
    for v in vs[1:]:
        if v.ndim != nd or any(v.shape[d] != shape[d] for d in range(nd) if d != axis):
            raise ValueError("all the input array dimensions except for the concatenation axis "
                             f"must match exactly, got {[tuple(x.shape) for x in vs]}")
    shape[axis] = sum(v.shape[axis] for v in vs)
    vs = [v for v in vs if v.shape[axis] > 0] or vs[:1]
    if len(vs) == 1 and vs[0].shape == tuple(shape):
        return vs[0]
    return emit1("concat", vs, {"axis": axis}, shape, vs[0].dtype)


def pad(v: Value, pad_width: Sequence[tuple[int, int]], value: Any) -> Value:
    pw = tuple((int(lo), int(hi)) for lo, hi in pad_width)
    if all(lo == 0 and hi == 0 for lo, hi in pw):
        return v
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(v.shape, pw))
    pyval = np.asarray(value).astype(v.dtype).item()  # a Python bool/int/float of v's kind
    if _dt.is_float(v.dtype):
        pyval = float(pyval)
    return emit1("pad", [v], {"pad_width": pw, "value": pyval}, shape, v.dtype)


def expand_dims(v: Value, axes: Sequence[int]) -> Value:
    shape = list(v.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    return reshape(v, shape)


# -- reductions and friends ----------------------------------------------

def reduce(op: str, v: Value, axes: Sequence[int], keepdims: bool) -> Value:
    axes = tuple(sorted(int(a) for a in axes))
    if keepdims:
        shape = tuple(1 if d in axes else s for d, s in enumerate(v.shape))
    else:
        shape = tuple(s for d, s in enumerate(v.shape) if d not in axes)
    if not axes:
        return v
    if all(v.shape[a] == 1 for a in axes):
        return reshape(v, shape)
    dt = BOOL if op in ("reduce_any", "reduce_all") else v.dtype
    return emit1(op, [v], {"axes": axes, "keepdims": bool(keepdims)}, shape, dt)


def accumulate_dtype(dt: np.dtype) -> np.dtype:
    """NumPy's default dtype of sum/prod/cumsum: small ints and bool widen, to
    int64 where wide dtypes are kept (NumPy's and PyTorch's accumulator: a sum
    of 2**31 int8 ones overflowed int32), else to 32 bits."""
    if dt == np.dtype(np.int64):
        return dt
    if dt.kind in "biu" and _dt.keeps_wide():
        return np.dtype(np.int64)
    if dt.kind == "b" or dt.kind == "i":
        return np.dtype(np.int32)
    if dt.kind == "u":
        return np.dtype(np.uint32)
    return dt


def index_dtype(extent: int) -> np.dtype:
    """The dtype of indices into an axis of ``extent`` elements: int32, or int64
    from 2**31 elements on."""
    return np.dtype(np.int64) if extent > 2 ** 31 - 1 else INT32


def reduced_shape(shape: tuple, axes: tuple, keepdims: bool) -> tuple:
    """``shape`` reduced over ``axes`` (kept as 1s with ``keepdims``)."""
    if keepdims:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def filled(shape: tuple, value: Any, dt: np.dtype) -> Value:
    """A constant ``value`` of dtype ``dt`` broadcast to ``shape``."""
    return broadcast_to(const(np.asarray(value).astype(dt)), shape)


def reduce_np(op: str, v: Value, axis: Any, keepdims: bool, identity: Any) -> Value:
    """:func:`reduce` with NumPy's ``axis`` (None, int, negative, tuple); an empty input
    gives ``identity`` (None: no identity, NumPy's error for max/min)."""
    axes = normalize_axes(axis, v.ndim)
    if v.size == 0 and axes:
        shape = reduced_shape(v.shape, axes, keepdims)
        if identity is None and any(v.shape[a] == 0 for a in axes):
            name = {"reduce_max": "maximum", "reduce_min": "minimum"}[op]
            raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
        return filled(shape, 0 if identity is None else identity,
                       v.dtype if op not in ("reduce_any", "reduce_all") else BOOL)
    return reduce(op, v, axes, keepdims)


def iota(shape: Sequence[int], dim: int, dtype: Any = INT32) -> Value:
    shape = tuple(int(s) for s in shape)
    dt = _dt.check_supported(dtype)
    return emit1("iota", [], {"shape": shape, "dim": int(dim), "dtype": dt}, shape, dt)


def matmul(a: Value, b: Value) -> Value:
    """NumPy matmul on rank >= 2 operands of one dtype, batch dims made equal-rank."""
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {b.shape[-2]} is different from {a.shape[-1]})")
    nd = max(a.ndim, b.ndim)
    if a.ndim < nd:
        a = reshape(a, (1,) * (nd - a.ndim) + a.shape)
    if b.ndim < nd:
        b = reshape(b, (1,) * (nd - b.ndim) + b.shape)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    shape = batch + (a.shape[-2], b.shape[-1])
    return emit1("matmul", [a, b], None, shape, a.dtype)


# -- gathers ---------------------------------------------------------------

def take_value(v: Value, idx: Value, axis: int) -> Value:
    """IR ``take`` of int32 indices along ``axis``."""
    if idx.dtype != INT32:
        idx = cast(idx, INT32)
    shape = v.shape[:axis] + idx.shape + v.shape[axis + 1:]
    if v.shape[axis] == 0 and idx.size:
        raise IndexError("cannot do a non-empty take from an empty axes.")
    if v.node is not None and v.node.op == "constant" and idx.node is not None \
            and idx.node.op == "constant":
        arr = np.take(np.asarray(v.node.attrs["value"]), np.asarray(idx.node.attrs["value"]),
                      axis=axis, mode="clip")
        return const(arr)
    return emit1("take", [v, idx], {"axis": axis}, shape, v.dtype)
