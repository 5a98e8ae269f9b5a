"""The neural-network registry entries (spike_torch/lowering/aten_nn.py), two-sided.

Each case captures one ATen op with make_fx, lowers it to NumPy source and checks
it against eager PyTorch on the CPU twice: the source run on the host with NumPy,
and the compiled kernel run on the device. Backward ops get the inputs their
forward would give them (max-pool indices, batch-norm statistics). A second part
compiles small models' forward and backward with torch.compile(backend="nkipy")
and checks every node was lowered and the gradients equal eager's.

Tolerances (rtol = atol): float32 1e-5, float16 2e-3, bfloat16 1.6e-2, each case
scaled by its ``tol_scale`` (long reductions: convolutions, norms' backwards).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from torch_to_nkipy.device import numpy_to_torch
from torch_to_nkipy.kernel import NKIPyKernel
from torch_to_nkipy.lowering import AtenOpRegistry

aten = torch.ops.aten
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
FLOATS = (F32, F16, BF16)
HALF = (F32, BF16)        # most cases: float32 and bfloat16 (float16 for a representative few)
TOL = {F32: (1e-5, 1e-5), F16: (2e-3, 2e-3), BF16: (1.6e-2, 1.6e-2)}


@dataclass
class Case:
    op: Any
    make: Callable[[torch.dtype, torch.Generator], Tuple]   # -> (args, kwargs)
    dtypes: Sequence[torch.dtype] = HALF
    id: str = ""
    tol_scale: float = 1.0
    ref: Any = None              # an op with a CPU kernel computing the same (op has none):
    adapt: Any = None            # ref's arguments from op's
    adapt_back: Any = None       # op's arguments from ref's (the traced node is retargeted)

    @property
    def name(self) -> str:
        return str(self.op) + (f"[{self.id}]" if self.id else "")


def R(*shape, lo=-2.0, hi=2.0):
    def f(dt, g):
        return (torch.rand(shape, generator=g) * (hi - lo) + lo).to(dt)
    return f


def I(*shape, hi=4, lo=0):
    def f(dt, g):
        return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    return f


def mk(*args, **kwargs):
    def make(dt, g):
        def ev(a):
            if callable(a):
                return a(dt, g)
            if isinstance(a, list):
                return [ev(x) for x in a]
            return a
        return tuple(ev(a) for a in args), {k: ev(v) for k, v in kwargs.items()}
    return make


def pool_bw(op_fwd, x_shape, *params):
    """max_pool*_with_indices_backward's arguments: grad, x, params, indices of x."""
    def make(dt, g):
        x = R(*x_shape)(dt, g)
        out, idx = op_fwd(x, *params)
        grad = R(*out.shape)(dt, g)
        return (grad, x, *params, idx), {}
    return make


def avg_bw(op_fwd, x_shape, *params):
    def make(dt, g):
        x = R(*x_shape)(dt, g)
        out = op_fwd(x, *params)
        return (R(*out.shape)(dt, g), x, *params), {}
    return make


def conv_bw(x_shape, w_shape, stride, padding, dilation, transposed, output_padding, groups,
            mask=(True, True, True), overrideable=False):
    def make(dt, g):
        x, w = R(*x_shape)(dt, g), R(*w_shape, lo=-0.5, hi=0.5)(dt, g)
        out = aten.convolution(x, w, None, stride, padding, dilation, transposed,
                               output_padding, groups)
        go = R(*out.shape)(dt, g)
        if overrideable:
            return (go, x, w, stride, padding, dilation, transposed, output_padding, groups,
                    list(mask)), {}
        bias = [w.shape[1] * groups if transposed else w.shape[0]]
        return (go, x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                list(mask)), {}
    return make


def bn_bw(shape, train):
    def make(dt, g):
        x, w = R(*shape)(dt, g), R(shape[1], lo=0.5, hi=1.5)(dt, g)
        rm, rv = R(shape[1])(dt, g), R(shape[1], lo=0.5, hi=2)(dt, g)
        _, mean, invstd = aten.native_batch_norm(x, w, None, rm.clone(), rv.clone(), train,
                                                 0.1, 1e-5)
        return (R(*shape)(dt, g), x, w, rm, rv, mean if train else None,
                invstd if train else None, train, 1e-5, [True, True, True]), {}
    return make


