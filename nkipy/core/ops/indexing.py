"""Indexing: ``x[...]`` / ``x[...] = v`` on tracers, take, take_along_axis,
put_along_axis, scatter_along_axis, static_slice, dynamic_update_slice,
scatter_strided and where.

``__getitem__`` follows NumPy: basic indices (ints, slices with any step, None,
Ellipsis) give a view (IR ``slice`` + ``reshape``); integer arrays (NumPy or
traced) and static boolean masks are advanced indices (IR ``take``), with NumPy's
rules for where the broadcast index dimensions go. Traced boolean masks have a
data-dependent result shape, so ``x[mask]`` is an error; ``x[mask] = v`` works
(it is ``np.where(mask, v, x)``). Negative traced indices wrap like NumPy's;
static indices are bounds-checked while tracing (IndexError, like NumPy).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.ops._builder import take_value
from nkipy.core.ops._core import (NKIPyTensorRef, _assigned_value, _fit_value, assign_all,
                                  is_tracer, nkipy_op, result_dtype, to_value, unsupported, wrap,
                                  write_out)
from nkipy.core.trace import NKIPyTracingError

__all__ = ["getitem", "setitem", "assign_all", "add_at", "take", "take_along_axis", "put_along_axis",
           "check_index",
           "scatter_along_axis", "static_slice", "dynamic_update_slice", "scatter_strided",
           "where", "take_value"]

_MAX_FLAT = 2 ** 31 - 1


# -- index parsing ----------------------------------------------------------------

class _Idx:
    """One parsed index entry. kind: slice | int | new | array | mask.

    ``seq`` is the entry's place in the index as written, where an ellipsis that
    stands for no dimension still takes a place: NumPy counts it as separating
    the advanced indices on either side (``a[:, 1, ..., i]`` on a 3-D array puts
    the broadcast index dimensions first)."""

    __slots__ = ("kind", "start", "stop", "step", "length", "arr", "ndim", "seq")

    def __init__(self, kind: str, **kw: Any) -> None:
        self.kind = kind
        self.arr: Any = None
        self.ndim = 1
        self.seq = 0
        for k, v in kw.items():
            setattr(self, k, v)

    @property
    def consumes(self) -> int:
        if self.kind == "new":
            return 0
        if self.kind == "mask":
            return self.ndim
        return 1


def _is_int_scalar(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _parse(shape: Sequence[int], index: Any) -> list[_Idx]:
    if not isinstance(index, tuple):
        index = (index,)
    entries: list[Any] = []
    for item in index:
        if isinstance(item, list):
            item = np.asarray(item)
            if item.dtype == np.float64 and item.size == 0:
                item = item.astype(np.intp)
        entries.append(item)
    n_ellipsis = sum(1 for e in entries if e is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")

    def consumed(e: Any) -> int:
        if e is None or e is Ellipsis:
            return 0
        if isinstance(e, (np.ndarray, NKIPyTensorRef)) and e.dtype == np.bool_:
            return max(e.ndim, 1) if e.ndim else 0
        return 1

    used = sum(consumed(e) for e in entries)
    if used > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, "
                         f"but {used} were indexed")
    out: list[_Idx] = []
    dim = 0
    gap = None    # where an ellipsis that stands for no dimension sits
    for e in entries:
        if e is Ellipsis:
            if len(shape) == used:
                gap = len(out)
            for _ in range(len(shape) - used):
                n = shape[dim]
                out.append(_Idx("slice", start=0, stop=n, step=1, length=n))
                dim += 1
            continue
        if e is None:
            out.append(_Idx("new"))
            continue
        if isinstance(e, slice):
            n = shape[dim]
            for part in (e.start, e.stop, e.step):
                if is_tracer(part):
                    raise NKIPyTracingError(
                        "slice bounds must be static; use nkipy.core.ops.dynamic_update_slice "
                        "or an index array (np.take) for data-dependent positions")
            start, stop, step = slice(*(None if p is None else _as_int(p)
                                        for p in (e.start, e.stop, e.step))).indices(n)
            if not len(range(start, stop, step)):
                start, stop, step = 0, 0, 1  # every empty slice in one normal form
            out.append(_Idx("slice", start=start, stop=stop, step=step,
                            length=len(range(start, stop, step))))
            dim += 1
            continue
        if isinstance(e, (bool, np.bool_)):
            raise unsupported("indexing with a Python/NumPy bool scalar")
        if _is_int_scalar(e):
            n = shape[dim]
            i = int(e)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            out.append(_Idx("int", start=i % n))
            dim += 1
            continue
        if is_tracer(e):
            if e.dtype == np.bool_:
                if e.ndim == 0:
                    raise unsupported("indexing with a 0-d traced bool")
                out.append(_Idx("mask", arr=e, ndim=e.ndim))
                dim += e.ndim
                continue
            if not _dt.is_int(e.dtype):
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            out.append(_Idx("array", arr=e))
            dim += 1
            continue
        arr = np.asarray(e) if not isinstance(e, np.ndarray) else e
        if arr.dtype.kind == "O" or arr.dtype.kind in "US":
            raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis "
                             "(`None`) and integer or boolean arrays are valid indices")
        if arr.dtype == np.bool_:
            if arr.ndim == 0:
                raise unsupported("indexing with a 0-d bool array")
            if tuple(arr.shape) != tuple(shape[dim:dim + arr.ndim]):
                raise IndexError(f"boolean index did not match indexed array along axis {dim}; "
                                 f"size of axis is {shape[dim]} but size of corresponding "
                                 f"boolean axis is {arr.shape[0]}")
            for k, nz in enumerate(np.nonzero(arr)):
                out.append(_Idx("array", arr=nz.astype(np.int64)))
                dim += 1
            continue
        if arr.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        n = shape[dim]
        a64 = arr.astype(np.int64)
        if a64.size and (a64.min() < -n or a64.max() >= n):
            bad = int(a64[(a64 < -n) | (a64 >= n)].reshape(-1)[0])
            raise IndexError(f"index {bad} is out of bounds for axis {dim} with size {n}")
        out.append(_Idx("array", arr=np.where(a64 < 0, a64 + n, a64)))
        dim += 1
    while dim < len(shape):
        n = shape[dim]
        out.append(_Idx("slice", start=0, stop=n, step=1, length=n))
        dim += 1
    for k, e in enumerate(out):
        e.seq = k + (1 if gap is not None and k >= gap else 0)
    return out


def _as_int(p: Any) -> int:
    if _is_int_scalar(p):
        return int(p)
    if hasattr(p, "__index__"):
        return p.__index__()
    raise TypeError("slice indices must be integers or None or have an __index__ method")


def _index_value(e: _Idx, n: int, axis: int = 0) -> Value | np.ndarray:
    """An advanced index entry as int32 (NumPy array if static, else IR value,
    checked to lie in [-n, n) -- an IndexError of the execution, as NumPy
    raises -- and wrapped)."""
    if e.kind == "int":
        return np.asarray(e.start, dtype=np.int64)
    if isinstance(e.arr, np.ndarray):
        return e.arr
    v = B.check_index(to_value(e.arr), -n, n, axis)    # also counts negatives from the end
    if v.dtype != B.INT32:
        v = B.cast(v, B.INT32)
    return v


# -- basic indexing ---------------------------------------------------------

def _basic_parts(entries: list[_Idx]) -> tuple[list[int], list[int], list[int], tuple, tuple]:
    starts, stops, steps, slice_shape, result_shape = [], [], [], [], []
    for e in entries:
        if e.kind == "new":
            result_shape.append(1)
        elif e.kind == "int":
            starts.append(e.start)
            stops.append(e.start + 1)
            steps.append(1)
            slice_shape.append(1)
        else:
            starts.append(e.start)
            stops.append(e.stop)
            steps.append(e.step)
            slice_shape.append(e.length)
            result_shape.append(e.length)
    return starts, stops, steps, tuple(slice_shape), tuple(result_shape)


def _region_contiguous(shape: Sequence[int], starts: list[int], steps: list[int],
                       lens: Sequence[int]) -> bool:
    if any(n == 0 for n in lens):
        return True
    j = -1
    for d in range(len(shape)):
        if not (starts[d] == 0 and steps[d] == 1 and lens[d] == shape[d]):
            j = d
    if j < 0:
        return True
    if steps[j] != 1 and lens[j] > 1:
        return False
    return all(lens[d] == 1 for d in range(j))


def _basic_getitem(x: NKIPyTensorRef, entries: list[_Idx]) -> NKIPyTensorRef:
    starts, stops, steps, slice_shape, result_shape = _basic_parts(entries)
    shape = x.shape

    def forward(b: Value) -> Value:
        return B.reshape(B.slice_(b, starts, stops, steps), result_shape)

    full = tuple(slice_shape) == tuple(shape) and all(s == 1 for s in steps)

    def backward(b: Value, nv: Value) -> Value:
        upd = B.reshape(nv, slice_shape)
        if full:
            return upd
        return B.emit1("set_slice", [b, upd], {"starts": tuple(starts), "stops": tuple(stops),
                                               "steps": tuple(steps)}, b.shape, b.dtype)

    contiguous = x.is_contiguous and _region_contiguous(shape, starts, steps, slice_shape)
    return NKIPyTensorRef._view(x, forward(x.value), forward, backward, contiguous, _key(entries))


def _key(entries: list[_Idx]) -> tuple | None:
    """A hashable description of a basic index (None for advanced ones)."""
    if any(e.kind in ("array", "mask") for e in entries):
        return None
    return tuple((e.kind, getattr(e, "start", None), getattr(e, "stop", None),
                  getattr(e, "step", None)) for e in entries)


# -- advanced indexing --------------------------------------------------------

def _layout(entries: list[_Idx]) -> tuple[list[int], bool]:
    """Positions of advanced entries and whether they are adjacent."""
    adv = [i for i, e in enumerate(entries) if e.kind in ("array", "int")]
    seqs = [entries[i].seq for i in adv]
    adjacent = seqs == list(range(seqs[0], seqs[0] + len(seqs))) if adv else True
    return adv, adjacent


def _flat_positions(shape: Sequence[int], entries: list[_Idx]) -> tuple[Any, tuple[int, ...]]:
    """Flat (row-major) positions in ``x`` selected by an advanced index.

    Returns (positions as NumPy int32 array or int32 IR value, result shape).
    """
    size = int(np.prod(shape, dtype=np.int64))
    if size > _MAX_FLAT:
        raise unsupported("advanced indexing of tensors with 2**31 or more elements")
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    adv, adjacent = _layout(entries)
    dims_of = []  # x-dim of each entry (None for new axes)
    d = 0
    for e in entries:
        dims_of.append(None if e.kind == "new" else d)
        if e.kind != "new":
            d += 1
    idx_vals = {i: _index_value(entries[i], shape[dims_of[i]], dims_of[i]) for i in adv}
    bshape = B.broadcast_shapes(*[np.shape(v) if isinstance(v, np.ndarray) else v.shape
                                  for v in idx_vals.values()])
    basic = [i for i, e in enumerate(entries) if e.kind in ("slice", "new")]
    if adjacent:
        before = [i for i in basic if i < adv[0]]
        after = [i for i in basic if i > adv[0]]
        result_dims: list[Any] = before + ["B"] + after
    else:
        result_dims = ["B"] + basic
    res_shape: list[int] = []
    pos_of: dict[Any, int] = {}
    for r in result_dims:
        if r == "B":
            pos_of["B"] = len(res_shape)
            res_shape.extend(bshape)
        else:
            pos_of[r] = len(res_shape)
            e = entries[r]
            res_shape.append(1 if e.kind == "new" else e.length)
    nres = len(res_shape)
    static_total = np.zeros((1,) * nres, dtype=np.int64)
    dyn_terms: list[Value] = []
    for i, e in enumerate(entries):
        if e.kind == "new":
            continue
        stride = strides[dims_of[i]]
        if e.kind == "slice":
            coords = e.start + e.step * np.arange(e.length, dtype=np.int64)
            shp = [1] * nres
            shp[pos_of[i]] = e.length
            static_total = static_total + coords.reshape(shp) * stride
            continue
        iv = idx_vals[i]
        b0 = pos_of["B"]
        tgt = [1] * b0 + list(bshape) + [1] * (nres - b0 - len(bshape))
        if isinstance(iv, np.ndarray):
            arr = np.broadcast_to(iv, bshape).reshape(tgt)
            static_total = static_total + arr * stride
        else:
            vv = B.reshape(B.broadcast_to(iv, bshape), tgt)
            if stride != 1:
                vv = B.binary("mul", vv, B.const(np.int32(stride)))
            dyn_terms.append(vv)
    static_total = np.broadcast_to(static_total, res_shape) if not dyn_terms else static_total
    if not dyn_terms:
        return np.array(static_total, dtype=np.int32), tuple(res_shape)
    total = B.const(static_total.astype(np.int32))
    for t in dyn_terms:
        total = B.binary("add", total, t)
    total = B.broadcast_to(total, res_shape)
    return total, tuple(res_shape)


def _insert_new_axes(x: NKIPyTensorRef, entries: list[_Idx]) -> tuple[Value, list[_Idx]]:
    """Turns ``None`` entries into size-1 axes of the value (advanced paths)."""
    if not any(e.kind == "new" for e in entries):
        return x.value, entries
    shape = []
    new_entries = []
    d = 0
    for e in entries:
        if e.kind == "new":
            shape.append(1)
            new_entries.append(_Idx("slice", start=0, stop=1, step=1, length=1, seq=e.seq))
        else:
            shape.append(x.shape[d])
            new_entries.append(e)
            d += 1
    return B.reshape(x.value, shape), new_entries


def _advanced_getitem(x: NKIPyTensorRef, entries: list[_Idx]) -> NKIPyTensorRef:
    v, entries = _insert_new_axes(x, entries)
    adv, adjacent = _layout(entries)
    arrays = [i for i in adv if entries[i].kind == "array"]
    if len(arrays) == 1 and (adjacent or all(entries[i].kind == "int" for i in range(arrays[0]))):
        # ints are plain slices, then one take along the array's axis
        starts, stops, steps, slice_shape, _ = _basic_parts(
            [e if e.kind != "array" else _Idx("slice", start=0, stop=v.shape[k], step=1,
                                              length=v.shape[k])
             for k, e in enumerate(entries)])
        y = B.slice_(v, starts, stops, steps)
        keep = [k for k, e in enumerate(entries) if e.kind != "int"]
        y = B.reshape(y, [slice_shape[k] for k in keep])
        ax = keep.index(arrays[0])
        idx = _index_value(entries[arrays[0]], v.shape[arrays[0]], arrays[0])
        iv = B.const(idx.astype(np.int32)) if isinstance(idx, np.ndarray) else idx
        return wrap(take_value(y, iv, ax))
    pos, res_shape = _flat_positions(v.shape, entries)
    pv = B.const(pos) if isinstance(pos, np.ndarray) else pos
    return wrap(take_value(B.reshape(v, (v.size,)), pv, 0))


def getitem(x: NKIPyTensorRef, index: Any) -> NKIPyTensorRef:
    """``x[index]`` with NumPy semantics (views for basic indices)."""
    if not is_tracer(x):
        x = wrap(to_value(x))
    x._check_context()
    entries = _parse(x.shape, index)
    if any(e.kind == "mask" for e in entries):
        raise NKIPyTracingError(
            "indexing with a traced boolean mask (x[mask]) gives a data-dependent shape and "
            "cannot be traced; use np.where(mask, x, fill) or x[mask] = value instead")
    if not any(e.kind == "array" for e in entries):
        if all(e.kind == "int" for e in entries) and not _has_ellipsis(index):
            # NumPy gives a scalar (a copy that cannot be written into), not a view
            t = wrap(_basic_getitem(x, entries).value)
            t._scalar = True
            return t
        return _basic_getitem(x, entries)
    return _advanced_getitem(x, entries)


def _has_ellipsis(index: Any) -> bool:
    return index is Ellipsis or (isinstance(index, tuple) and any(i is Ellipsis for i in index))


# -- assignment -----------------------------------------------------------------

def setitem(x: NKIPyTensorRef, index: Any, value: Any) -> None:
    """``x[index] = value``: NumPy semantics; the new contents replace ``x``'s."""
    x._check_context()
    if x._scalar:
        raise TypeError(f"'numpy.{x.dtype.name}' object does not support item assignment "
                        "(x[i, j] with integers gives a scalar copy, not a view)")
    if x._readonly:
        raise ValueError("assignment destination is read-only")
    entries = _parse(x.shape, index)
    masks = [e for e in entries if e.kind == "mask"]
    if masks:
        _mask_setitem(x, entries, value)
        return
    key = _key(entries)
    if isinstance(value, NKIPyTensorRef) and value._link is not None and value._link.base is x \
            and key is not None and value._link.key == key \
            and value._stamp == x._root()._version:
        return  # x[i] op= v: the in-place op already wrote through the view x[i]
    val = _assigned_value(value, x.dtype)
    if not any(e.kind == "array" for e in entries):
        starts, stops, steps, slice_shape, result_shape = _basic_parts(entries)
        fitted = _fit_value(val, result_shape)
        if 0 in slice_shape and x.size:
            return  # nothing to write
        if tuple(slice_shape) == x.shape and all(s == 1 for s in steps):
            x._write(B.reshape(fitted, x.shape))
            return
        upd = val if val.ndim == 0 else B.reshape(fitted, slice_shape)
        new = B.emit1("set_slice", [x.value, upd], {"starts": tuple(starts), "stops": tuple(stops),
                                                     "steps": tuple(steps)}, x.shape, x.dtype)
        x._write(new)
        return
    if _dynamic_block(entries):
        # x[..., pos, a:b] = v with traced scalar positions: a dynamic_update_slice
        starts, ushape, res_shape = [], [], []
        d = 0
        for e in entries:
            if e.kind == "new":
                res_shape.append(1)
                continue
            if e.kind == "slice":
                starts.append(B.const(np.int32(e.start)))
                ushape.append(e.length)
                res_shape.append(e.length)
            elif e.kind == "int":
                starts.append(B.const(np.int32(e.start)))
                ushape.append(1)
            else:
                starts.append(_index_value(e, x.shape[d], d))
                ushape.append(1)
            d += 1
        fitted = _fit_value(val, tuple(res_shape))
        if 0 in ushape:
            return
        upd = B.reshape(fitted, ushape)
        x._write(B.emit1("update_slice", [x.value, upd] + starts, {}, x.shape, x.dtype))
        return
    cur, entries2 = _insert_new_axes(x, entries)
    pos, res_shape = _flat_positions(cur.shape, entries2)
    vals = _fit_value(val, res_shape)
    n = int(np.prod(res_shape, dtype=np.int64))
    if n == 0:
        return
    pv = B.const(pos.reshape(-1)) if isinstance(pos, np.ndarray) else B.reshape(pos, (n,))
    flat = B.reshape(x.value, (x.size,))
    new = B.emit1("put_along_axis", [flat, pv, B.reshape(vals, (n,))],
                  {"axis": 0, "mode": "set"}, flat.shape, flat.dtype)
    x._write(B.reshape(new, x.shape))


