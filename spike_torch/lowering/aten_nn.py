"""Registry entries for the neural-network ops of a training loop.

Convolution (1-D/2-D/3-D, grouped, strided, dilated, transposed) and its
backward, pooling and its backward, batch/group/layer normalisation and their
backwards, the negative log-likelihood and mean-squared-error losses, the
embedding's backward, the activations' backwards, and the few pointwise ops an
optimizer step needs. Like :mod:`aten_numpy`, each entry is NumPy code on
arrays and nkipy kernel code on tracer tensors, takes the ATen schema's
arguments in order and returns what the schema returns (``None`` for an
output that ``output_mask`` leaves out).

Half-precision operands are computed in float32 and rounded once, as
PyTorch's CPU kernels do (batch norm in training rounds its batch statistics
to the parameters' dtype first, as the CPU kernel stores them); convolutions
and matrix products run on the runtime's GEMM.

Ops whose ATen schema mutates an argument (``_native_batch_norm_legit`` and
``native_batch_norm`` in training mode with running statistics) are lowered
through their functional form ``_native_batch_norm_legit_functional``, which
returns the updated running statistics; the mutating names are registered only
for the calls that mutate nothing (see :func:`_bn_pure`).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from nkipy.core import ops

from .aten_numpy import _half, _shape, _val, acc_dtype, cast
from .registry import AtenOpRegistry

reg = AtenOpRegistry.register


def _reg_missing(*names: str):
    """Registers ``fn`` under the names no other module has registered (pointwise ops
    an optimizer needs, which the math entries may also provide)."""
    def deco(fn):
        todo = [n for n in names if AtenOpRegistry.get(n) is None]
        if todo:
            reg(*todo)(fn)
        return fn
    return deco


def _tup(v: Any, n: int) -> tuple:
    """An ATen int[] argument (one value broadcast, or ``n`` values) as an n-tuple."""
    if isinstance(v, (int, np.integer)):
        return (int(v),) * n
    v = [int(a) for a in v]
    if len(v) == 1:
        return tuple(v) * n
    if len(v) != n:
        raise ValueError(f"expected 1 or {n} values, got {v}")
    return tuple(v)


def _sl(x: Any, axis: int, start: Any = None, stop: Any = None, step: Any = None) -> Any:
    return x[(slice(None),) * axis + (slice(start, stop, step),)]


def _acc(x: Any) -> Any:
    return cast(x, acc_dtype(x))


def _iota(n: int, axis: int, ndim: int) -> Any:
    """``arange(n)`` (int32) shaped to broadcast along ``axis`` of an ndim-D array."""
    shape = tuple(n if k == axis else 1 for k in range(ndim))
    return np.reshape(ops.arange(0, n, 1, dtype=np.int32), shape)


# ---- convolution ----------------------------------------------------------------

def _conv(x, w, bias, stride, padding, dilation, groups):
    """A non-transposed convolution; padding is per dim, an int or a (lo, hi) pair."""
    nsp = x.ndim - 2
    if nsp == 1:
        out = ops.conv2d(np.expand_dims(x, 2), np.expand_dims(w, 2), bias,
                         stride=(1, stride[0]), padding=((0, 0), _pair(padding[0])),
                         dilation=(1, dilation[0]), groups=groups)
        return np.squeeze(out, axis=2)
    conv = ops.conv2d if nsp == 2 else ops.conv3d
    return conv(x, w, bias, stride=tuple(stride), padding=tuple(_pair(p) for p in padding),
                dilation=tuple(dilation), groups=groups)


def _pair(p: Any) -> tuple:
    return tuple(p) if isinstance(p, (tuple, list)) else (int(p), int(p))


def _dilate(x: Any, axis: int, s: int) -> Any:
    """``s - 1`` zeros between consecutive elements along ``axis``."""
    if s == 1:
        return x
    shp = _shape(x)
    n = shp[axis]
    z = ops.zeros(shp[:axis + 1] + (s - 1,) + shp[axis + 1:], x.dtype)
    y = np.concatenate([np.expand_dims(x, axis + 1), z], axis=axis + 1)
    y = np.reshape(y, shp[:axis] + (n * s,) + shp[axis + 1:])
    return _sl(y, axis, 0, (n - 1) * s + 1)


def _conv_transpose(x, w, bias, stride, padding, dilation, output_padding, groups):
    """The transposed convolution: the adjoint of ``_conv`` with respect to its input,
    as a convolution of the stride-dilated input with the flipped, channel-swapped
    weight (C_in, C_out / groups, k...)."""
    nsp = x.ndim - 2
    ks = _shape(w)[2:]
    for i in range(nsp):
        x = _dilate(x, 2 + i, stride[i])
    pads = []
    for i in range(nsp):
        lo = dilation[i] * (ks[i] - 1) - padding[i]
        hi = lo + output_padding[i]
        if lo < 0:
            x = _sl(x, 2 + i, -lo, None)
            lo = 0
        if hi < 0:
            x = _sl(x, 2 + i, 0, _shape(x)[2 + i] + hi)
            hi = 0
        pads.append((lo, hi))
    cin, coutg = _shape(w)[:2]
    wg = np.reshape(w, (groups, cin // groups, coutg) + tuple(ks))
    wg = np.transpose(wg, (0, 2, 1) + tuple(range(3, 3 + nsp)))
    w2 = np.reshape(wg, (groups * coutg, cin // groups) + tuple(ks))
    w2 = np.flip(w2, axis=tuple(range(2, 2 + nsp)))
    return _conv(x, w2, bias, (1,) * nsp, pads, dilation, groups)


def _conv_args(x, stride, padding, dilation, output_padding):
    n = x.ndim - 2
    return _tup(stride, n), _tup(padding, n), _tup(dilation, n), _tup(output_padding, n)


def _conv_dtype_ok(t: Any) -> bool:
    """The runtime's convolution computes in float32 (half precision widened
    and rounded once, as the CPU kernel does); integer and float64 operands
    would be rounded to float32's 24-bit significand, so they run on the CPU."""
    import torch

    return t is not None and t.dtype in (torch.float32, torch.float16, torch.bfloat16)