def gn_bw(shape, groups):
    def make(dt, g):
        n, c = shape[:2]
        hw = 1
        for s in shape[2:]:
            hw *= s
        x, w = R(*shape)(dt, g), R(c, lo=0.5, hi=1.5)(dt, g)
        _, mean, rstd = aten.native_group_norm(x, w, None, n, c, hw, groups, 1e-5)
        return (R(*shape)(dt, g), x, mean, rstd, w, n, c, hw, groups, [True, True, True]), {}
    return make


def ln_bw(shape, nshape, affine=True):
    def make(dt, g):
        x = R(*shape)(dt, g)
        w = R(*nshape, lo=0.5, hi=1.5)(dt, g) if affine else None
        b = R(*nshape)(dt, g) if affine else None
        _, mean, rstd = aten.native_layer_norm(x, nshape, w, b, 1e-5)
        return (R(*shape)(dt, g), x, nshape, mean, rstd, w, b, [True, affine, affine]), {}
    return make


def nll_bw(shape, classes, weight, reduction, ignore_index, op=aten.nll_loss_forward):
    def make(dt, g):
        x = torch.log_softmax(R(*shape)(F32, g), 1).to(dt)
        t = I(*((shape[0],) + tuple(shape[2:])), hi=classes)(dt, g)
        t.view(-1)[0] = ignore_index if ignore_index >= 0 or ignore_index == -100 else 0
        w = R(classes, lo=0.5, hi=2)(dt, g) if weight else None
        out, total = op(x, t, w, reduction, ignore_index)
        return (R(*out.shape)(dt, g), x, t, w, reduction, ignore_index, total), {}
    return make


def nll_fwd(shape, classes, weight, reduction, ignore_index=-100):
    def make(dt, g):
        x = torch.log_softmax(R(*shape)(F32, g), -1 if len(shape) == 1 else 1).to(dt)
        tshape = () if len(shape) == 1 else (shape[0],) + tuple(shape[2:])
        t = I(*tshape, hi=classes)(dt, g)
        if len(tshape):
            t.view(-1)[0] = ignore_index
        w = R(classes, lo=0.5, hi=2)(dt, g) if weight else None
        return (x, t, w, reduction, ignore_index), {}
    return make