def add_at(x: NKIPyTensorRef, index: Any, values: Any) -> None:
    """``np.add.at(x, index, values)``: unbuffered ``x[index] += values`` (repeated
    indices accumulate). Mutates the tracer ``x`` (IR ``put_along_axis`` mode add)."""
    if not is_tracer(x):
        raise NKIPyTracingError("np.add.at needs a traced destination in a kernel")
    x._check_context()
    entries = _parse(x.shape, index)
    if any(e.kind == "mask" for e in entries):
        raise unsupported("np.add.at with a traced boolean mask")
    cur, entries2 = _insert_new_axes(x, entries)
    if not any(e.kind == "array" for e in entries2):  # no repeats possible: plain +=
        view = getitem(x, index)
        view += values
        return
    pos, res_shape = _flat_positions(cur.shape, entries2)
    val = _fit_value(to_value(values, x.dtype), res_shape)
    n = int(np.prod(res_shape, dtype=np.int64))
    if n == 0:
        return
    pv = B.const(pos.reshape(-1)) if isinstance(pos, np.ndarray) else B.reshape(pos, (n,))
    flat = B.reshape(x.value, (x.size,))
    new = B.emit1("put_along_axis", [flat, pv, B.reshape(val, (n,))],
                  {"axis": 0, "mode": "add"}, flat.shape, flat.dtype)
    x._write(B.reshape(new, x.shape))


