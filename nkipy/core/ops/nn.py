"""Neural-network ops (nkipy extras): softmax, log_softmax, rms_norm, topk.

Each works on NumPy arrays too (plain NumPy, the CPU reference). Half-precision
inputs are computed in float32 and rounded once.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core import interp as _interp
from nkipy.core.ops import _builder as B
from nkipy.core.ops._builder import reduce_np
from nkipy.core.ops._core import nkipy_op, to_value, wrap

__all__ = ["softmax", "log_softmax", "rms_norm", "topk"]


def _float_dtypes(dt: Any) -> tuple[np.dtype, np.dtype]:
    """(compute, result) dtype: the result is what np.exp gives; halves compute in fp32."""
    res = _dt.ufunc_dtypes(np.exp, [np.dtype(dt)])[1]
    return (B.FLOAT32 if res.itemsize == 2 else res), res


def _softmax_cpu(x: Any, axis: int = -1) -> np.ndarray:
    x = np.asarray(x)
    cdt, rdt = _float_dtypes(x.dtype)
    xc = x.astype(cdt)
    m = np.max(xc, axis=axis, keepdims=True) if xc.size else xc
    e = np.exp(xc - m)
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(rdt)


@nkipy_op(cpu=_softmax_cpu)
def softmax(x: Any, axis: int = -1) -> Any:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    v = to_value(x)
    cdt, rdt = _float_dtypes(v.dtype)
    v = B.cast(v, cdt)
    ax = (B.normalize_axis(axis, v.ndim),)
    if v.size == 0:
        return wrap(B.cast(v, rdt))
    m = reduce_np("reduce_max", v, ax, True, None)
    e = B.unary("exp", B.binary("sub", v, m))
    s = reduce_np("reduce_sum", e, ax, True, 0)
    return wrap(B.cast(B.binary("div", e, s), rdt))


def _log_softmax_cpu(x: Any, axis: int = -1) -> np.ndarray:
    x = np.asarray(x)
    cdt, rdt = _float_dtypes(x.dtype)
    xc = x.astype(cdt)
    m = np.max(xc, axis=axis, keepdims=True) if xc.size else xc
    d = xc - m
    return (d - np.log(np.sum(np.exp(d), axis=axis, keepdims=True))).astype(rdt)


@nkipy_op(cpu=_log_softmax_cpu)
def log_softmax(x: Any, axis: int = -1) -> Any:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    v = to_value(x)
    cdt, rdt = _float_dtypes(v.dtype)
    v = B.cast(v, cdt)
    if v.size == 0:
        return wrap(B.cast(v, rdt))
    ax = (B.normalize_axis(axis, v.ndim),)
    d = B.binary("sub", v, reduce_np("reduce_max", v, ax, True, None))
    lse = B.unary("log", reduce_np("reduce_sum", B.unary("exp", d), ax, True, 0))
    return wrap(B.cast(B.binary("sub", d, lse), rdt))


def _rms_norm_cpu(x: Any, weight: Any = None, eps: float = 1e-6, axis: int = -1) -> np.ndarray:
    x = np.asarray(x)
    cdt, rdt = _float_dtypes(x.dtype)
    xc = x.astype(cdt)
    ms = np.mean(xc * xc, axis=axis, keepdims=True)
    r = xc * (1.0 / np.sqrt(ms + np.asarray(eps, cdt))).astype(cdt)
    if weight is not None:
        r = r * np.asarray(weight).astype(cdt)
    return r.astype(rdt)


@nkipy_op(cpu=_rms_norm_cpu)
def rms_norm(x: Any, weight: Any = None, eps: float = 1e-6, axis: int = -1) -> Any:
    """``x / sqrt(mean(x**2, axis) + eps) * weight`` (weight broadcasts against x)."""
    v = to_value(x)
    cdt, rdt = _float_dtypes(v.dtype)
    v = B.cast(v, cdt)
    ax = (B.normalize_axis(axis, v.ndim),)
    n = v.shape[ax[0]]
    ss = reduce_np("reduce_sum", B.binary("mul", v, v), ax, True, 0)
    ms = B.binary("div", ss, B.const(np.asarray(n, cdt)))
    r = B.binary("mul", v, B.unary("rsqrt", B.binary("add", ms, B.const(np.asarray(eps, cdt)))))
    if weight is not None:
        w = to_value(weight, cdt)
        r = B.binary("mul", r, w)
    return wrap(B.cast(r, rdt))


def _topk_cpu(x: Any, k: int, axis: int = 0, is_ascend: bool = False, **kw: Any) -> tuple:
    x = np.asarray(x)
    ax = axis % x.ndim
    if not 0 <= k <= x.shape[ax]:
        raise ValueError(f"k={k} must be between 0 and the size of axis {ax} ({x.shape[ax]})")
    vals, idx = _interp._topk(x, k, ax, not is_ascend)
    return vals, idx.astype(np.uint32)


@nkipy_op(cpu=_topk_cpu)
def topk(x: Any, k: int, axis: int = 0, is_ascend: bool = False, **kwargs: Any) -> tuple:
    """The ``k`` largest (``is_ascend=False``) or smallest values along ``axis`` and
    their indices (uint32, as in the original), sorted; ties keep the lower index,
    NaN ranks above every number."""
    v = to_value(x)
    if v.ndim == 0:
        raise ValueError("topk needs an array of at least one dimension")
    ax = B.normalize_axis(axis, v.ndim)
    k = int(k)
    if not 0 <= k <= v.shape[ax]:
        raise ValueError(f"k={k} must be between 0 and the size of axis {ax} ({v.shape[ax]})")
    orig = v.dtype
    if orig == B.BOOL:
        v = B.cast(v, np.dtype(np.uint8))
    shape = v.shape[:ax] + (k,) + v.shape[ax + 1:]
    node = B.ctx().emit("topk", [v], {"k": k, "axis": ax, "largest": not is_ascend,
                                      "sorted": True},
                        [(shape, v.dtype), (shape, B.INT32)])
    vals, idx = node.outputs
    return wrap(B.cast(vals, orig)), wrap(B.cast(idx, np.dtype(np.uint32)))