CONV = aten.convolution.default
CASES = [
    # convolution: 1-D, 2-D, 3-D, strided, padded, dilated, grouped, transposed
    Case(CONV, mk(R(2, 3, 9), R(4, 3, 3), R(4), [2], [1], [1], False, [0], 1), id="1d",
         tol_scale=4),
    Case(CONV, mk(R(2, 4, 9, 8), R(6, 4, 3, 3), R(6), [2, 1], [1, 2], [1, 2], False, [0, 0], 1),
         id="2d", tol_scale=4, dtypes=FLOATS),
    Case(CONV, mk(R(2, 4, 7, 7), R(4, 1, 3, 3), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 4),
         id="depthwise", tol_scale=4),
    Case(CONV, mk(R(1, 4, 6, 6), R(6, 2, 3, 3), R(6), [1, 1], [0, 0], [1, 1], False, [0, 0], 2),
         id="groups", tol_scale=4),
    Case(CONV, mk(R(1, 2, 5, 6, 6), R(3, 2, 3, 2, 3), R(3), [2, 1, 1], [1, 0, 1], [1, 1, 1],
                  False, [0, 0, 0], 1), id="3d", tol_scale=4),
    Case(CONV, mk(R(2, 3, 7), R(3, 4, 3), R(4), [2], [1], [1], True, [1], 1), id="t1d",
         tol_scale=4),
    Case(CONV, mk(R(1, 4, 5, 4), R(4, 3, 3, 2), R(6), [2, 3], [1, 0], [1, 2], True, [1, 2], 2),
         id="t2d_groups", tol_scale=4),
    Case(CONV, mk(R(1, 2, 3, 4, 4), R(2, 3, 2, 3, 3), None, [2, 2, 1], [0, 1, 1], [1, 1, 1],
                  True, [1, 0, 0], 1), id="t3d", tol_scale=4),
    Case(CONV, mk(R(1, 2, 6, 6), R(2, 3, 1, 1), None, [2, 2], [1, 1], [1, 1], True, [0, 0], 1),
         id="t2d_crop", tol_scale=4),
    Case(aten.convolution_overrideable.default,
         mk(R(2, 3, 8, 8), R(4, 3, 3, 3), R(4), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
         tol_scale=4, ref=aten.convolution.default, adapt=list, adapt_back=list),
    # convolution backward
    Case(aten.convolution_backward.default,
         conv_bw((2, 4, 9, 8), (6, 4, 3, 3), [2, 2], [1, 1], [1, 1], False, [0, 0], 1),
         id="2d_s2", tol_scale=8, dtypes=FLOATS),
    Case(aten.convolution_backward.default,
         conv_bw((2, 4, 8, 8), (6, 4, 1, 1), [2, 2], [0, 0], [1, 1], False, [0, 0], 1,
                 mask=(True, True, False)), id="1x1_s2", tol_scale=8),
    Case(aten.convolution_backward.default,
         conv_bw((2, 4, 7, 7), (4, 1, 3, 3), [1, 1], [2, 2], [2, 2], False, [0, 0], 4),
         id="depthwise_dilated", tol_scale=8),
    Case(aten.convolution_backward.default,
         conv_bw((2, 3, 11), (4, 3, 3), [2], [1], [1], False, [0], 1), id="1d", tol_scale=8),
    Case(aten.convolution_backward.default,
         conv_bw((1, 2, 5, 6, 6), (3, 2, 3, 2, 3), [2, 1, 1], [1, 0, 1], [1, 1, 1], False,
                 [0, 0, 0], 1), id="3d", tol_scale=8, dtypes=(F32, BF16)),
    Case(aten.convolution_backward.default,
         conv_bw((1, 4, 5, 4), (4, 3, 3, 2), [2, 3], [1, 0], [1, 2], True, [1, 2], 2),
         id="transposed", tol_scale=8, dtypes=FLOATS),
    Case(aten.convolution_backward.default,
         conv_bw((2, 4, 6, 6), (6, 4, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                 mask=(False, True, True)), id="no_input_grad", tol_scale=8),
    Case(aten.convolution_backward_overrideable.default,
         conv_bw((2, 3, 8, 8), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                 overrideable=True), tol_scale=8, ref=aten.convolution_backward.default,
         adapt=lambda a: list(a[:3]) + [[a[2].shape[0]]] + list(a[3:]),
         adapt_back=lambda a: a[:3] + a[4:]),
    # pooling
    Case(aten.max_pool2d_with_indices.default, mk(R(1, 2, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1],
                                                  True), id="ceil"),
    Case(aten.max_pool2d_with_indices.default, mk(R(2, 2, 8, 9), [2, 3], [1, 2], [1, 1], [2, 1]),
         id="dilated"),
    Case(aten.max_pool2d_with_indices.default, mk(R(1, 2, 6, 6), [2, 2], [2, 2]), id="plain"),
    Case(aten.max_pool3d_with_indices.default, mk(R(1, 2, 5, 6, 6), [2, 3, 3], [2, 2, 2],
                                                  [0, 1, 1], [1, 1, 1], True)),
    Case(aten.max_pool2d_with_indices_backward.default,
         pool_bw(aten.max_pool2d_with_indices, (2, 3, 9, 9), [3, 3], [2, 2], [1, 1], [1, 1],
                 False), tol_scale=2),
    Case(aten.max_pool2d_with_indices_backward.default,
         pool_bw(aten.max_pool2d_with_indices, (1, 2, 8, 8), [3, 3], [2, 2], [0, 0], [1, 1],
                 True), id="ceil", tol_scale=2),
    Case(aten.max_pool3d_with_indices_backward.default,
         pool_bw(aten.max_pool3d_with_indices, (1, 2, 5, 6, 6), [2, 3, 3], [2, 2, 2], [0, 1, 1],
                 [1, 1, 1], True), tol_scale=2),
    Case(aten.avg_pool2d.default, mk(R(1, 2, 6, 6), [2, 2], [2, 2]), id="plain"),
    Case(aten.avg_pool2d.default, mk(R(1, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, False),
         id="exclude_pad"),
    Case(aten.avg_pool2d.default, mk(R(1, 2, 8, 7), [3, 3], [2, 2], [1, 1], True, True),
         id="ceil"),
    Case(aten.avg_pool2d.default, mk(R(1, 2, 8, 7), [3, 2], [2, 2], [1, 1], True, False),
         id="ceil_exclude"),
    Case(aten.avg_pool2d.default, mk(R(1, 2, 7, 7), [3, 3], [2, 2], [1, 0], False, True, 5),
         id="divisor"),
    Case(aten.avg_pool3d.default, mk(R(1, 2, 5, 6, 6), [2, 3, 3], [2, 2, 2], [1, 1, 1], True,
                                     False), dtypes=(F32,)),   # no half on the CPU
    Case(aten.avg_pool2d_backward.default,
         avg_bw(aten.avg_pool2d, (1, 2, 8, 7), [3, 3], [2, 2], [1, 1], True, False, None),
         tol_scale=2),
    Case(aten.avg_pool2d_backward.default,
         avg_bw(aten.avg_pool2d, (2, 2, 7, 7), [3, 3], [2, 2], [1, 1], False, True, 4),
         id="divisor", tol_scale=2),
    Case(aten.avg_pool3d_backward.default,
         avg_bw(aten.avg_pool3d, (1, 2, 5, 6, 6), [2, 3, 3], [2, 2, 2], [1, 1, 1], True, True,
                None), tol_scale=2, dtypes=(F32,)),
    Case(aten._adaptive_avg_pool2d.default, mk(R(2, 3, 7, 9), [3, 4]), tol_scale=2),
    Case(aten._adaptive_avg_pool2d.default, mk(R(2, 3, 4, 4), [1, 1]), id="global"),
    Case(aten._adaptive_avg_pool3d.default, mk(R(1, 2, 5, 6, 7), [2, 3, 3]), tol_scale=2),
    Case(aten._adaptive_avg_pool2d_backward.default, mk(R(2, 3, 3, 4), R(2, 3, 7, 9)),
         tol_scale=2),
    Case(aten._adaptive_avg_pool3d_backward.default, mk(R(1, 2, 2, 3, 3), R(1, 2, 5, 6, 7)),
         tol_scale=2),
    # batch norm
    Case(aten._batch_norm_with_update_functional.default,
         mk(R(4, 3, 5, 5), R(3), R(3), R(3), R(3, lo=0.5, hi=2), 0.1, 1e-5), tol_scale=4),
    Case(aten._native_batch_norm_legit_functional.default,
         mk(R(4, 3, 5, 5), R(3), R(3), R(3),
            R(3, lo=0.5, hi=2), True, 0.1, 1e-5), id="train", tol_scale=4),
    Case(aten._native_batch_norm_legit_functional.default,
         mk(R(4, 3, 5), None, None, R(3), R(3, lo=0.5, hi=2), False, 0.1, 1e-5), id="eval",
         tol_scale=4),
    Case(aten.native_batch_norm.default,
         mk(R(4, 3, 5, 5), R(3), R(3), None, None, True, 0.1, 1e-5), id="no_stats",
         tol_scale=4),
    Case(aten.native_batch_norm.default,
         mk(R(4, 3, 5, 5), R(3), R(3), R(3), R(3, lo=0.5, hi=2), False, 0.1, 1e-5), id="eval",
         tol_scale=4),
    Case(aten._native_batch_norm_legit.no_stats, mk(R(4, 3, 6), R(3), R(3), True, 0.1, 1e-5),
         tol_scale=4),
    Case(aten._native_batch_norm_legit_no_training.default,
         mk(R(2, 3, 4, 4), R(3), R(3), R(3), R(3, lo=0.5, hi=2), 0.1, 1e-5), tol_scale=2),
    Case(aten.native_batch_norm_backward.default, bn_bw((4, 3, 5, 5), True), id="train",
         tol_scale=8, dtypes=FLOATS),
    Case(aten.native_batch_norm_backward.default, bn_bw((4, 3, 5), False), id="eval",
         tol_scale=8),
    # group and layer norm
    Case(aten.native_group_norm.default, mk(R(2, 4, 3, 3), R(4), R(4), 2, 4, 9, 2, 1e-5),
         tol_scale=2),
    Case(aten.native_group_norm.default, mk(R(2, 6, 5), None, None, 2, 6, 5, 3, 1e-5),
         id="no_affine", tol_scale=2),
    Case(aten.native_group_norm.default, mk(R(0, 6, 5), R(6), R(6), 0, 6, 5, 3, 1e-5),
         id="empty", dtypes=(F32,)),
    Case(aten.native_group_norm_backward.default, gn_bw((2, 6, 4, 3), 3), tol_scale=8,
         dtypes=FLOATS),
    Case(aten.native_layer_norm_backward.default, ln_bw((2, 5, 8), [8]), tol_scale=8,
         dtypes=FLOATS),
    Case(aten.native_layer_norm_backward.default, ln_bw((3, 4, 6), [4, 6], affine=False),
         id="no_affine", tol_scale=8),
    # losses
    Case(aten.nll_loss_forward.default, nll_fwd((6, 5), 5, False, 1), id="mean", tol_scale=2),
    Case(aten.nll_loss_forward.default, nll_fwd((6, 5), 5, True, 1, ignore_index=2),
         id="weight_mean", tol_scale=2, dtypes=FLOATS),
    Case(aten.nll_loss_forward.default, nll_fwd((6, 5), 5, True, 0), id="none"),
    Case(aten.nll_loss_forward.default, nll_fwd((6, 5), 5, False, 2), id="sum", tol_scale=2),
    Case(aten.nll_loss_forward.default, nll_fwd((5,), 5, True, 1), id="1d"),
    Case(aten.nll_loss2d_forward.default, nll_fwd((2, 4, 3, 3), 4, True, 1), tol_scale=2),
    Case(aten.nll_loss_backward.default, nll_bw((6, 5), 5, False, 1, -100), id="mean"),
    Case(aten.nll_loss_backward.default, nll_bw((6, 5), 5, True, 0, 3), id="weight_none"),
    Case(aten.nll_loss_backward.default, nll_bw((6, 5), 5, True, 2, -100), id="weight_sum"),
    Case(aten.nll_loss2d_backward.default,
         nll_bw((2, 4, 3, 3), 4, True, 1, -100, op=aten.nll_loss2d_forward)),
    Case(aten.mse_loss.default, mk(R(3, 5), R(3, 5), 1), id="mean"),
    Case(aten.mse_loss.default, mk(R(3, 5), R(3, 5), 0), id="none"),
    Case(aten.mse_loss.default, mk(R(3, 5), R(3, 5), 2), id="sum", tol_scale=2),
    Case(aten.mse_loss_backward.default, mk(R(), R(3, 5), R(3, 5), 1), id="mean"),
    Case(aten.mse_loss_backward.default, mk(R(3, 5), R(3, 5), R(3, 5), 0), id="none"),
    # embedding
    Case(aten.embedding_dense_backward.default, mk(R(2, 7, 4), I(2, 7, hi=6), 6, -1, False),
         tol_scale=2, dtypes=FLOATS),
    Case(aten.embedding_dense_backward.default, mk(R(2, 7, 4), I(2, 7, hi=6), 6, 2, True),
         id="pad_freq", tol_scale=2),
    # activation backwards
    Case(aten.gelu_backward.default, mk(R(3, 5), R(3, 5, lo=-4, hi=4))),
    Case(aten.gelu_backward.default, mk(R(3, 5), R(3, 5, lo=-4, hi=4), approximate="tanh"),
         id="tanh"),
    Case(aten.silu_backward.default, mk(R(3, 5), R(3, 5, lo=-4, hi=4))),
    Case(aten.hardtanh_backward.default, mk(R(3, 5), R(3, 5), -0.5, 0.7)),
    Case(aten.leaky_relu_backward.default, mk(R(3, 5), R(3, 5), 0.1, False)),
    Case(aten.elu_backward.default, mk(R(3, 5), 1.0, 1.0, 1.0, False, R(3, 5))),
    Case(aten.elu_backward.default, mk(R(3, 5), 0.7, 1.2, 0.8, True, R(3, 5, lo=-0.5, hi=2)),
         id="result"),
]
_OPTIMIZER = [
    Case(aten.addcdiv.default, mk(R(3, 5), R(3, 5), R(3, 5, lo=0.5, hi=2), value=-0.1)),
    Case(aten.addcmul.default, mk(R(3, 5), R(3, 5), R(3, 5), value=0.3)),
    Case(aten.lerp.Scalar, mk(R(3, 5), R(3, 5), 0.1)),
    Case(aten.lerp.Tensor, mk(R(3, 5), R(3, 5), R(3, 5, lo=0, hi=1))),
]
CASES += _OPTIMIZER


def _graph(case: Case, dt: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    args, kwargs = case.make(dt, g)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensor_pos = [i for i, l in enumerate(leaves) if isinstance(l, torch.Tensor)]
    tensors = [leaves[i] for i in tensor_pos]

    def fn(*ts):
        ls = list(leaves)
        for i, t in zip(tensor_pos, ts):
            ls[i] = t
        a, kw = pytree.tree_unflatten(ls, spec)
        return case.op(*a, **kw)

    if case.ref is None:
        return make_fx(fn)(*tensors), fn, tensors

    def ref(*ts):
        ls = list(leaves)
        for i, t in zip(tensor_pos, ts):
            ls[i] = t
        a, kw = pytree.tree_unflatten(ls, spec)
        return case.ref(*case.adapt(a), **kw)

    gm = make_fx(ref)(*tensors)
    for node in gm.graph.nodes:
        if node.target is case.ref:
            node.target = case.op
            node.args = tuple(case.adapt_back(list(node.args)))
    gm.recompile()
    return gm, ref, tensors


def _compare(got, want, dt, scale, what):
    got_l = list(got) if isinstance(got, (list, tuple)) else [got]
    want_l = list(want) if isinstance(want, (list, tuple)) else [want]
    assert len(got_l) == len(want_l), what
    for i, (g_, w) in enumerate(zip(got_l, want_l)):
        if w is None:
            assert g_ is None, f"{what}[{i}]: expected no output"
            continue
        if not isinstance(g_, torch.Tensor):
            g_ = numpy_to_torch(g_, w.dtype) if hasattr(g_, "dtype") else torch.tensor(g_)
        g_ = g_.to(w.dtype) if g_.dtype != w.dtype else g_
        assert tuple(g_.shape) == tuple(w.shape), \
            f"{what}[{i}]: shape {tuple(g_.shape)} != {tuple(w.shape)}"
        if w.numel() == 0:
            continue
        if w.dtype.is_floating_point:
            rtol, atol = TOL.get(w.dtype, TOL[F32])
            torch.testing.assert_close(g_.float(), w.float(), rtol=rtol * scale,
                                       atol=atol * scale, equal_nan=True,
                                       msg=lambda m: f"{what}[{i}]: {m}")
        else:
            assert torch.equal(g_, w), f"{what}[{i}]: {g_} != {w}"


PARAMS = [pytest.param(c, dt, id=f"{c.name}-{str(dt).split('.')[-1]}")
          for c in CASES for dt in c.dtypes]


@pytest.mark.parametrize("case,dt", PARAMS)
def test_nn_op_two_sided(case, dt, nkipy_cache):
    gm, fn, tensors = _graph(case, dt, seed=0)
    want = fn(*[t.clone() for t in tensors])
    k = NKIPyKernel(gm, tensors, nkipy_cache)
    host = k.run_host(tensors)
    dev = k(tensors)
    if isinstance(want, torch.Tensor):
        want = [want]
    _compare(host, want, dt, case.tol_scale, f"host {case.name}")
    _compare(dev, want, dt, case.tol_scale, f"device {case.name}")


def test_every_nn_entry_has_a_case():
    from spike_torch.lowering import aten_nn

    tested = {str(c.op) for c in CASES}
    mine = [n for n in AtenOpRegistry.names()
            if getattr(AtenOpRegistry.get(n), "__module__", "") == aten_nn.__name__]
    # the batch-norm entry also serves _native_batch_norm_legit (no-stats / eval calls)
    allowed = {"aten._native_batch_norm_legit.default"}
    assert sorted(set(mine) - tested - allowed) == []


def test_mutating_batch_norm_is_not_claimed():
    """native_batch_norm in training mode with running statistics mutates them: the
    registry refuses those nodes (they are lowered through the functional form)."""
    x = torch.randn(2, 3, 4)
    rm, rv = torch.zeros(3), torch.ones(3)
    gm = make_fx(lambda x, a, b: aten.native_batch_norm(x, None, None, a, b, True, 0.1,
                                                       1e-5))(x, rm, rv)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    assert not AtenOpRegistry.is_supported(str(node.target), node)
    gm2 = make_fx(lambda x, a, b: aten.native_batch_norm(x, None, None, a, b, False, 0.1,
                                                        1e-5))(x, rm, rv)
    node2 = next(n for n in gm2.graph.nodes if n.op == "call_function")
    assert AtenOpRegistry.is_supported(str(node2.target), node2)
    from spike_torch.lowering import aten_nn
    with pytest.raises(NotImplementedError, match="updates its running statistics"):
        aten_nn.native_batch_norm(x.numpy(), None, None, rm.numpy(), rv.numpy(), True, 0.1,
                                  1e-5)


def test_nll_loss_target_out_of_range_is_nan():
    """Eager raises for a target outside [0, C); a kernel cannot, so the loss and
    the gradient of the sample are NaN (never a silently missing term)."""
    import numpy as np
    from spike_torch.lowering import aten_nn

    x = np.log(np.full((3, 4), 0.25, np.float32))
    t = np.array([1, 7, -100])
    loss, total = aten_nn.nll_loss_forward(x, t, None, 1, -100)
    assert np.isnan(loss)
    assert np.isnan(aten_nn.nll_loss_backward(np.float32(1), x, t, None, 1, -100, total)[1]).all()
    loss, total = aten_nn.nll_loss_forward(x, t, None, 2, -100)
    assert np.isnan(loss)
    grad = aten_nn.nll_loss_backward(np.float32(1), x, t, None, 2, -100, total)
    assert np.isnan(grad[1]).all() and not np.isnan(grad[0]).any() and (grad[2] == 0).all()


def test_convolution_rank_is_checked():
    from spike_torch.lowering import aten_nn
    import numpy as np
    with pytest.raises(NotImplementedError, match="convolution of a 6-D input"):
        aten_nn.convolution(np.zeros((1, 1, 2, 2, 2, 2), np.float32),
                            np.zeros((1, 1, 1, 1, 1, 1), np.float32), None, [1], [0], [1],
                            False, [0], 1)


# ---- compiled models: forward and backward through torch.compile ---------------------

class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.gn = nn.GroupNorm(2, 8)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.c1d = nn.Conv1d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x, y):
        h = F.relu(self.bn(self.c1(x)))
        h = F.max_pool2d(h, 3, 2, 1, ceil_mode=True)
        h = F.gelu(self.gn(self.dw(h)), approximate="tanh")
        h = F.silu(self.up(h))
        h = F.avg_pool2d(h, 2, ceil_mode=True, count_include_pad=False)
        h = F.leaky_relu(self.c1d(h.flatten(2)), 0.1)
        h = F.adaptive_avg_pool1d(h, 1).flatten(1)
        return F.cross_entropy(self.fc(h), y) + F.mse_loss(h, torch.zeros_like(h))


def test_compiled_cnn_forward_backward(backend, monkeypatch):
    """A small CNN (every nn entry of a training step) compiled fully onto the device:
    no node left to a CPU partition; loss, input gradient, parameter gradients and
    running statistics equal eager."""
    import torch_to_nkipy.backend as be

    on_cpu = []
    monkeypatch.setattr(be, "_log_unsupported_once", on_cpu.append)
    torch.manual_seed(0)
    ref = _Net()
    dev = _Net()
    dev.load_state_dict(ref.state_dict())
    x = torch.randn(2, 3, 12, 12)
    y = torch.tensor([1, 3])
    xr, xd = x.clone().requires_grad_(), x.clone().requires_grad_()
    loss_ref = ref(xr, y)
    loss_ref.backward()
    loss_dev = torch.compile(dev, backend="nkipy")(xd, y)
    loss_dev.backward()
    torch.testing.assert_close(loss_dev, loss_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(xd.grad, xr.grad, rtol=1e-3, atol=1e-5)
    for (n, p), q in zip(dev.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=n)
    torch.testing.assert_close(dev.bn.running_mean, ref.bn.running_mean)
    torch.testing.assert_close(dev.bn.running_var, ref.bn.running_var)
    assert on_cpu == []