def _dynamic_block(entries: list[_Idx]) -> bool:
    """True if the advanced entries are traced scalars and the rest ints/step-1 slices."""
    arrays = [e for e in entries if e.kind == "array"]
    return bool(arrays) and all(is_tracer(e.arr) and e.arr.ndim == 0 for e in arrays) and \
        all(e.kind in ("int", "new", "array") or (e.kind == "slice" and e.step == 1)
            for e in entries)


def _mask_setitem(x: NKIPyTensorRef, entries: list[_Idx], value: Any) -> None:
    first = entries[0]
    rest_full = all(e.kind == "slice" and e.start == 0 and e.step == 1 and
                    e.length == x.shape[first.ndim + k] for k, e in enumerate(entries[1:]))
    if first.kind != "mask" or not rest_full:
        raise unsupported("a traced boolean mask combined with other indices",
                          "use x[mask] = v with a mask over the leading dimensions, or np.where")
    mask = to_value(first.arr)
    if mask.shape != x.shape[:mask.ndim]:
        raise IndexError(f"boolean index shape {mask.shape} does not match the indexed "
                         f"array's leading dimensions {x.shape[:mask.ndim]}")
    val = _assigned_value(value, x.dtype)
    tail = x.shape[mask.ndim:]
    if val.ndim > len(tail):
        raise unsupported("x[mask] = v with a value that has a data-dependent shape",
                          "use a scalar value or one that broadcasts to x.shape[mask.ndim:]")
    val = _fit_value(val, tail)
    m = B.reshape(mask, mask.shape + (1,) * len(tail))
    x._write(B.where(m, B.broadcast_to(val, x.shape), x.value))


