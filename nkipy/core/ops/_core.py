"""Shared machinery of the ops: the CPU/trace dispatcher, operand conversion and
writing into tracers (``dst[...] = src``, ``out=``).

Every public op is a plain function made by :func:`nkipy_op`: called while no
kernel is traced it runs its CPU implementation (plain NumPy, the reference);
called while a kernel is traced it records IR through its traced implementation.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ir import Value
from nkipy.core.ops import _builder as B
from nkipy.core.tensor import NKIPyTensorRef
from nkipy.core.trace import NKIPyTracingError, current_context


class NKIPyUnsupportedError(NotImplementedError):
    """A NumPy feature that nkipy kernels do not support (see docs/nkipy-ops.md)."""


def unsupported(what: str, hint: str = "") -> NKIPyUnsupportedError:
    msg = f"{what} is not supported in nkipy kernels"
    if hint:
        msg += f"; {hint}"
    return NKIPyUnsupportedError(msg + " (supported operations: docs/nkipy-ops.md)")


def nkipy_op(cpu: Callable | None = None, name: str | None = None) -> Callable[[Callable], Callable]:
    """Makes an op from its traced implementation and ``cpu`` (the NumPy one)."""

    def deco(traced: Callable) -> Callable:
        opname = name or traced.__name__.lstrip("_")

        @functools.wraps(traced)
        def op(*args: Any, **kwargs: Any) -> Any:
            if current_context() is None:
                if cpu is None:
                    raise unsupported(f"{opname} outside a traced kernel")
                return cpu(*args, **kwargs)
            return traced(*args, **kwargs)

        op.cpu = cpu  # type: ignore[attr-defined]
        op.traced = traced  # type: ignore[attr-defined]
        op.__name__ = opname
        op.__qualname__ = opname
        return op

    return deco


def is_tracer(x: Any) -> bool:
    return isinstance(x, NKIPyTensorRef)


def wrap(v: Value) -> NKIPyTensorRef:
    return NKIPyTensorRef(v)


def _check_live(t: NKIPyTensorRef) -> None:
    if t._ctx is not current_context():
        t._check_context()


def static_array(x: Any) -> np.ndarray:
    """``np.asarray`` of a static operand, rejecting object/complex arrays."""
    arr = np.asarray(x)
    if arr.dtype.kind in "OUSVcmM" and arr.dtype != _dt.bfloat16 and not _dt.is_float8(arr.dtype):
        raise TypeError(f"nkipy kernels cannot use a value of dtype {arr.dtype}: {x!r:.60}")
    return arr


def to_value(x: Any, dtype: Any = None) -> Value:
    """The IR value of an operand (tracer, NumPy array/scalar, Python number, list)."""
    if isinstance(x, NKIPyTensorRef):
        _check_live(x)
        v = x.value
        return B.cast(v, dtype) if dtype is not None else v
    if isinstance(x, Value):
        return B.cast(x, dtype) if dtype is not None else x
    if isinstance(x, (list, tuple)) and any(map(is_tracer, x)):
        parts = [to_value(e, dtype) for e in x]
        dt = _dt.result_type(*[p.dtype for p in parts]) if dtype is None else _dt.narrow(dtype)
        parts = [B.broadcast_to(B.cast(p, dt), parts[0].shape) if p.shape == () else B.cast(p, dt)
                 for p in parts]
        return B.concat([B.reshape(p, (1,) + p.shape) for p in parts], 0)
    arr = static_array(x)
    if dtype is not None:
        dt = _dt.to_dtype(dtype)
        if arr.dtype != dt:
            with np.errstate(all="ignore"):
                arr = arr.astype(dt)
    return B.const(arr)


def operand_key(x: Any) -> Any:
    """What type promotion sees of an operand (tracers by their dtype)."""
    if isinstance(x, NKIPyTensorRef):
        return x.dtype
    if isinstance(x, (list, tuple)) and any(map(is_tracer, x)):
        return _dt.result_type(*x, narrow_result=False)
    return x


def result_dtype(*operands: Any, check_overflow: bool = True) -> np.dtype:
    """NumPy's result dtype of operands (weak Python scalars), narrowed to 32 bits."""
    return _dt.result_type(*[operand_key(o) for o in operands], check_overflow=check_overflow)


def shape_of(x: Any) -> tuple[int, ...]:
    if isinstance(x, (NKIPyTensorRef, Value)):
        return tuple(x.shape)
    return np.shape(x)


def _fit_value(val: Value, shape: tuple[int, ...]) -> Value:
    """NumPy assignment broadcasting: leading size-1 dims of the value may be dropped."""
    while val.ndim > len(shape) and val.shape[0] == 1:
        val = B.reshape(val, val.shape[1:])
    try:
        return B.broadcast_to(val, shape)
    except ValueError:
        raise ValueError(f"could not broadcast input array from shape {val.shape} into "
                         f"shape {shape}") from None


def _assigned_value(value: Any, dtype: np.dtype) -> Value:
    """A value cast for assignment (unsafe casting, but Python ints must fit, as NumPy 2)."""
    if isinstance(value, int) and not isinstance(value, bool) and _dt.is_int(dtype):
        _dt.check_weak_fits(_dt.Weak(value), dtype)
    return to_value(value, dtype)


def assign_all(dst: NKIPyTensorRef, src: Any) -> None:
    """``dst[...] = src`` (src broadcast and cast to dst's dtype)."""
    dst._check_context()
    val = _assigned_value(src, dst.dtype)
    dst._write(_fit_value(val, dst.shape))


def write_out(out: Any, result: NKIPyTensorRef) -> NKIPyTensorRef:
    """Implements ``out=``: writes ``result`` into the tracer ``out`` (same_kind casting)."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise unsupported("out= with several arrays")
        out = out[0]
    if out is None:
        return result
    if not is_tracer(out):
        raise NKIPyTracingError("out= must be a traced tensor inside a kernel (a NumPy array "
                                "cannot receive traced results)")
    if not _dt.can_cast_same_kind(result.dtype, out.dtype):
        raise TypeError(f"Cannot cast ufunc output from dtype('{result.dtype}') to "
                        f"dtype('{out.dtype}') with casting rule 'same_kind'")
    assign_all(out, result)
    return out


def reject_kwargs(what: str, kwargs: dict, allowed: Sequence[str] = ()) -> None:
    for k, v in kwargs.items():
        if k in allowed:
            continue
        if k == "where" and (v is True):
            continue
        if k in ("order", "subok", "casting") and v in ("K", "C", True, "same_kind", "unsafe"):
            continue
        if k == "out" and v is None:
            continue
        raise unsupported(f"{what}({k}=...)")
