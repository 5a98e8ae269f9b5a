"""torch.compile with no backend= on spyre tensors (the device compiler, one
kernel per graph), bit for bit the eager result; CPU graphs still go to
inductor; the "sendnn" emulation backend."""
from __future__ import annotations

import pytest
import torch

F = torch.nn.functional
_g = torch.Generator().manual_seed(1)


def _softmax0(t):
    return torch.softmax(t, dim=0)


def _chain(a, b):
    return F.gelu(a * b + 1).sum(-1)


def _block(x, w, b):
    h = F.layer_norm(x, (x.shape[-1],))
    return F.silu(h @ w + b).softmax(-1)


@pytest.mark.parametrize("fn,shapes", [
    (_softmax0, [(512, 1024)]),
    (_chain, [(128, 64), (128, 64)]),
    (_block, [(16, 96), (96, 40), (40,)]),
])
def test_compiled_equals_eager_bit_for_bit(fn, shapes):
    host = [torch.randn(s, generator=_g).half() for s in shapes]
    dev = [h.to("spyre") for h in host]
    eager = fn(*dev)
    compiled = torch.compile(fn)(*dev)
    assert compiled.device.type == "spyre"
    assert torch.equal(compiled.cpu(), eager.cpu())
    torch.testing.assert_close(compiled.cpu().float(), fn(*[h.float() for h in host]),
                               rtol=2e-2, atol=2e-2)


def test_compiled_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 8)).half()
    x = torch.randn(4, 32).half()
    want = model(x)
    model.to("spyre")
    with torch.no_grad():
        got = torch.compile(model)(x.to("spyre"))
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=2e-3, atol=2e-3)


def test_cpu_graphs_still_use_inductor():
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("inductor")
    x = torch.randn(16, 16, generator=_g)
    out = torch.compile(lambda t: t.sin() + 1, backend=counter)(x)
    assert counter.frame_count == 1
    torch.testing.assert_close(out, x.sin() + 1)
    # the default backend on CPU tensors: inductor's own result
    torch.testing.assert_close(torch.compile(lambda t: t.cos() * 2)(x), x.cos() * 2)


def test_sendnn_backend_emulates_the_device():
    x = torch.randn(64, 70, generator=_g).half()
    fn = lambda t: F.softplus(t, beta=1, threshold=20) * 2   # noqa: E731
    got = torch.compile(fn, backend="sendnn")(x)
    assert got.device.type == "cpu"
    assert torch.equal(got, torch.compile(fn)(x.to("spyre")).cpu())
    torch.testing.assert_close(got, fn(x), rtol=2e-3, atol=2e-3)


def test_a_graph_is_one_kernel():
    from spike_torch import _generic

    x = torch.randn(512, 64, generator=_g).half().to("spyre")
    f = torch.compile(lambda t: torch.softmax(t, 0) * 2 + 1)
    f(x)
    before = _generic.stats["device_calls"]
    fast = _generic._C.eager_cache.eager_stats()["fast_calls"]
    f(x)
    assert _generic.stats["device_calls"] == before + 1
    assert _generic._C.eager_cache.eager_stats()["fast_calls"] == fast


def test_views_and_writes_keep_their_meaning():
    """A compiled graph returning a view of its input, or writing its input,
    behaves as eager (it runs op by op: one kernel returns fresh tensors)."""
    host = torch.randn(4, 70, generator=_g).half()
    x = host.to("spyre")
    v, w = torch.compile(lambda t: (t.t(), t + 1))(x)
    torch.testing.assert_close(w.cpu(), host + 1)
    v.mul_(0)
    assert torch.count_nonzero(x.cpu()) == 0
    y = host.to("spyre")
    r = torch.compile(lambda t: t.add_(1))(y)
    assert torch.equal(y.cpu(), host + 1) and torch.equal(r.cpu(), host + 1)


def test_graph_ending_on_the_cpu():
    x = torch.randn(4, 70, generator=_g).to("spyre")
    out = torch.compile(lambda t: (t * 2).cpu())(x)
    assert out.device.type == "cpu"
    assert torch.equal(out, x.cpu() * 2)


def test_in_place_half_results_are_rounded_as_eager():
    a, b, c = (torch.randn(64, 64, generator=_g).half().to("spyre") for _ in range(3))
    fn = lambda a, b, c: (a * b).add_(c) * 3   # noqa: E731
    assert torch.equal(torch.compile(fn)(a, b, c).cpu(), fn(a, b, c).cpu())
    f32 = lambda a, b, c: a * b + c   # noqa: E731
    a, b, c = (t.float() for t in (a, b, c))
    assert torch.equal(torch.compile(f32)(a, b, c).cpu(), f32(a, b, c).cpu())