def _conv_supported(node: Any) -> bool:
    """1-D to 3-D convolutions in float32 or half precision (see
    :func:`_conv_dtype_ok`); not transposed ones in half precision, whose CPU
    kernel (GEMM, then col2im adding the overlapping columns in the half dtype,
    then the bias) rounds at steps the device does not reproduce (past OpInfo's
    tolerance): they run on the CPU."""
    import torch

    x = _val(node.args[0])
    if x is None or x.dim() not in (3, 4, 5) or not _conv_dtype_ok(x):
        return False
    transposed = node.args[6] if len(node.args) > 6 else node.kwargs.get("transposed", False)
    return not (transposed and x.dtype in (torch.float16, torch.bfloat16))


@reg("aten.convolution.default", "aten.convolution_overrideable.default",
     supports=_conv_supported)
def convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    if x.ndim not in (3, 4, 5):
        raise NotImplementedError(f"convolution of a {x.ndim}-D input (1-D to 3-D "
                                  "convolutions are supported)")
    st, pd, dl, op = _conv_args(x, stride, padding, dilation, output_padding)
    if transposed:
        return _conv_transpose(x, w, bias, st, pd, dl, op, int(groups))
    return _conv(x, w, bias, st, pd, dl, int(groups))


def _conv_weight_grad(inp, gout, kshape, stride, padding, dilation, groups, dtype):
    """d(loss)/d(weight) of ``gout = conv(inp, weight)``: (O, C / groups, k...), one
    batched GEMM per group over the im2col patches of ``inp``."""
    n, c = _shape(inp)[:2]
    o = _shape(gout)[1]
    so = _shape(gout)[2:]
    g = groups
    cg, og = c // g, o // g
    p = int(np.prod(so, dtype=np.int64))
    k = int(np.prod(kshape, dtype=np.int64))
    x = _acc(inp)
    if any(padding):
        x = np.pad(x, ((0, 0), (0, 0)) + tuple((q, q) for q in padding))
    cols = []
    for offs in itertools.product(*[range(kk) for kk in kshape]):
        sl = tuple(slice(a * d, a * d + s * (m - 1) + 1, s)
                   for a, d, s, m in zip(offs, dilation, stride, so))
        cols.append(x[(slice(None), slice(None)) + sl])
    col = np.stack(cols, axis=2) if len(cols) > 1 else np.expand_dims(cols[0], 2)
    col = np.reshape(col, (n, g, cg * k, p))
    col = np.reshape(np.transpose(col, (1, 0, 3, 2)), (g, n * p, cg * k))
    go = np.reshape(_acc(gout), (n, g, og, p))
    go = np.reshape(np.transpose(go, (1, 2, 0, 3)), (g, og, n * p))
    gw = np.matmul(go, col)
    return cast(np.reshape(gw, (o, cg) + tuple(kshape)), dtype)


def _conv_backward(grad_output, x, w, stride, padding, dilation, transposed,
                   output_padding, groups, output_mask):
    nsp = x.ndim - 2
    st, pd, dl, op = _conv_args(x, stride, padding, dilation, output_padding)
    groups = int(groups)
    ks = _shape(w)[2:]
    gi = gw = gb = None
    if output_mask[0]:
        if transposed:
            gi = _conv(grad_output, w, None, st, pd, dl, groups)
        else:
            adj = tuple(_shape(x)[2 + i] - ((_shape(grad_output)[2 + i] - 1) * st[i] - 2 * pd[i]
                                            + dl[i] * (ks[i] - 1) + 1) for i in range(nsp))
            gi = _conv_transpose(grad_output, w, None, st, pd, dl, adj, groups)
    if output_mask[1]:
        if transposed:
            gw = _conv_weight_grad(grad_output, x, ks, st, pd, dl, groups, w.dtype)
        else:
            gw = _conv_weight_grad(x, grad_output, ks, st, pd, dl, groups, w.dtype)
    if output_mask[2]:
        gb = cast(np.sum(_acc(grad_output), axis=(0,) + tuple(range(2, x.ndim))),
                  grad_output.dtype)
    return gi, gw, gb


