"""group_norm on the nkipy device: half types keep float32 statistics, as on CPU.

PyTorch's composite group norm (the path every device without its own kernel
takes) normalised bfloat16 in bfloat16: twice the CPU's error against float32."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEV = "nkipy"


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, 8, 8, generator=g) * 3 + 1
    w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
    return x, w, b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_group_norm_as_accurate_as_cpu(dtype):
    x, w, b = _inputs(dtype)
    ref = F.group_norm(x, 8, w, b)
    args = [t.to(dtype) for t in (x, w, b)]
    cpu_err = (F.group_norm(*args[:1], 8, *args[1:]).float() - ref).abs().max()
    dev = F.group_norm(*(t.to(DEV) for t in args[:1]), 8, *(t.to(DEV) for t in args[1:]))
    assert dev.dtype == dtype and dev.device.type == DEV
    dev_err = (dev.cpu().float() - ref).abs().max()
    assert dev_err <= cpu_err * 1.01, (dev_err, cpu_err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_group_norm_outputs_match_cpu(dtype):
    x, w, b = (t.to(dtype) for t in _inputs(dtype))
    want = torch.ops.aten.native_group_norm(x, w, b, 4, 32, 64, 8, 1e-5)
    got = torch.ops.aten.native_group_norm(x.to(DEV), w.to(DEV), b.to(DEV), 4, 32, 64, 8, 1e-5)
    tol = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e, rtol=tol, atol=tol)


def test_group_norm_backward_matches_cpu():
    x, w, b = _inputs(torch.float32)
    grads = []
    for dev in ("cpu", DEV):
        leaves = [t.detach().clone().to(dev).requires_grad_() for t in (x, w, b)]
        F.group_norm(leaves[0], 8, leaves[1], leaves[2]).square().sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    for g, e in zip(grads[1], grads[0]):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