# -- take / gather ---------------------------------------------------------------

def _indices(indices: Any, n: int, mode: str, axis: int = 0) -> Value:
    """Indices along an axis of size n as int32, by np.take's ``mode``: 'raise'
    (traced indices checked to lie in [-n, n), an IndexError of the execution
    otherwise, before they are narrowed to 32 bits; negative ones count from
    the end), 'wrap' or 'clip'."""
    if is_tracer(indices):
        if not _dt.is_int(indices.dtype):
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        v = to_value(indices)
        idt = B.index_dtype(n)
        if mode not in ("wrap", "clip"):
            # checked, negatives counted from the end, before the narrowing
            return B.cast(B.check_index(v, -n, n, axis), idt)
        v = B.cast(v, idt)
        if mode == "wrap":
            return B.binary("mod", v, B.const(np.asarray(n, idt)))
        return v
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        raise IndexError("arrays used as indices must be of integer (or boolean) type")
    a = arr.astype(np.int64)
    if mode == "wrap":
        a = a % n if n else a
    elif mode == "clip":
        a = np.clip(a, 0, max(n - 1, 0))
    else:
        a = check_index(a, -n, n, axis)
    return B.const(a.astype(np.int32))


def check_index(indices: Any, low: int, size: int, axis: int = 0) -> Any:
    """``indices`` checked to lie in ``[low, size)``: a concrete array now
    (IndexError), a traced one when the kernel runs (the execution fails with
    an IndexError message naming the first bad value, the axis and the op being
    traced). ``low=0`` refuses negative indices (PyTorch's gather, scatter and
    index_select) and returns the indices unchanged; ``low=-size`` accepts them
    and returns them counted from the end (``i + size`` for ``i < 0``)."""
    if is_tracer(indices):
        if not _dt.is_int(indices.dtype):
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        return wrap(B.check_index(to_value(indices), low, size, axis))
    a = np.asarray(indices)
    bad = (a < low) | (a >= size)
    if np.any(bad):
        raise IndexError(f"index {int(a[bad].reshape(-1)[0])} is out of bounds for axis {axis} "
                         f"with size {size}")
    return np.where(a < 0, a + size, a) if low < 0 else indices


