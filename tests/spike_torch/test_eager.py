"""Eager compute on the device through nkipy kernels: correctness, caching,
scalars and type promotion, in-place ops, the CPU path for what kernels skip."""
from __future__ import annotations

import warnings

import pytest
import torch


@pytest.fixture
def eager():
    from spike_torch import _generic

    return _generic


def calls(eager):
    """(device kernel calls, CPU fallback calls) so far."""
    import spike_torch

    st = spike_torch.op_stats()
    return st["device_calls"], st["cpu_fallback_calls"]


def test_binary_broadcast_and_noncontiguous(eager):
    x, y = torch.randn(4, 5), torch.randn(5, 4)
    dx, dy = x.nkipy(), y.nkipy()
    d0, h0 = calls(eager)
    torch.testing.assert_close((dx + dy.t()).cpu(), x + y.t())
    torch.testing.assert_close((dx * dy[:, 0]).cpu(), x * y[:, 0])
    torch.testing.assert_close(torch.maximum(dx, dy.t()).cpu(), torch.maximum(x, y.t()))
    d1, h1 = calls(eager)
    assert d1 - d0 == 3 and h1 == h0


def test_kernels_are_cached(eager):
    a = torch.randn(7, 3).nkipy()
    a.exp()
    compiles = eager.stats["compiles"]
    for _ in range(5):
        a.exp()
    assert eager.stats["compiles"] == compiles
    torch.randn(8, 3).nkipy().exp()  # a new shape compiles once more
    assert eager.stats["compiles"] == compiles + 1


def test_scalars_and_promotion(eager):
    d = torch.arange(4.).nkipy()
    d0, h0 = calls(eager)
    assert (2.0 - d).cpu().tolist() == [2.0, 1.0, 0.0, -1.0]
    assert (d + 2).cpu().tolist() == [2.0, 3.0, 4.0, 5.0]
    assert (d * torch.tensor(3.0)).cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    assert (d / 2).dtype == torch.float32
    assert (d.half() * 0.5).dtype == torch.float16
    d1, h1 = calls(eager)
    assert d1 - d0 == 5 and h1 == h0


def test_alpha_and_inplace(eager):
    a = torch.ones(3).nkipy()
    b = torch.arange(3.).nkipy()
    torch.testing.assert_close(torch.add(a, b, alpha=2).cpu(), torch.tensor([1., 3., 5.]))
    torch.testing.assert_close(torch.sub(a, b, alpha=0.5).cpu(), torch.tensor([1., .5, 0.]))
    ptr = a.data_ptr()
    a.add_(b).mul_(2).sub_(1).div_(torch.tensor([1., 2., 4.]).nkipy())
    assert a.data_ptr() == ptr
    torch.testing.assert_close(a.cpu(), torch.tensor([1., 1.5, 1.25]))


def test_reductions_matmul_softmax_layer_norm(eager):
    x = torch.randn(3, 4, 5)
    d = x.nkipy()
    d0, _ = calls(eager)
    torch.testing.assert_close(d.sum().cpu(), x.sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d.sum((0, 2), keepdim=True).cpu(), x.sum((0, 2), keepdim=True),
                               rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d.mean(-1).cpu(), x.mean(-1))
    torch.testing.assert_close(d.amax(1).cpu(), x.amax(1))
    torch.testing.assert_close((d[0] @ d[1].t()).cpu(), x[0] @ x[1].t())
    torch.testing.assert_close(torch.bmm(d, d.transpose(1, 2)).cpu(),
                               torch.bmm(x, x.transpose(1, 2)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d.softmax(1).cpu(), x.softmax(1))
    ln = torch.nn.LayerNorm(5)
    torch.testing.assert_close(ln.nkipy()(d).cpu(), ln.cpu()(x), rtol=1e-5, atol=1e-5)
    assert calls(eager)[0] - d0 == 8


def test_generic_path_for_other_dtypes(eager):
    """Calls the hand-written kernels skip (int64, mixed dtypes) get a kernel of
    the generic path: exact, on the device, no CPU fallback."""
    i = torch.arange(4).nkipy()
    d0, h0 = calls(eager)
    assert (i * 3).cpu().tolist() == [0, 3, 6, 9]
    assert (i + i).dtype == torch.int64
    assert (i * 0.5).cpu().tolist() == [0.0, 0.5, 1.0, 1.5]
    m = torch.randn(2, 3).nkipy() + torch.randn(2, 3, dtype=torch.float64).nkipy()
    assert m.dtype == torch.float64 and m.device.type == "nkipy"
    d1, h1 = calls(eager)
    assert d1 - d0 >= 4 and h1 == h0


def test_host_path_warns_once(eager):
    """An argument set nothing on the device serves (complex) runs on the CPU,
    with one warning per operator."""
    from spike_torch import _generic

    _generic.clear_fallback_warnings()
    c = torch.ones(3, dtype=torch.complex64).nkipy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = c * 2
        c * 3
    msgs = [str(w.message) for w in caught if "nkipy: operator" in str(w.message)]
    assert len(msgs) == 1 and "aten::mul.Tensor" in msgs[0], msgs
    assert r.device.type == "nkipy" and torch.equal(r.cpu(), torch.full((3,), 2 + 0j))


def test_autograd_through_device_kernels(eager):
    x = torch.randn(4, 3)
    w = torch.randn(3, 2)
    dx = x.nkipy().requires_grad_()
    dw = w.nkipy().requires_grad_()
    (dx @ dw).tanh().sigmoid().sum().backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (xc @ wc).tanh().sigmoid().sum().backward()
    torch.testing.assert_close(dx.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)


def test_cross_device_error(eager):
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="nkipy:0").mul(torch.ones(2, device="nkipy:1"))


def test_second_core(eager):
    x = torch.randn(3, 3)
    d = x.to("nkipy:1")
    r = (d * d).exp()
    assert r.device == torch.device("nkipy:1")
    torch.testing.assert_close(r.cpu(), (x * x).exp())


def test_op_stats_counts_device_kernels_and_cpu_fallbacks(eager):
    """spike_torch.op_stats() moves by one device call for a native kernel and by
    one fallback call for an op that runs on the CPU."""
    import spike_torch

    x = torch.randn(8).nkipy()
    torch.exp(x)   # compiled once before counting
    before = spike_torch.op_stats()
    torch.exp(x)
    mid = spike_torch.op_stats()
    assert mid["device_calls"] == before["device_calls"] + 1
    assert mid["cpu_fallback_calls"] == before["cpu_fallback_calls"]
    torch.unique(x)    # an output shape that depends on the data: the CPU
    after = spike_torch.op_stats()
    assert after["cpu_fallback_calls"] == mid["cpu_fallback_calls"] + 1
    assert set(after) == {"device_calls", "fast_calls", "cpu_fallback_calls", "compiles"}
