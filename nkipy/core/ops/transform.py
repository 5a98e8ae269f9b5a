"""Shape and layout ops: reshape, transpose, expand_dims, squeeze, concatenate, stack,
split, repeat, tile, broadcast_to, pad, flip, roll, diff, astype, copy, copyto, ..."""
from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.ops._builder import take_value
from nkipy.core.ops._core import (NKIPyTensorRef, assign_all, is_tracer, nkipy_op, reject_kwargs,
                                  result_dtype, to_value, unsupported, wrap, write_out)
from nkipy.core.ops.indexing import getitem
from nkipy.core.trace import NKIPyTracingError

__all__ = [
    "reshape", "ravel", "transpose", "permute_dims", "swapaxes", "moveaxis", "expand_dims",
    "squeeze", "concatenate", "concat", "stack", "hstack", "vstack", "split", "array_split",
    "copy", "repeat", "broadcast_to", "copyto", "astype", "pad", "diff", "flip", "fliplr",
    "flipud", "tile", "roll", "atleast_1d", "atleast_2d", "atleast_3d",
]


# -- views -----------------------------------------------------------------

def _view(x: Any, forward: Any, backward: Any, contiguous: bool) -> NKIPyTensorRef:
    """A view of tracer ``x`` (writes go through to ``x``), or a value for constants."""
    if is_tracer(x):
        return NKIPyTensorRef._view(x, forward(to_value(x)), forward, backward, contiguous)
    return wrap(forward(to_value(x)))