def _conv_bw_supported(node: Any) -> bool:
    x = _val(node.args[1])
    return x is not None and x.dim() in (3, 4, 5) and _conv_dtype_ok(x)


@reg("aten.convolution_backward.default", supports=_conv_bw_supported)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    return _conv_backward(grad_output, input, weight, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask)


@reg("aten.convolution_backward_overrideable.default", supports=_conv_bw_supported)
def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
                                      transposed, output_padding, groups, output_mask):
    return _conv_backward(grad_output, input, weight, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask)


# ---- pooling ------------------------------------------------------------------------

def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (a ceil-mode window must start inside the
    input or its left padding)."""
    span = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


class _Geo:
    """The geometry of an n-D pooling over the last ``nsp`` dims."""

    def __init__(self, shape, nsp, kernel, stride, padding, dilation, ceil_mode):
        self.nsp = nsp
        self.k = _tup(kernel, nsp)
        self.s = _tup(stride, nsp) if stride is not None and len(stride) else self.k
        self.p = _tup(padding, nsp)
        self.d = _tup(dilation, nsp)
        self.size = tuple(shape[-nsp:])
        self.lead = len(shape) - nsp
        self.out = tuple(_pool_out(*a, ceil_mode) for a in
                         zip(self.size, self.k, self.s, self.p, self.d))
        # extra zeros on the high side so a ceil-mode window fits
        self.extra = tuple(max(0, (o - 1) * s + d * (k - 1) + 1 - (n + 2 * p))
                           for o, s, d, k, n, p in
                           zip(self.out, self.s, self.d, self.k, self.size, self.p))
        self.padded = tuple(n + 2 * p + e for n, p, e in zip(self.size, self.p, self.extra))

    def pad(self, x, value):
        pads = tuple((p, p + e) for p, e in zip(self.p, self.extra))
        if not any(a or b for a, b in pads):
            return x
        return np.pad(x, ((0, 0),) * self.lead + pads, constant_values=value)

    def offsets(self):
        return itertools.product(*[range(k) for k in self.k])

    def window(self, xp, offs):
        sl = tuple(slice(a * d, a * d + s * (o - 1) + 1, s)
                   for a, d, s, o in zip(offs, self.d, self.s, self.out))
        return xp[(slice(None),) * self.lead + sl]

    def flat_pos(self, offs, ndim):
        """The input position (flattened over the pooled dims) each output's tap
        ``offs`` reads, broadcastable to the output."""
        pos = None
        stride = 1
        for i in reversed(range(self.nsp)):
            ax = ndim - self.nsp + i
            coord = _iota(self.out[i], ax, ndim) * self.s[i] + (offs[i] * self.d[i] - self.p[i])
            term = coord * stride if stride != 1 else coord
            pos = term if pos is None else pos + term
            stride *= self.size[i]
        return pos

    def scatter(self, contrib, offs):
        """``contrib`` (output-shaped) placed where tap ``offs`` read, in the padded
        input's shape (zeros elsewhere)."""
        c = contrib
        for i in range(self.nsp):
            c = _dilate(c, self.lead + i, self.s[i])
        pads = []
        for i in range(self.nsp):
            lo = offs[i] * self.d[i]
            hi = self.padded[i] - lo - ((self.out[i] - 1) * self.s[i] + 1)
            pads.append((lo, hi))
        return np.pad(c, ((0, 0),) * self.lead + tuple(pads))

    def crop(self, xp):
        sl = tuple(slice(p, p + n) for p, n in zip(self.p, self.size))
        return xp[(slice(None),) * self.lead + sl]


def _max_pool(x, nsp, kernel_size, stride, padding, dilation, ceil_mode):
    geo = _Geo(_shape(x), nsp, kernel_size, stride, padding, dilation, ceil_mode)
    xp = geo.pad(x, -np.inf)
    best = idx = None
    for offs in geo.offsets():
        win = geo.window(xp, offs)
        pos = geo.flat_pos(offs, x.ndim)
        if best is None:
            best, idx = win, np.broadcast_to(pos, _shape(win))
        else:
            take = (win > best) | np.isnan(win)
            idx = np.where(take, pos, idx)
            # maximum propagates NaN as the take above does (win wins ties,
            # the same value); unlike where(take, win, best) it reads best
            # once, so the taps stay one fused loop when the indices are dead
            best = np.maximum(win, best)
    return best, idx


def _max_pool_backward(grad_output, x, nsp, kernel_size, stride, padding, dilation, ceil_mode,
                       indices):
    geo = _Geo(_shape(x), nsp, kernel_size, stride, padding, dilation, ceil_mode)
    go = _acc(grad_output)
    total = None
    for offs in geo.offsets():
        hit = indices == geo.flat_pos(offs, x.ndim)
        part = geo.scatter(np.where(hit, go, 0), offs)
        total = part if total is None else total + part
    return cast(geo.crop(total), x.dtype)


@reg("aten.max_pool2d_with_indices.default")
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,),
                            ceil_mode=False):
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode)