@nkipy_op(cpu=np.take)
def take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
    """``np.take``; traced indices wrap when negative, and one out of range fails
    the execution (IndexError, as NumPy raises) with mode 'raise'."""
    v = to_value(a)
    if axis is None:
        v = B.reshape(v, (v.size,))
        ax = 0
    else:
        ax = B.normalize_axis(axis, v.ndim)
    return write_out(out, wrap(take_value(v, _indices(indices, v.shape[ax], mode, ax), ax)))


def _along_axis_shapes(xs: tuple, ishape: tuple, ax: int) -> tuple[tuple, tuple]:
    if len(xs) != len(ishape):
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    other = B.broadcast_shapes(tuple(1 if d == ax else s for d, s in enumerate(xs)),
                               tuple(1 if d == ax else s for d, s in enumerate(ishape)))
    xshape = tuple(xs[d] if d == ax else other[d] for d in range(len(xs)))
    ishp = tuple(ishape[d] if d == ax else other[d] for d in range(len(xs)))
    return xshape, ishp


@nkipy_op(cpu=np.take_along_axis)
def take_along_axis(arr: Any, indices: Any, axis: Any = -1) -> Any:
    v = to_value(arr)
    if axis is None:
        v = B.reshape(v, (v.size,))
        ax = 0
    else:
        ax = B.normalize_axis(axis, v.ndim)
    idx = _indices(indices, v.shape[ax], "raise", ax)
    xshape, ishape = _along_axis_shapes(v.shape, idx.shape, ax)
    v = B.broadcast_to(v, xshape)
    idx = B.broadcast_to(idx, ishape)
    return wrap(B.emit1("take_along_axis", [v, idx], {"axis": ax}, ishape, v.dtype))


