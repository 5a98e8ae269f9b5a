"""Inference graphs: an eval-mode batch norm folded into the convolution before it.

``aten.convolution`` followed by ``aten._native_batch_norm_legit_no_training`` (what
an ``nn.BatchNorm*`` in eval mode becomes after AOTAutograd) is rewritten into one
convolution with per-output-channel scaled weights and a new bias::

    s  = gamma * rsqrt(running_var + eps)
    w' = w * s            (s broadcast over every dim of w but the first)
    b' = (b - running_mean) * s + beta

The new weight and bias are nodes of the graph computed from its inputs (the
parameters and buffers), never constants: a parameter or running statistic
changed between calls is seen by the next call. An activation after the batch
norm (ReLU, ReLU6) then reads the convolution directly, and the code generator
fuses it into the convolution's epilogue with the bias.

Only graphs that autograd does not differentiate reach this pass: the backend
applies it to AOTAutograd's inference graphs (``torch.no_grad()``, or no input
needing a gradient), never to the forward of a training graph. It rewrites a
pair only when

- the convolution is not transposed and its output has no other user than the
  batch norm (otherwise the unscaled output is still needed);
- the batch norm's only used result is its output (``getitem 0``);
- the convolution's output, weight and the batch norm's tensors are float32
  (the fold reassociates the per-channel multiply into the weights: within
  float32 rounding of eager, which is the backend's float32 tolerance);
- the weight's shape is static, and, when :data:`MAX_WEIGHT_PER_OUTPUT` is set,
  the weight has at most that many times as many elements as the output
  (scaling the weights costs a pass over them on every call; the batch norm
  removed costs a pass over the output). Off by default: the generated kernel
  scales all the weights in a few parallel loops, and on ResNet-18 and
  MobileNetV2 at batch 1 folding every pair measured as fast as or faster than
  a limit of 2 (bench/bench_conv_bn_fold.py).
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import torch
import torch.fx

aten = torch.ops.aten

#: When set, a pair is folded only when ``weight.numel() <= MAX_WEIGHT_PER_OUTPUT *
#: out.numel()`` (see the module docstring); ``None`` (the default) folds every pair.
MAX_WEIGHT_PER_OUTPUT: Optional[float] = None


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _is_f32(n: Any) -> bool:
    v = _val(n)
    return isinstance(v, torch.Tensor) and v.dtype == torch.float32


def _static_numel(v: torch.Tensor) -> Optional[int]:
    """The element count of ``v``; None when a size is symbolic (no guard added)."""
    if not all(isinstance(d, int) for d in v.shape):
        return None
    n = 1
    for d in v.shape:
        n *= d
    return n


def _foldable(conv: torch.fx.Node, bn: torch.fx.Node) -> bool:
    if len(conv.args) != 9 or len(bn.args) != 7 or conv.kwargs or bn.kwargs:
        return False
    x, w, b = conv.args[0], conv.args[1], conv.args[2]
    if conv.args[6] or len(conv.users) != 1:
        return False
    _, gamma, beta, mean, var = bn.args[:5]
    if not all(_is_f32(t) for t in (conv, x, w, mean, var)):
        return False
    if any(t is not None and not _is_f32(t) for t in (b, gamma, beta)):
        return False
    wv = _val(w)
    if not all(isinstance(d, int) for d in wv.shape) or wv.ndim < 3:
        return False
    cout = wv.shape[0]
    if any(t is not None and tuple(_val(t).shape) != (cout,) for t in (b, gamma, beta, mean, var)):
        return False
    for u in bn.users:   # only result 0 is used
        if u.target is not operator.getitem:
            return False
        if u.args[1] != 0 and u.users:
            return False
    if MAX_WEIGHT_PER_OUTPUT is not None:
        out = _static_numel(_val(conv))
        if out is not None and wv.numel() > MAX_WEIGHT_PER_OUTPUT * out:
            return False
    return True


def _node(graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
    """A new node with its fake value (``meta["val"]``), as the other nodes have."""
    n = graph.call_function(target, args)
    vals = [_val(a) if isinstance(a, torch.fx.Node) else a for a in args]
    fake = next((v.fake_mode for v in vals if hasattr(v, "fake_mode")), None)
    if fake is not None:
        with fake:
            n.meta["val"] = target(*vals)
    return n


def fold_conv_batch_norm(gm: torch.fx.GraphModule) -> int:
    """Folds every eligible convolution + eval-mode batch norm pair of the
    inference graph ``gm`` (in place); returns how many it folded."""
    graph = gm.graph
    folded = 0
    for bn in list(graph.nodes):
        if bn.op != "call_function" or \
                bn.target is not aten._native_batch_norm_legit_no_training.default:
            continue
        conv = bn.args[0]
        if not isinstance(conv, torch.fx.Node) or conv.op != "call_function" or \
                conv.target is not aten.convolution.default or not _foldable(conv, bn):
            continue
        x, w, b = conv.args[:3]
        _, gamma, beta, mean, var, _momentum, eps = bn.args[:7]
        wv = _val(w)
        with graph.inserting_before(conv):
            scale = _node(graph, aten.rsqrt.default, _node(graph, aten.add.Tensor, var, eps))
            if gamma is not None:
                scale = _node(graph, aten.mul.Tensor, scale, gamma)
            col = _node(graph, aten.view.default, scale, [wv.shape[0]] + [1] * (wv.ndim - 1))
            w2 = _node(graph, aten.mul.Tensor, w, col)
            centred = _node(graph, aten.sub.Tensor, b, mean) if b is not None else \
                _node(graph, aten.neg.default, mean)
            b2 = _node(graph, aten.mul.Tensor, centred, scale)
            if beta is not None:
                b2 = _node(graph, aten.add.Tensor, b2, beta)
            new = graph.call_function(aten.convolution.default, (x, w2, b2) + tuple(conv.args[3:]))
        new.meta = dict(conv.meta)
        for u in list(bn.users):
            if u.args[1] == 0:
                u.replace_all_uses_with(new)
            graph.erase_node(u)
        graph.erase_node(bn)
        graph.erase_node(conv)
        folded += 1
    if folded:
        graph.lint()
        gm.recompile()
    return folded