@reg("aten.max_pool3d_with_indices.default")
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=(0,), dilation=(1,),
                            ceil_mode=False):
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode)


@reg("aten.max_pool2d_with_indices_backward.default")
def max_pool2d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(grad_output, x, 2, kernel_size, stride, padding, dilation,
                              ceil_mode, indices)


@reg("aten.max_pool3d_with_indices_backward.default")
def max_pool3d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(grad_output, x, 3, kernel_size, stride, padding, dilation,
                              ceil_mode, indices)


def _avg_divisor(geo, count_include_pad, divisor_override, ndim, dtype):
    """The divisor of each output window (PyTorch's rule: a window is clipped to the
    padded input, and further to the input without ``count_include_pad``)."""
    if divisor_override:
        return float(divisor_override)
    div = None
    for i in range(geo.nsp):
        ax = ndim - geo.nsp + i
        start = _iota(geo.out[i], ax, ndim) * geo.s[i] - geo.p[i]
        end = np.minimum(start + geo.k[i], geo.size[i] + geo.p[i])
        if not count_include_pad:
            start = np.maximum(start, 0)
            end = np.minimum(end, geo.size[i])
        cnt = cast(end - start, dtype)
        div = cnt if div is None else div * cnt
    return div


def _avg_pool(x, nsp, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    geo = _Geo(_shape(x), nsp, kernel_size, stride, padding, (1,), ceil_mode)
    xp = geo.pad(_acc(x), 0)
    total = None
    for offs in geo.offsets():
        win = geo.window(xp, offs)
        total = win if total is None else total + win
    div = _avg_divisor(geo, count_include_pad, divisor_override, x.ndim, total.dtype)
    return cast(total / div, x.dtype)


def _avg_pool_backward(grad_output, x, nsp, kernel_size, stride, padding, ceil_mode,
                       count_include_pad, divisor_override):
    geo = _Geo(_shape(x), nsp, kernel_size, stride, padding, (1,), ceil_mode)
    go = _acc(grad_output)
    go = go / _avg_divisor(geo, count_include_pad, divisor_override, x.ndim, go.dtype)
    total = None
    for offs in geo.offsets():
        part = geo.scatter(go, offs)
        total = part if total is None else total + part
    return cast(geo.crop(total), x.dtype)


@reg("aten.avg_pool2d.default")
def avg_pool2d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@reg("aten.avg_pool3d.default")
def avg_pool3d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    return _avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


@reg("aten.avg_pool2d_backward.default")
def avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    return _avg_pool_backward(grad_output, x, 2, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@reg("aten.avg_pool3d_backward.default")
def avg_pool3d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    return _avg_pool_backward(grad_output, x, 3, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


def _adaptive_matrix(n: int, o: int, dtype: Any) -> Any:
    """(n, o): column j averages input positions floor(j*n/o) .. ceil((j+1)*n/o)-1."""
    pos = np.reshape(ops.arange(0, n, 1, dtype=np.int32), (n, 1))
    j = np.reshape(ops.arange(0, o, 1, dtype=np.int32), (1, o))
    start = (j * n) // o
    end = ((j + 1) * n + o - 1) // o
    inside = (pos >= start) & (pos < end)
    return cast(inside, dtype) / cast(end - start, dtype)


def _apply_last(x, axis_from_end, m):
    """Multiplies dim ``-axis_from_end`` of ``x`` by the matrix ``m`` (n, o)."""
    nd = x.ndim
    ax = nd - axis_from_end
    perm = tuple(k for k in range(nd) if k != ax) + (ax,)
    xt = np.transpose(x, perm)
    y = np.matmul(xt, m)
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    return np.transpose(y, tuple(inv))


def _adaptive_avg(x, output_size, nsp):
    xa = _acc(x)
    out = _tup(output_size, nsp)
    for i in range(nsp):
        n = _shape(x)[x.ndim - nsp + i]
        xa = _apply_last(xa, nsp - i, _adaptive_matrix(n, out[i], xa.dtype))
    return cast(xa, x.dtype)


def _adaptive_avg_backward(grad_output, x, nsp):
    go = _acc(grad_output)
    for i in range(nsp):
        n = _shape(x)[x.ndim - nsp + i]
        o = _shape(grad_output)[x.ndim - nsp + i]
        go = _apply_last(go, nsp - i, np.transpose(_adaptive_matrix(n, o, go.dtype)))
    return cast(go, x.dtype)


@reg("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg(x, output_size, 2)


#: the most window positions (the product of the largest window's sides) a half
#: adaptive_avg_pool3d sums on the device step by step; larger windows run on the CPU
HALF_POOL3D_MAX_WINDOW = 64


def _window(n: int, o: int) -> int:
    """The largest adaptive window along a dim of ``n`` pooled to ``o``."""
    return max(-(-((j + 1) * n) // o) - (j * n) // o for j in range(o)) if o else 0


def _pool3d_supported(node: Any) -> bool:
    """Half inputs: only windows of at most HALF_POOL3D_MAX_WINDOW positions."""
    import torch

    x = _val(node.args[0])
    if x is None or x.dtype not in (torch.float16, torch.bfloat16):
        return x is not None
    out = _tup(node.args[1], 3)
    return math.prod(_window(n, o) for n, o in zip(x.shape[-3:], out)) \
        <= HALF_POOL3D_MAX_WINDOW


def _window_take(x, axis, n, o, k):
    """Element ``k`` of every output's window along ``axis`` (``x.ndim`` dims from
    the end), and whether it is inside the window (both broadcast over ``x``)."""
    j = ops.arange(0, o, 1, dtype=np.int32)
    pos = (j * n) // o + k
    inside = pos < ((j + 1) * n + o - 1) // o
    ax = x.ndim - axis
    shape = tuple(o if d == ax else 1 for d in range(x.ndim))
    return np.take(x, np.minimum(pos, n - 1), axis=ax), np.reshape(inside, shape)


def _window_sizes(ndim, axis, n, o):
    """Every output's window size along ``axis`` (float32, broadcasting)."""
    j = ops.arange(0, o, 1, dtype=np.int32)
    size = ((j + 1) * n + o - 1) // o - (j * n) // o
    shape = tuple(o if d == ndim - axis else 1 for d in range(ndim))
    return np.reshape(size.astype(np.float32), shape)


def _adaptive_avg3d_half(x, output_size):
    """PyTorch's CPU kernel for half inputs: each window summed in its order
    (depth, height, width) in the half dtype, rounded at every addition, then
    divided by its depth, height and width in turn, rounded after each. Emulated
    exactly: float32 operations on half values rounded to the dtype after each."""
    out = _tup(output_size, 3)
    n = _shape(x)[-3:]
    xf = x.astype(np.float32)
    acc = None
    for a in range(_window(n[0], out[0])):
        va, ma = _window_take(xf, 3, n[0], out[0], a)
        for b in range(_window(n[1], out[1])):
            vb, mb = _window_take(va, 2, n[1], out[1], b)
            for c in range(_window(n[2], out[2])):
                vc, mc = _window_take(vb, 1, n[2], out[2], c)
                v = np.where(ma & mb & mc, vc, 0.0)
                acc = v if acc is None else (acc + v).astype(x.dtype).astype(np.float32)
    for axis in (3, 2, 1):
        size = _window_sizes(x.ndim, axis, n[3 - axis], out[3 - axis])
        acc = (acc / size).astype(x.dtype).astype(np.float32)
    return acc.astype(x.dtype)


@reg("aten._adaptive_avg_pool3d.default", supports=_pool3d_supported)
def adaptive_avg_pool3d(x, output_size):
    """Half inputs follow the CPU kernel's rounding (_adaptive_avg3d_half)."""
    if _half(x) and math.prod(_shape(x)):
        return _adaptive_avg3d_half(x, output_size)
    return _adaptive_avg(x, output_size, 3)


@reg("aten._adaptive_avg_pool2d_backward.default")
def adaptive_avg_pool2d_backward(grad_output, x):
    return _adaptive_avg_backward(grad_output, x, 2)


@reg("aten._adaptive_avg_pool3d_backward.default")
def adaptive_avg_pool3d_backward(grad_output, x):
    return _adaptive_avg_backward(grad_output, x, 3)


# ---- normalisation -----------------------------------------------------------------

def _bn_axes(x):
    return (0,) + tuple(range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)


def _bn_affine(out, weight, bias, shape):
    if weight is not None:
        out = out * np.reshape(_acc(weight), shape)
    if bias is not None:
        out = out + np.reshape(_acc(bias), shape)
    return out


def _bn_train(x, weight, bias, eps, stats=None):
    axes, shape = _bn_axes(x)
    xf = _acc(x)
    mean = np.mean(xf, axis=axes)
    d = xf - np.reshape(mean, shape)
    var = np.mean(d * d, axis=axes)
    invstd = ops.rsqrt(var + eps)
    # PyTorch's CPU kernel keeps the batch statistics in the parameters' dtype
    # (weight's, else the running statistics', else the input's) and normalises
    # with those: half-precision parameters round mean and invstd (bfloat16 ones
    # compute invstd from the rounded variance)
    pdt = next((a.dtype for a in (weight, bias, stats) if a is not None), x.dtype)
    if np.dtype(pdt).itemsize == 2 and np.dtype(pdt).kind in "fV":
        m = cast(cast(mean, pdt), xf.dtype)
        v = var if np.dtype(pdt).kind == "f" else cast(cast(var, pdt), xf.dtype)
        r = cast(cast(ops.rsqrt(v + eps), pdt), xf.dtype)
        out = _bn_affine((xf - np.reshape(m, shape)) * np.reshape(r, shape), weight, bias, shape)
    else:
        out = _bn_affine(d * np.reshape(invstd, shape), weight, bias, shape)
    return cast(out, x.dtype), mean, invstd, var


def _bn_eval(x, weight, bias, running_mean, running_var, eps):
    axes, shape = _bn_axes(x)
    xf = _acc(x)
    out = (xf - np.reshape(_acc(running_mean), shape)) * \
        np.reshape(ops.rsqrt(_acc(running_var) + eps), shape)
    empty = ops.zeros((0,), np.dtype(np.float32))
    return cast(_bn_affine(out, weight, bias, shape), x.dtype), empty, empty


def _bn_bfloat16_training(node: Any, training_at: int) -> bool:
    """Training-mode batch norm of bfloat16 input: PyTorch's CPU kernel rounds its
    batch statistics in a way the entries above do not reproduce exactly (an
    instance norm's invstd differs by one bfloat16 ulp in some channels, past
    OpInfo's tolerance where the affine output cancels), so these run on the CPU
    (exact) instead. float16 matches the CPU bit for bit and stays."""
    import torch

    v = _val(node.args[0])
    args = list(node.args) + [None] * 8
    training = node.kwargs.get("training", args[training_at]) if training_at >= 0 else True
    return bool(training) and v is not None and v.dtype == torch.bfloat16


def _bn_pure(node: Any) -> bool:
    """native_batch_norm / _native_batch_norm_legit mutate their running statistics
    in training mode: the entry serves only the calls that mutate nothing (and
    not bfloat16 training, see _bn_bfloat16_training)."""
    args = list(node.args) + [None] * 8
    training = node.kwargs.get("training", args[5])
    return (not training or (args[3] is None and args[4] is None)) and \
        not _bn_bfloat16_training(node, 5)


@reg("aten._native_batch_norm_legit_functional.default",
     supports=lambda node: not _bn_bfloat16_training(node, 5))
def native_batch_norm_functional(x, weight, bias, running_mean, running_var, training,
                                 momentum, eps):
    if not training:
        out, a, b = _bn_eval(x, weight, bias, running_mean, running_var, eps)
        return out, a, b, running_mean, running_var
    out, mean, invstd, var = _bn_train(x, weight, bias, eps, running_mean)
    n = int(np.prod(_shape(x), dtype=np.int64)) // max(_shape(x)[1], 1)
    unbiased = var * (n / (n - 1)) if n > 1 else var
    new_mean = _acc(running_mean) * (1 - momentum) + mean * momentum
    new_var = _acc(running_var) * (1 - momentum) + unbiased * momentum
    return (out, mean, invstd, cast(new_mean, running_mean.dtype),
            cast(new_var, running_var.dtype))


@reg("aten.native_batch_norm.default", "aten._native_batch_norm_legit.default",
     supports=_bn_pure)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    if training and (running_mean is not None or running_var is not None):
        raise NotImplementedError("batch norm in training mode updates its running statistics: "
                                  "lower it through _native_batch_norm_legit_functional")
    if training:
        out, mean, invstd, _ = _bn_train(x, weight, bias, eps)
        return out, mean, invstd
    return _bn_eval(x, weight, bias, running_mean, running_var, eps)


@reg("aten._native_batch_norm_legit.no_stats",
     supports=lambda node: not _bn_bfloat16_training(node, -1))
def native_batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    out, mean, invstd, _ = _bn_train(x, weight, bias, eps)
    return out, mean, invstd


@reg("aten._native_batch_norm_legit_no_training.default")
def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    return _bn_eval(x, weight, bias, running_mean, running_var, eps)


@reg("aten.native_batch_norm_backward.default")
def native_batch_norm_backward(grad_out, x, weight, running_mean, running_var, save_mean,
                               save_invstd, train, eps, output_mask):
    axes, shape = _bn_axes(x)
    xf, go = _acc(x), _acc(grad_out)
    if train:
        mean, invstd = _acc(save_mean), _acc(save_invstd)
    else:
        mean, invstd = _acc(running_mean), ops.rsqrt(_acc(running_var) + eps)
    xhat = (xf - np.reshape(mean, shape)) * np.reshape(invstd, shape)
    sum_g = np.sum(go, axis=axes)
    sum_gx = np.sum(go * xhat, axis=axes)
    gi = gw = gb = None
    if output_mask[0]:
        scale = np.reshape(invstd if weight is None else invstd * _acc(weight), shape)
        if train:
            n = int(np.prod(_shape(x), dtype=np.int64)) // max(_shape(x)[1], 1)
            g = go - np.reshape(sum_g / n, shape) - xhat * np.reshape(sum_gx / n, shape)
        else:
            g = go
        gi = cast(g * scale, x.dtype)
    if output_mask[1]:
        gw = cast(sum_gx, weight.dtype if weight is not None else x.dtype)
    if output_mask[2]:
        gb = cast(sum_g, weight.dtype if weight is not None else x.dtype)
    return gi, gw, gb


@reg("aten.native_group_norm.default")
def native_group_norm(x, weight, bias, N, C, HxW, group, eps):
    xf = np.reshape(_acc(x), (N, group, (C // group) * HxW))
    mean = np.mean(xf, axis=2, keepdims=True)
    d = xf - mean
    rstd = ops.rsqrt(np.mean(d * d, axis=2, keepdims=True) + eps)
    out = np.reshape(d * rstd, (N, C, HxW))
    if weight is not None:
        out = out * np.reshape(_acc(weight), (1, C, 1))
    if bias is not None:
        out = out + np.reshape(_acc(bias), (1, C, 1))
    return (cast(np.reshape(out, _shape(x)), x.dtype), np.reshape(mean, (N, group)),
            np.reshape(rstd, (N, group)))


@reg("aten.native_group_norm_backward.default")
def native_group_norm_backward(grad_out, x, mean, rstd, weight, N, C, HxW, group, output_mask):
    go = np.reshape(_acc(grad_out), (N, C, HxW))
    xf = np.reshape(_acc(x), (N, group, (C // group) * HxW))
    m = np.reshape(_acc(mean), (N, group, 1))
    r = np.reshape(_acc(rstd), (N, group, 1))
    xhat = (xf - m) * r
    gi = gw = gb = None
    if output_mask[0]:
        g = go * np.reshape(_acc(weight), (1, C, 1)) if weight is not None else go
        k = (C // group) * HxW
        g = np.reshape(g, (N, group, k))
        gi = r * (g - np.sum(g, axis=2, keepdims=True) / k
                  - xhat * (np.sum(g * xhat, axis=2, keepdims=True) / k))
        gi = cast(np.reshape(gi, _shape(x)), x.dtype)
    wdt = weight.dtype if weight is not None else x.dtype
    if output_mask[1]:
        gx = go * np.reshape(xhat, (N, C, HxW))
        gw = cast(np.sum(gx, axis=(0, 2)), wdt)
    if output_mask[2]:
        gb = cast(np.sum(go, axis=(0, 2)), wdt)
    return gi, gw, gb


@reg("aten.native_layer_norm_backward.default")
def native_layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    k = len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))
    m = int(np.prod(normalized_shape, dtype=np.int64))
    xf, go = _acc(x), _acc(grad_out)
    r = _acc(rstd)
    xhat = (xf - _acc(mean)) * r
    gi = gw = gb = None
    if output_mask[0]:
        g = go * _acc(weight) if weight is not None else go
        gi = r * (g - np.sum(g, axis=axes, keepdims=True) / m
                  - xhat * (np.sum(g * xhat, axis=axes, keepdims=True) / m))
        gi = cast(gi, x.dtype)
    if output_mask[1] and weight is not None:
        gw = cast(np.sum(go * xhat, axis=lead) if lead else go * xhat, weight.dtype)
    if output_mask[2] and bias is not None:
        gb = cast(np.sum(go, axis=lead) if lead else go, bias.dtype)
    return gi, gw, gb


# ---- losses --------------------------------------------------------------------

def _nll_parts(x, target, weight, ignore_index):
    """(one-hot of the target over the class dim 1, per-element weight) for
    nll_loss's (N, C, d...) input; ignored targets have weight 0, a target out of
    range (eager raises; a kernel cannot) weight NaN, so the loss and its gradient
    are NaN rather than silently short of a term."""
    c = _shape(x)[1]
    hot = _iota(c, 1, x.ndim) == np.expand_dims(target, 1)
    valid = target != ignore_index
    bad = valid & ((target < 0) | (target >= c))
    acc = acc_dtype(x)
    if weight is not None:
        w = np.sum(np.where(hot, np.reshape(cast(weight, acc), (1, c) + (1,) * (x.ndim - 2)),
                            0), axis=1)
        w = np.where(valid, w, 0)
    else:
        w = cast(valid, acc)
    return hot, np.where(bad, cast(float("nan"), acc), w)


def _nll_forward(x, target, weight, reduction, ignore_index):
    one = x.ndim == 1
    if one:
        x, target = np.expand_dims(x, 0), np.reshape(target, (1,))
    hot, w = _nll_parts(x, target, weight, ignore_index)
    picked = np.sum(np.where(hot, _acc(x), 0), axis=1)
    loss = -picked * w
    total = np.sum(w)
    if reduction == 0:
        out = loss[0] if one else loss
        return cast(out, x.dtype), cast(ops.zeros((), acc_dtype(x)), x.dtype)
    out = np.sum(loss)
    if reduction == 1:
        out = out / total
    return cast(out, x.dtype), cast(total, x.dtype)


def _nll_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight):
    shp = _shape(x)
    one = x.ndim == 1
    if one:
        x, target = np.expand_dims(x, 0), np.reshape(target, (1,))
        if reduction == 0:
            grad_output = np.reshape(grad_output, (1,))
    hot, w = _nll_parts(x, target, weight, ignore_index)
    g = _acc(grad_output)
    if reduction == 1:
        g = g / _acc(total_weight)
    scale = -w * g
    grad = np.where(hot | np.expand_dims(np.isnan(w), 1), np.expand_dims(scale, 1), 0)
    return cast(np.reshape(grad, shp), x.dtype)


@reg("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    return _nll_forward(x, target, weight, reduction, ignore_index)


@reg("aten.nll_loss_backward.default", "aten.nll_loss2d_backward.default")
def nll_loss_backward(grad_output, x, target, weight, reduction, ignore_index, total_weight):
    return _nll_backward(grad_output, x, target, weight, reduction, ignore_index,
                         total_weight)


def _reduce(v, reduction, dtype):
    if reduction == 1:
        return cast(np.mean(v), dtype)
    if reduction == 2:
        return cast(np.sum(v), dtype)
    return cast(v, dtype)


@reg("aten.mse_loss.default")
def mse_loss(x, y, reduction=1):
    d = _acc(x) - _acc(y)
    return _reduce(d * d, reduction, x.dtype)


@reg("aten.mse_loss_backward.default")
def mse_loss_backward(grad_output, x, y, reduction):
    g = 2 * (_acc(x) - _acc(y)) * _acc(grad_output)
    if reduction == 1:
        g = g / max(int(np.prod(_shape(x), dtype=np.int64)), 1)
    return cast(g, x.dtype)


# ---- embedding -----------------------------------------------------------------

@reg("aten.embedding_dense_backward.default")
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
                             scale_grad_by_freq):
    d = _shape(grad_output)[-1]
    t = int(np.prod(_shape(indices), dtype=np.int64))
    idx = np.reshape(indices, (t,))
    g = np.reshape(_acc(grad_output), (t, d))
    acc = acc_dtype(grad_output)
    keep = None
    if padding_idx is not None and padding_idx >= 0:
        keep = idx != padding_idx
        g = np.where(np.expand_dims(keep, 1), g, 0)
    out = ops.zeros((num_weights, d), acc)
    np.add.at(out, idx, g)
    if scale_grad_by_freq:
        cnt = ops.zeros((num_weights,), acc)
        ones = ops.ones((t,), acc)
        np.add.at(cnt, idx, ones)
        out = out / np.expand_dims(np.maximum(cnt, 1), 1)
    return cast(out, grad_output.dtype)


# ---- activation backwards --------------------------------------------------------

@reg("aten.gelu_backward.default")
def gelu_backward(grad_output, x, approximate="none"):
    xf, g = _acc(x), _acc(grad_output)
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = k * (xf + 0.044715 * xf * xf * xf)
        t = np.tanh(inner)
        dinner = k * (1 + 3 * 0.044715 * xf * xf)
        d = 0.5 * (1 + t) + 0.5 * xf * (1 - t * t) * dinner
    else:
        cdf = 0.5 * (1 + ops.erf(xf * (1 / math.sqrt(2.0))))
        pdf = np.exp(-0.5 * xf * xf) * (1 / math.sqrt(2 * math.pi))
        d = cdf + xf * pdf
    return cast(g * d, x.dtype)


@reg("aten.silu_backward.default")
def silu_backward(grad_output, x):
    xf, g = _acc(x), _acc(grad_output)
    s = ops.sigmoid(xf)
    return cast(g * s * (1 + xf * (1 - s)), x.dtype)


@reg("aten.hardtanh_backward.default")
def hardtanh_backward(grad_output, x, min_val, max_val):
    return np.where((x <= min_val) | (x >= max_val), cast(0, grad_output.dtype), grad_output)


@reg("aten.leaky_relu_backward.default")
def leaky_relu_backward(grad_output, x, negative_slope, self_is_result):
    g = _acc(grad_output)
    return cast(np.where(x > 0, g, g * negative_slope), grad_output.dtype)


@reg("aten.elu_backward.default")
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    g, v = _acc(grad_output), _acc(self_or_result)
    if is_result:
        neg = g * input_scale * (v + alpha * scale)
    else:
        neg = g * (input_scale * alpha * scale) * np.exp(v * input_scale)
    return cast(np.where(v <= 0, neg, g * scale), grad_output.dtype)


# ---- the pointwise ops of an optimizer step (SGD with momentum, AdamW) -----------------

@_reg_missing("aten.addcdiv.default")
def addcdiv(x, t1, t2, value=1):
    return cast(_acc(x) + value * (_acc(t1) / _acc(t2)), x.dtype)


@_reg_missing("aten.addcmul.default")
def addcmul(x, t1, t2, value=1):
    return cast(_acc(x) + value * (_acc(t1) * _acc(t2)), x.dtype)


@_reg_missing("aten.lerp.Scalar", "aten.lerp.Tensor")
def lerp(x, end, weight):
    xf = _acc(x)
    w = _acc(weight) if hasattr(weight, "dtype") else weight
    return cast(xf + w * (_acc(end) - xf), x.dtype)



def _bn_update_ok(node: Any) -> bool:
    """float32 / float64 only: PyTorch's half-precision kernel rounds differently."""
    import torch

    v = _val(node.args[0])
    return v is not None and v.dtype in (torch.float32, torch.float64)


@reg("aten._batch_norm_with_update_functional.default", supports=_bn_update_ok)
def batch_norm_with_update_functional(x, weight, bias, running_mean, running_var, momentum, eps):
    """Training-mode batch norm returning the updated running statistics (the
    functional form of ``_batch_norm_with_update``); its ``reserve`` output is
    the empty byte tensor of the CPU kernel."""
    out, mean, invstd, new_mean, new_var = native_batch_norm_functional(
        x, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, invstd, ops.zeros((0,), np.dtype(np.uint8)), new_mean, new_var