def _put_value(v: Value, indices: Any, values: Any, ax: int, mode: str = "set") -> Value:
    idx = _indices(indices, v.shape[ax], "raise", ax)
    if idx.ndim != v.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    ishape = tuple(idx.shape[d] if d == ax else v.shape[d] for d in range(v.ndim))
    if B.broadcast_shapes(idx.shape, ishape) != ishape:
        raise IndexError(f"shape mismatch: indices of shape {idx.shape} do not broadcast "
                         f"against arr of shape {v.shape}")
    idx = B.broadcast_to(idx, ishape)
    vals = B.broadcast_to(to_value(values, v.dtype), ishape)
    if idx.size == 0:
        return v
    return B.emit1("put_along_axis", [v, idx, vals], {"axis": ax, "mode": mode}, v.shape, v.dtype)


def _put_along_axis_cpu(arr: Any, indices: Any, values: Any, axis: Any) -> np.ndarray:
    out = np.array(arr, copy=True)
    np.put_along_axis(out, indices, values, axis)
    return out


@nkipy_op(cpu=_put_along_axis_cpu)
def put_along_axis(arr: Any, indices: Any, values: Any, axis: Any) -> Any:
    """Functional ``np.put_along_axis``: returns a copy of ``arr`` with the values put.

    (``np.put_along_axis`` itself on a traced tensor mutates it, as in NumPy.)
    """
    v = to_value(arr)
    if axis is None:
        flat = B.reshape(v, (v.size,))
        return wrap(B.reshape(_put_value(flat, indices, values, 0), v.shape))
    return wrap(_put_value(v, indices, values, B.normalize_axis(axis, v.ndim)))


