"""Convolution: conv2d (NCHW input, OIHW weight) and conv3d (NCDHW, OIDHW; traced as
one conv2d per kernel depth tap over the output depths folded into the batch)."""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from nkipy.core import dtypes as _dt
from nkipy.core.ops import _builder as B
from nkipy.core.ops._core import nkipy_op, result_dtype, to_value, unsupported, wrap

__all__ = ["conv2d", "conv3d"]


def _tuple(value: Any, n: int, name: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    if isinstance(value, (tuple, list)) and len(value) == n and \
            all(isinstance(v, (int, np.integer)) for v in value):
        return tuple(int(v) for v in value)
    raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")


def _padding(padding: Any, n: int, kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    """((lo, hi), ...) per spatial dim from int / n-tuple / pairs / 'valid' / 'same'."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            out = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                out.append((total // 2, total - total // 2))
            return tuple(out)
        raise ValueError(f"invalid padding string {padding!r}")
    if isinstance(padding, (tuple, list)) and len(padding) == n and \
            all(isinstance(p, (tuple, list)) for p in padding):
        return tuple((int(lo), int(hi)) for lo, hi in padding)
    p = _tuple(padding, n, "padding")
    return tuple((x, x) for x in p)


def _conv_shape(x_shape: tuple, w_shape: tuple, groups: int, stride: tuple, pads: tuple,
                dilation: tuple) -> tuple:
    nsp = len(stride)
    if len(x_shape) != nsp + 2 or len(w_shape) != nsp + 2:
        raise ValueError(f"conv{nsp}d expects {nsp + 2}-D input and weight, got "
                         f"{x_shape} and {w_shape}")
    n, c = x_shape[:2]
    o, cg = w_shape[:2]
    if groups < 1 or c % groups or o % groups or cg != c // groups:
        raise ValueError(f"conv{nsp}d: input channels {c}, weight {w_shape} and groups={groups} "
                         "do not match (weight.shape[1] * groups must equal the input channels)")
    out = [n, o]
    for i in range(nsp):
        size = x_shape[2 + i] + pads[i][0] + pads[i][1] - dilation[i] * (w_shape[2 + i] - 1) - 1
        if size < 0:
            raise ValueError(f"conv{nsp}d: kernel larger than the padded input")
        out.append(size // stride[i] + 1)
    return tuple(out)


def _conv_nd_cpu(x: np.ndarray, w: np.ndarray, bias: Any, stride: tuple, pads: tuple,
                 dilation: tuple, groups: int) -> np.ndarray:
    out_dt = _dt.narrow(np.result_type(x.dtype, w.dtype) if bias is None else
                        np.result_type(x.dtype, w.dtype, np.asarray(bias).dtype))
    acc = np.float32 if out_dt.kind == "f" or out_dt == _dt.bfloat16 else out_dt
    shape = _conv_shape(x.shape, w.shape, groups, stride, pads, dilation)
    xp = np.pad(x.astype(acc), ((0, 0), (0, 0)) + tuple(pads))
    out = np.zeros(shape, dtype=acc)
    cg = w.shape[1]
    og = w.shape[0] // groups
    wa = w.astype(acc)
    nsp = len(stride)
    letters = "xyz"[:nsp]
    eq = f"nc{letters},oc->no{letters}"
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        for offs in itertools.product(*[range(k) for k in w.shape[2:]]):
            sl = tuple(slice(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in
                       zip(offs, dilation, stride, shape[2:]))
            patch = xg[(slice(None), slice(None)) + sl]
            out[:, g * og:(g + 1) * og] += np.einsum(
                eq, patch, wa[(slice(g * og, (g + 1) * og), slice(None)) + offs]).astype(acc)
    if bias is not None:
        out = out + np.asarray(bias).astype(acc).reshape((1, -1) + (1,) * nsp)
    return out.astype(out_dt)


def _conv_cpu(nsp: int, input: Any, weight: Any, bias: Any, stride: Any, padding: Any,
              dilation: Any, groups: int) -> np.ndarray:
    """The CPU version of conv<nsp>d on NumPy arrays."""
    x, w = np.asarray(input), np.asarray(weight)
    st, dl = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
    return _conv_nd_cpu(x, w, bias, st, _padding(padding, nsp, w.shape[2:], dl, st), dl, groups)


def _conv2d_cpu(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                dilation: Any = 1, groups: int = 1, **kw: Any) -> np.ndarray:
    return _conv_cpu(2, input, weight, bias, stride, padding, dilation, groups)


def _traced_conv_args(nsp: int, input: Any, weight: Any, bias: Any, stride: Any, padding: Any,
                      dilation: Any, groups: int) -> tuple:
    """What a traced conv<nsp>d works from: (dtype, x, w, b or None, stride, pads,
    dilation, output shape), every argument checked."""
    dt = result_dtype(input, weight) if bias is None else result_dtype(input, weight, bias)
    x, w = to_value(input, dt), to_value(weight, dt)
    st, dl = _tuple(stride, nsp, "stride"), _tuple(dilation, nsp, "dilation")
    if any(s < 1 for s in st) or any(d < 1 for d in dl):
        raise ValueError(f"conv{nsp}d stride and dilation must be positive")
    pads = _padding(padding, nsp, w.shape[2:], dl, st)
    shape = _conv_shape(x.shape, w.shape, int(groups), st, pads, dl)
    b = None
    if bias is not None:
        b = to_value(bias, dt)
        if b.shape != (w.shape[0],):
            raise ValueError(f"conv{nsp}d bias must have shape ({w.shape[0]},), got {b.shape}")
    return dt, x, w, b, st, pads, dl, shape


@nkipy_op(cpu=_conv2d_cpu)
def conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, **kwargs: Any) -> Any:
    """2-D convolution (cross-correlation, like PyTorch): input NCHW, weight OIHW
    (I = C / groups), optional bias (O,). padding: int, (ph, pw),
    ((top, bottom), (left, right)), 'valid' or 'same'."""
    dt, x, w, b, st, pads, dl, shape = _traced_conv_args(2, input, weight, bias, stride,
                                                         padding, dilation, groups)
    ins = [x, w] if b is None else [x, w, b]
    return wrap(B.emit1("conv2d", ins, {"stride": st, "padding": pads, "dilation": dl,
                                        "groups": int(groups)}, shape, dt))


def _conv3d_cpu(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                dilation: Any = 1, groups: int = 1, **kw: Any) -> np.ndarray:
    return _conv_cpu(3, input, weight, bias, stride, padding, dilation, groups)


@nkipy_op(cpu=_conv3d_cpu)
def conv3d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, **kwargs: Any) -> Any:
    """3-D convolution (cross-correlation, like PyTorch): input NCDHW, weight
    OIDHW (I = C / groups), optional bias (O,). padding: int, (pd, ph, pw),
    three (lo, hi) pairs, 'valid' or 'same'.

    Traced as one ``conv2d`` per depth tap of the kernel, the output depths
    folded into the batch, the taps summed in float32 (as the CPU version
    accumulates) and the sum cast to the result dtype."""
    dt, x, w, b, st, pads, dl, shape = _traced_conv_args(3, input, weight, bias, stride,
                                                         padding, dilation, groups)
    acc = np.dtype(np.float32) if dt.kind == "f" or dt == _dt.bfloat16 else dt
    n, c, depth = x.shape[:3]
    o, kd = w.shape[0], w.shape[2]
    do, ho, wo = shape[2:]
    xt = wrap(B.cast(x, acc))
    wt = wrap(B.cast(w, acc))
    (plo, phi) = pads[0]
    if plo or phi:  # zero depth planes on either side
        parts = [np.zeros((n, c, plo) + x.shape[3:], acc)] if plo else []
        parts.append(xt)
        if phi:
            parts.append(np.zeros((n, c, phi) + x.shape[3:], acc))
        xt = np.concatenate(parts, axis=2)
    total = None
    if n * do and o:
        for t in range(kd):
            start = t * dl[0]
            planes = xt[:, :, start:start + st[0] * (do - 1) + 1:st[0]]      # (N, C, Do, H, W)
            batch = np.reshape(np.transpose(planes, (0, 2, 1, 3, 4)),
                               (n * do, c) + tuple(planes.shape[3:]))
            part = conv2d(batch, wt[:, :, t], stride=st[1:], padding=pads[1:],
                          dilation=dl[1:], groups=int(groups))         # (N*Do, O, Ho, Wo)
            total = part if total is None else total + part
        out = np.transpose(np.reshape(total, (n, do, o, ho, wo)), (0, 2, 1, 3, 4))
    else:
        out = np.zeros(shape, acc)
    if bias is not None:
        out = out + np.reshape(wrap(B.cast(b, acc)), (1, o, 1, 1, 1))
    return wrap(B.cast(to_value(out), dt))