def _normalize_shape(shape: Any, size: int) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = [int(s) for s in shape]
    neg = [i for i, s in enumerate(shape) if s < 0]
    if len(neg) > 1:
        raise ValueError("can only specify one unknown dimension")
    if neg:
        if shape[neg[0]] != -1:
            raise ValueError(f"negative dimensions not allowed, got {tuple(shape)}")
        known = int(np.prod([s for s in shape if s >= 0], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape "
                             f"{tuple(s if s >= 0 else -1 for s in shape)}")
        shape[neg[0]] = size // known
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
    return tuple(shape)


def _reshape_cpu(a: Any, shape: Any = None, order: str = "C", **kw: Any) -> Any:
    if shape is None:
        shape = kw.pop("newshape")
    return np.reshape(a, shape, order=order, **kw)


@nkipy_op(cpu=_reshape_cpu)
def reshape(a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None,
            copy: Any = None) -> NKIPyTensorRef:
    """Row-major reshape (one dimension may be -1). A view of contiguous tensors."""
    if shape is None:
        shape = newshape
    if order != "C":
        raise unsupported(f"reshape(order={order!r})")
    v = to_value(a)
    new = _normalize_shape(shape, v.size)
    contiguous = not is_tracer(a) or a.is_contiguous
    if contiguous and copy is not True:
        return _view(a, lambda b: B.reshape(b, new),
                     lambda b, nv: B.reshape(nv, b.shape), True)
    return wrap(B.reshape(v, new))


@nkipy_op(cpu=np.ravel)
def ravel(a: Any, order: str = "C") -> NKIPyTensorRef:
    return reshape(a, -1, order)


def _perm(axes: Any, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    axes = tuple(axes)
    if len(axes) != ndim:
        raise ValueError("axes don't match array")
    perm = tuple(B.normalize_axis(a, ndim) for a in axes)
    if len(set(perm)) != ndim:
        raise ValueError("repeated axis in transpose")
    return perm


def _transposed(a: Any, perm: tuple[int, ...]) -> NKIPyTensorRef:
    inv = tuple(int(i) for i in np.argsort(perm))
    identity = perm == tuple(range(len(perm)))
    contiguous = identity and (not is_tracer(a) or a.is_contiguous)
    return _view(a, lambda b: B.transpose(b, perm), lambda b, nv: B.transpose(nv, inv), contiguous)


@nkipy_op(cpu=np.transpose)
def transpose(a: Any, axes: Any = None) -> NKIPyTensorRef:
    """Axis permutation (a view); negative axes allowed."""
    return _transposed(a, _perm(axes, len(to_value(a).shape)))


permute_dims = transpose


@nkipy_op(cpu=np.swapaxes)
def swapaxes(a: Any, axis1: int, axis2: int) -> NKIPyTensorRef:
    nd = len(to_value(a).shape)
    i, j = B.normalize_axis(axis1, nd), B.normalize_axis(axis2, nd)
    perm = list(range(nd))
    perm[i], perm[j] = perm[j], perm[i]
    return _transposed(a, tuple(perm))


@nkipy_op(cpu=np.moveaxis)
def moveaxis(a: Any, source: Any, destination: Any) -> NKIPyTensorRef:
    nd = len(to_value(a).shape)
    src = [B.normalize_axis(s, nd) for s in np.atleast_1d(source).tolist()]
    dst = [B.normalize_axis(d, nd) for d in np.atleast_1d(destination).tolist()]
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number of "
                         "elements")
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _transposed(a, tuple(order))


def _reshape_view(a: Any, shape: tuple[int, ...]) -> NKIPyTensorRef:
    contiguous = not is_tracer(a) or a.is_contiguous
    return _view(a, lambda b: B.reshape(b, shape), lambda b, nv: B.reshape(nv, b.shape), contiguous)


@nkipy_op(cpu=np.expand_dims)
def expand_dims(a: Any, axis: Any) -> NKIPyTensorRef:
    shape = list(to_value(a).shape)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    nd = len(shape) + len(axes)
    norm = sorted(B.normalize_axis(x, nd) for x in axes)
    if len(set(norm)) != len(norm):
        raise ValueError("repeated axis")
    for x in norm:
        shape.insert(x, 1)
    return _reshape_view(a, tuple(shape))


@nkipy_op(cpu=np.squeeze)
def squeeze(a: Any, axis: Any = None) -> NKIPyTensorRef:
    shape = to_value(a).shape
    if axis is None:
        axes = [d for d, s in enumerate(shape) if s == 1]
    else:
        axes = list(B.normalize_axes(axis, len(shape)))
        if any(shape[d] != 1 for d in axes):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return _reshape_view(a, tuple(s for d, s in enumerate(shape) if d not in axes))


def _atleast(n: int, arys: Sequence[Any]) -> Any:
    res = []
    for a in arys:
        shape = to_value(a).shape
        if len(shape) >= n:
            res.append(wrap(to_value(a)) if not is_tracer(a) else a)
            continue
        if n == 3 and len(shape) == 2:
            new = shape + (1,)
        elif n == 3 and len(shape) == 1:
            new = (1,) + shape + (1,)
        else:
            new = (1,) * (n - len(shape)) + shape
        res.append(_reshape_view(a, new))
    return res[0] if len(res) == 1 else tuple(res)


@nkipy_op(cpu=np.atleast_1d)
def atleast_1d(*arys: Any) -> Any:
    return _atleast(1, arys)


@nkipy_op(cpu=np.atleast_2d)
def atleast_2d(*arys: Any) -> Any:
    return _atleast(2, arys)


@nkipy_op(cpu=np.atleast_3d)
def atleast_3d(*arys: Any) -> Any:
    return _atleast(3, arys)


# -- copies and casts ---------------------------------------------------------

@nkipy_op(cpu=lambda a, dtype, copy=True, **kw: np.asarray(a).astype(dtype, copy=copy))
def astype(a: Any, dtype: Any, copy: bool = True, **kwargs: Any) -> NKIPyTensorRef:
    """Converts to ``dtype`` (NumPy astype semantics; 64-bit dtypes narrow to 32-bit)."""
    dt = _dt.check_supported(_dt.to_dtype(dtype), "astype")
    return wrap(B.cast(to_value(a), dt))


@nkipy_op(cpu=np.copy)
def copy(a: Any, order: str = "K", subok: bool = False) -> NKIPyTensorRef:
    """A new tensor with the same contents (writes to it do not affect ``a``)."""
    return wrap(to_value(a))


def _copyto_cpu(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    np.copyto(dst, src, casting=casting, where=where)


@nkipy_op(cpu=_copyto_cpu)
def copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    """``np.copyto``: writes ``src`` (broadcast) into the tracer ``dst``; mutates ``dst``."""
    if not is_tracer(dst):
        raise NKIPyTracingError("np.copyto destination must be a traced tensor in a kernel")
    src_dt = result_dtype(src) if not is_tracer(src) else src.dtype
    if not is_tracer(src) and isinstance(src, (int, float)) and not isinstance(src, bool):
        src_dt = dst.dtype  # weak Python scalars fit the destination
    if casting == "same_kind" and not _dt.can_cast_same_kind(src_dt, dst.dtype):
        raise TypeError(f"Cannot cast array data from dtype('{src_dt}') to dtype('{dst.dtype}') "
                        "according to the rule 'same_kind'")
    if casting not in ("same_kind", "unsafe"):
        raise unsupported(f"np.copyto(casting={casting!r})")
    if where is True:
        assign_all(dst, src)
        return None
    cur = to_value(dst)
    new = B.where(B.broadcast_to(to_value(where, B.BOOL), cur.shape),
                  B.broadcast_to(to_value(src, cur.dtype), cur.shape), cur)
    assign_all(dst, wrap(new))
    return None


# -- joining and splitting ---------------------------------------------------

def _concat_cpu(arrays: Any, axis: Any = 0, out: Any = None, dtype: Any = None,
                casting: str = "same_kind") -> Any:
    return np.concatenate(arrays, axis=axis, out=out, dtype=dtype, casting=casting)


@nkipy_op(cpu=_concat_cpu)
def concatenate(arrays: Sequence[Any], axis: Any = 0, out: Any = None, dtype: Any = None,
                casting: str = "same_kind") -> NKIPyTensorRef:
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    dt = _dt.check_supported(dtype) if dtype is not None else result_dtype(*arrays)
    vals = [to_value(a, dt) for a in arrays]
    if axis is None:
        vals = [B.reshape(v, (v.size,)) for v in vals]
        axis = 0
    if any(v.ndim == 0 for v in vals):
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    nd = vals[0].ndim
    if any(v.ndim != nd for v in vals):
        raise ValueError("all the input arrays must have same number of dimensions")
    return write_out(out, wrap(B.concat(vals, B.normalize_axis(axis, nd))))


concat = concatenate


@nkipy_op(cpu=np.stack)
def stack(arrays: Sequence[Any], axis: int = 0, out: Any = None, dtype: Any = None) -> NKIPyTensorRef:
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    dt = _dt.check_supported(dtype) if dtype is not None else result_dtype(*arrays)
    vals = [to_value(a, dt) for a in arrays]
    if len({v.shape for v in vals}) != 1:
        raise ValueError("all input arrays must have the same shape")
    ax = B.normalize_axis(axis, vals[0].ndim + 1)
    vals = [B.expand_dims(v, [ax]) for v in vals]
    return write_out(out, wrap(B.concat(vals, ax)))


@nkipy_op(cpu=np.hstack)
def hstack(tup: Sequence[Any], dtype: Any = None) -> NKIPyTensorRef:
    arrs = [atleast_1d(a) for a in tup]
    axis = 0 if arrs and arrs[0].ndim == 1 else 1
    return concatenate(arrs, axis=axis, dtype=dtype)


@nkipy_op(cpu=np.vstack)
def vstack(tup: Sequence[Any], dtype: Any = None) -> NKIPyTensorRef:
    return concatenate([atleast_2d(a) for a in tup], axis=0, dtype=dtype)


def _split(a: Any, indices_or_sections: Any, axis: int, strict: bool) -> list[NKIPyTensorRef]:
    x = a if is_tracer(a) else wrap(to_value(a))
    ax = B.normalize_axis(axis, x.ndim)
    n = x.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if strict and n % sections:
            raise ValueError("array split does not result in an equal division")
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        bounds = np.cumsum([0] + sizes).tolist()
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    pre = (slice(None),) * ax
    return [getitem(x, pre + (slice(bounds[i], bounds[i + 1]),)) for i in range(len(bounds) - 1)]


@nkipy_op(cpu=np.split)
def split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[NKIPyTensorRef]:
    """Splits into views (equal sections or at indices)."""
    return _split(ary, indices_or_sections, axis, True)


@nkipy_op(cpu=np.array_split)
def array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[NKIPyTensorRef]:
    return _split(ary, indices_or_sections, axis, False)


# -- repetition ----------------------------------------------------------------

@nkipy_op(cpu=np.repeat)
def repeat(a: Any, repeats: Any, axis: Any = None) -> NKIPyTensorRef:
    v = to_value(a)
    if axis is None:
        v = B.reshape(v, (v.size,))
        ax = 0
    else:
        ax = B.normalize_axis(axis, v.ndim)
    if is_tracer(repeats):
        raise NKIPyTracingError("np.repeat with traced repeat counts has a data-dependent "
                                "shape; pass the repeats as static values")
    reps = np.asarray(repeats)
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(-1)[0])
        if r < 0:
            raise ValueError("repeats may not contain negative values.")
        shape = list(v.shape)
        e = B.reshape(v, shape[:ax + 1] + [1] + shape[ax + 1:])
        b = B.broadcast_to(e, shape[:ax + 1] + [r] + shape[ax + 1:])
        shape[ax] *= r
        return wrap(B.reshape(b, shape))
    if reps.shape != (v.shape[ax],):
        raise ValueError(f"operands could not be broadcast together with shape "
                         f"({v.shape[ax]},) ({reps.size},)")
    idx = np.repeat(np.arange(v.shape[ax]), reps)
    return wrap(take_value(v, B.const(idx.astype(np.int32)), ax))


@nkipy_op(cpu=np.tile)
def tile(A: Any, reps: Any) -> NKIPyTensorRef:
    v = to_value(A)
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    nd = builtins.max(len(reps), v.ndim)
    shape = (1,) * (nd - v.ndim) + v.shape
    reps = (1,) * (nd - len(reps)) + reps
    inter = []
    for r, s in zip(reps, shape):
        inter += [1, s]
    e = B.reshape(v, inter)
    full = []
    for r, s in zip(reps, shape):
        full += [r, s]
    b = B.broadcast_to(e, full)
    return wrap(B.reshape(b, [r * s for r, s in zip(reps, shape)]))


@nkipy_op(cpu=np.broadcast_to)
def broadcast_to(array: Any, shape: Any, subok: bool = False) -> NKIPyTensorRef:
    """A read-only broadcast (like NumPy's)."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    t = wrap(B.broadcast_to(to_value(array), shape))
    t._readonly = True
    return t


# -- padding, flipping, rolling, differences -------------------------------------

def _pad_pairs(pad_width: Any, nd: int) -> list[tuple[int, int]]:
    pw = np.asarray(pad_width)
    if pw.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    try:
        pw = np.broadcast_to(pw, (nd, 2))
    except ValueError:
        raise ValueError(f"unable to broadcast pad_width {pad_width!r} to ({nd}, 2)") from None
    if (pw < 0).any():
        raise ValueError("index can't contain negative values")
    return [(int(lo), int(hi)) for lo, hi in pw]


@nkipy_op(cpu=np.pad)
def pad(array: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> NKIPyTensorRef:
    """``np.pad``: modes constant (scalar or per-side values), edge, reflect, symmetric, wrap."""
    v = to_value(array)
    pairs = _pad_pairs(pad_width, v.ndim)
    if mode == "constant":
        cv = kwargs.pop("constant_values", 0)
        reject_kwargs("pad", kwargs)
        if is_tracer(cv):
            raise unsupported("np.pad with traced constant_values")
        cva = np.broadcast_to(np.asarray(cv), (v.ndim, 2))
        if (cva == cva.reshape(-1)[0]).all():
            return wrap(B.pad(v, pairs, cva.reshape(-1)[0]))
        for d, (lo, hi) in enumerate(pairs):
            parts = []
            for n, val in ((lo, cva[d][0]), (hi, cva[d][1])):
                shape = list(v.shape)
                shape[d] = n
                parts.append(B.broadcast_to(B.const(np.asarray(val).astype(v.dtype)), shape))
            v = B.concat([parts[0], v, parts[1]], d)
        return wrap(v)
    if mode not in ("edge", "reflect", "symmetric", "wrap"):
        raise unsupported(f"np.pad(mode={mode!r})")
    reject_kwargs("pad", kwargs)
    for d, (lo, hi) in enumerate(pairs):
        if lo == hi == 0:
            continue
        if v.shape[d] == 0:
            raise ValueError("can't extend empty axis using modes other than 'constant' or 'empty'")
        idx = np.pad(np.arange(v.shape[d]), (lo, hi), mode=mode)
        v = take_value(v, B.const(idx.astype(np.int32)), d)
    return wrap(v)


@nkipy_op(cpu=np.flip)
def flip(m: Any, axis: Any = None) -> NKIPyTensorRef:
    """Reverses along axes (a view)."""
    x = m if is_tracer(m) else wrap(to_value(m))
    axes = B.normalize_axes(axis, x.ndim)
    return getitem(x, tuple(slice(None, None, -1) if d in axes else slice(None)
                            for d in range(x.ndim)))


@nkipy_op(cpu=np.fliplr)
def fliplr(m: Any) -> NKIPyTensorRef:
    return flip(m, 1)


@nkipy_op(cpu=np.flipud)
def flipud(m: Any) -> NKIPyTensorRef:
    return flip(m, 0)


@nkipy_op(cpu=np.roll)
def roll(a: Any, shift: Any, axis: Any = None) -> NKIPyTensorRef:
    v = to_value(a)
    if is_tracer(shift):
        raise unsupported("np.roll with a traced shift", "pass the shift as a static value")
    if axis is None:
        flat = B.reshape(v, (v.size,))
        return wrap(B.reshape(_roll1(flat, int(np.sum(shift)), 0), v.shape))
    shifts, axes = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    total: dict[int, int] = {}
    for s, ax in zip(shifts.reshape(-1).tolist(), axes.reshape(-1).tolist()):
        d = B.normalize_axis(ax, v.ndim)
        total[d] = total.get(d, 0) + int(s)
    for d, s in total.items():
        v = _roll1(v, s, d)
    return wrap(v)


def _roll1(v: Value, shift: int, axis: int) -> Value:
    n = v.shape[axis]
    if n == 0:
        return v
    s = shift % n
    if s == 0:
        return v
    return B.concat([B.slice_axis(v, axis, n - s, n), B.slice_axis(v, axis, 0, n - s)], axis)


@nkipy_op(cpu=np.diff)
def diff(a: Any, n: int = 1, axis: int = -1, prepend: Any = np._NoValue,  # type: ignore
         append: Any = np._NoValue) -> NKIPyTensorRef:  # type: ignore[attr-defined]
    v = to_value(a)
    if n == 0:
        return wrap(v)
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if v.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    ax = B.normalize_axis(axis, v.ndim)
    parts = []
    ops = [x for x in (prepend, append) if x is not np._NoValue]  # type: ignore[attr-defined]
    dt = result_dtype(*([a] + ops)) if ops else v.dtype
    v = B.cast(v, dt)
    for extra, where in ((prepend, "pre"), (append, "post")):
        if extra is np._NoValue:  # type: ignore[attr-defined]
            parts.append(None)
            continue
        e = to_value(extra, dt)
        if e.ndim == 0:
            shape = list(v.shape)
            shape[ax] = 1
            e = B.broadcast_to(e, shape)
        parts.append(e)
    seq = ([parts[0]] if parts[0] is not None else []) + [v] + ([parts[1]] if parts[1] is not None else [])
    v = B.concat(seq, ax)
    for _ in range(n):
        m = v.shape[ax]
        if m == 0:
            break
        hi = B.slice_axis(v, ax, 1, m)
        lo = B.slice_axis(v, ax, 0, m - 1)
        v = B.binary("ne", hi, lo) if v.dtype == B.BOOL else B.binary("sub", hi, lo)
    return wrap(v)