def np_put_along_axis(arr: Any, indices: Any, values: Any, axis: Any) -> None:
    """``np.put_along_axis`` on a tracer: mutates ``arr``."""
    if not is_tracer(arr):
        raise NKIPyTracingError("np.put_along_axis needs a traced destination in a kernel")
    assign_all(arr, put_along_axis(arr, indices, values, axis))


def _scatter_along_axis_cpu(x: Any, indices: Any, values: Any, axis: int) -> np.ndarray:
    out = np.array(x, copy=True)
    idx = np.asarray(indices)
    ax = axis % out.ndim
    if idx.ndim == 1:
        shp = [1] * out.ndim
        shp[ax] = idx.shape[0]
        idx = np.broadcast_to(idx.reshape(shp), np.shape(values))
    np.put_along_axis(out, idx, values, ax)
    return out


@nkipy_op(cpu=_scatter_along_axis_cpu)
def scatter_along_axis(x: Any, indices: Any, values: Any, axis: int) -> Any:
    """Copy of ``x`` with ``x[..., indices[i], ...] = values[..., i, ...]`` along ``axis``.

    1-D ``indices`` select positions along ``axis``; ``values`` has ``x``'s shape
    with that axis replaced by ``len(indices)``. ``indices`` of x's rank work like
    ``put_along_axis``.
    """
    v = to_value(x)
    ax = B.normalize_axis(axis, v.ndim)
    vals = to_value(values, v.dtype)
    idx = indices
    ishape = np.shape(indices) if not is_tracer(indices) else indices.shape
    if len(ishape) == 1 and v.ndim > 1:
        shp = [1] * v.ndim
        shp[ax] = ishape[0]
        iv = _indices(indices, v.shape[ax], "raise", ax)
        idx = wrap(B.broadcast_to(B.reshape(iv, shp), vals.shape))
    return wrap(_put_value(v, idx, wrap(vals), ax))


def _static_slice_cpu(x: Any, start_indices: Sequence[int], limit_indices: Sequence[int],
                      strides: Sequence[int] | None = None, squeeze_dims: Sequence[int] = ()) -> Any:
    strides = strides or [1] * len(start_indices)
    r = np.asarray(x)[tuple(slice(a, b, c) for a, b, c in zip(start_indices, limit_indices, strides))]
    return np.squeeze(r, axis=tuple(squeeze_dims)) if squeeze_dims else r


@nkipy_op(cpu=_static_slice_cpu)
def static_slice(x: Any, start_indices: Sequence[int], limit_indices: Sequence[int],
                 strides: Sequence[int] | None = None, squeeze_dims: Sequence[int] = ()) -> Any:
    """``x[start:limit:stride, ...]`` per dim, then the ``squeeze_dims`` removed."""
    v = to_value(x)
    strides = strides or [1] * v.ndim
    if not len(start_indices) == len(limit_indices) == len(strides) == v.ndim:
        raise ValueError("static_slice needs one start/limit/stride per dimension")
    norm = [slice(a, b, c).indices(n) for a, b, c, n in zip(start_indices, limit_indices,
                                                             strides, v.shape)]
    r = B.slice_(v, [s[0] for s in norm], [s[1] for s in norm], [s[2] for s in norm])
    if squeeze_dims:
        sq = B.normalize_axes(tuple(squeeze_dims), r.ndim)
        r = B.reshape(r, [s for d, s in enumerate(r.shape) if d not in sq])
    return wrap(r)


def _dus_cpu(x: Any, value: Any, start_indices: Sequence[Any],
             update_shape: Sequence[int] | None = None) -> np.ndarray:
    out = np.array(x, copy=True)
    upd = np.asarray(value, dtype=out.dtype)
    if update_shape is not None:
        upd = np.broadcast_to(upd, tuple(update_shape)) if upd.ndim == 0 else \
            upd.reshape(tuple(update_shape))
    sl = []
    for d, s in enumerate(start_indices):
        start = int(np.clip(int(s), 0, out.shape[d] - upd.shape[d]))
        sl.append(slice(start, start + upd.shape[d]))
    out[tuple(sl)] = upd
    return out


@nkipy_op(cpu=_dus_cpu)
def dynamic_update_slice(x: Any, value: Any, start_indices: Sequence[Any],
                         update_shape: Sequence[int] | None = None) -> Any:
    """Copy of ``x`` with ``value`` written at ``start_indices`` (ints or traced 0-d ints).

    Starts are clamped so the update fits (XLA ``dynamic-update-slice``).
    """
    v = to_value(x)
    upd = to_value(value, v.dtype)
    if update_shape is not None:
        ushape = tuple(int(s) for s in update_shape)
        upd = B.broadcast_to(upd, ushape) if upd.ndim == 0 else B.reshape(upd, ushape)
    if upd.ndim != v.ndim:
        raise ValueError(f"dynamic_update_slice: update of rank {upd.ndim} for a tensor of "
                         f"rank {v.ndim}")
    if any(u > n for u, n in zip(upd.shape, v.shape)):
        raise ValueError(f"dynamic_update_slice: update shape {upd.shape} does not fit "
                         f"{v.shape}")
    starts = list(start_indices)
    if len(starts) != v.ndim:
        raise ValueError("dynamic_update_slice needs one start index per dimension")
    if all(not is_tracer(s) for s in starts):
        st = [int(np.clip(int(s), 0, n - u)) for s, n, u in zip(starts, v.shape, upd.shape)]
        stops = [a + u for a, u in zip(st, upd.shape)]
        if tuple(upd.shape) == v.shape:
            return wrap(upd)
        return wrap(B.emit1("set_slice", [v, upd], {"starts": tuple(st), "stops": tuple(stops),
                                                    "steps": (1,) * v.ndim}, v.shape, v.dtype))
    svals = []
    for s in starts:
        sv = to_value(s, B.INT32) if is_tracer(s) else B.const(np.int32(int(s)))
        if sv.shape != ():
            if sv.size != 1:
                raise ValueError("dynamic_update_slice start indices must be scalars")
            sv = B.reshape(sv, ())
        svals.append(sv)
    return wrap(B.emit1("update_slice", [v, upd] + svals, {}, v.shape, v.dtype))


def _scatter_strided_cpu(x: Any, value: Any, scatter_indices_per_dim: Sequence[Sequence[int]]) -> Any:
    out = np.array(x, copy=True)
    out[np.ix_(*[np.asarray(i) for i in scatter_indices_per_dim])] = value
    return out


@nkipy_op(cpu=_scatter_strided_cpu)
def scatter_strided(x: Any, value: Any, scatter_indices_per_dim: Sequence[Sequence[int]]) -> Any:
    """Copy of ``x`` with ``x[np.ix_(*scatter_indices_per_dim)] = value``."""
    t = wrap(to_value(x))
    setitem(t, np.ix_(*[np.asarray(i, dtype=np.int64) for i in scatter_indices_per_dim]), value)
    return t


def _where_cpu(condition: Any, x: Any = None, y: Any = None) -> Any:
    if x is None and y is None:
        return np.where(condition)
    return np.where(condition, x, y)


@nkipy_op(cpu=_where_cpu)
def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``np.where(cond, x, y)`` (the one-argument form is data-dependent: unsupported)."""
    if x is None and y is None:
        raise NKIPyTracingError("np.where(condition) with one argument (nonzero) has a "
                                "data-dependent shape and cannot be traced; use "
                                "np.where(condition, x, y)")
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    dt = result_dtype(x, y, check_overflow=False)  # NumPy casts an oversized int unsafely
    c = to_value(condition)
    if c.dtype != B.BOOL:
        c = B.cast(c, B.BOOL)
    return wrap(B.where(c, to_value(x, dt), to_value(y, dt)))
