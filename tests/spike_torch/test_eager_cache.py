"""The C++ call cache of eager ops (spike_torch/csrc/eager.cpp): a call whose
kernel is loaded runs without Python, and gives what the Python road gives."""
from __future__ import annotations

import pytest
import torch

import spike_torch
from spike_torch import _C, _generic


def fast() -> int:
    return spike_torch.op_stats()["fast_calls"]


def twice(fn):
    """fn() through Python (which files the kernel), then from the C++ cache."""
    first = fn()
    before = fast()
    second = fn()
    assert fast() > before, "the second call did not run from the C++ cache"
    return first, second


def test_second_call_stays_in_cpp_and_equals_eager():
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    dx, dy = x.nkipy(), y.nkipy()
    for fn, want in [(lambda: dx + dy, x + y), (lambda: dx * 2.5, x * 2.5),
                     (lambda: torch.where(dx > 0, dx, dy), torch.where(x > 0, x, y)),
                     (lambda: dx.sum(-1), x.sum(-1)), (lambda: dx.softmax(-1), x.softmax(-1)),
                     (lambda: torch.cat([dx, dy]), torch.cat([x, y])),
                     (lambda: dx.argmax(), x.argmax())]:
        first, second = twice(fn)
        torch.testing.assert_close(first.cpu(), want)
        torch.testing.assert_close(second.cpu(), want)


def test_scalars_are_part_of_the_key():
    x = torch.arange(4.0)
    d = x.nkipy()
    twice(lambda: d * 2.0)
    assert (d * 3.0).cpu().tolist() == (x * 3.0).tolist()
    assert (d * 2.0).cpu().tolist() == (x * 2.0).tolist()
    assert (d * -0.0).cpu().tolist() == (x * -0.0).tolist()
    assert (d + 1).dtype == torch.float32 and (d + 1).cpu().tolist() == (x + 1).tolist()


def test_inplace_returns_self_and_writes_it():
    x, y = torch.randn(6), torch.randn(6)
    d, dy = x.nkipy(), y.nkipy()
    d.add_(dy, alpha=2.0)
    before = fast()
    r = d.add_(dy, alpha=2.0)
    assert fast() == before + 1
    assert r is d
    torch.testing.assert_close(d.cpu(), x + 4.0 * y)


def test_out_tensor_written_directly_and_through_a_copy():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    dx, dy = x.nkipy(), y.nkipy()
    out = torch.empty(3, 4).nkipy()
    torch.mul(dx, dy, out=out)
    before = fast()
    r = torch.mul(dx, dx, out=out)
    assert fast() == before + 1 and r is out
    torch.testing.assert_close(out.cpu(), x * x)
    # out aliasing an input: a fresh result copied into it
    torch.mul(dx, dy, out=dx)
    torch.testing.assert_close(dx.cpu(), x * y)


def test_non_contiguous_inputs():
    x = torch.randn(5, 7)
    d = x.nkipy()
    first, second = twice(lambda: d.t().exp())
    torch.testing.assert_close(second.cpu(), x.t().exp())
    torch.testing.assert_close(twice(lambda: d[:, ::2] + 1)[1].cpu(), x[:, ::2] + 1)


def test_new_shapes_dtypes_and_cores_miss():
    a = torch.randn(3).nkipy()
    twice(lambda: a.exp())
    for t in (torch.randn(4).nkipy(), torch.randn(3, dtype=torch.float64).nkipy(),
              torch.randn(3).to("nkipy:1")):
        r = t.exp()
        assert r.device == t.device and r.dtype == t.dtype
        torch.testing.assert_close(r.cpu(), t.cpu().exp())


def test_cpu_tensor_arguments_take_the_python_road():
    d = torch.randn(3).nkipy()
    c = torch.tensor(2.0)            # a 0-dim CPU tensor (not a wrapped number)
    d * c
    before = fast()
    r = d * c
    assert fast() == before
    torch.testing.assert_close(r.cpu(), d.cpu() * 2.0)


def test_clear_cache_forgets_cpp_entries():
    d = torch.randn(3).nkipy()
    twice(lambda: d.cos())
    assert _C.eager_cache.eager_stats()["cached_calls"] > 0
    _generic.clear_cache()
    assert _C.eager_cache.eager_stats()["cached_calls"] == 0
    before = fast()
    torch.testing.assert_close(d.cos().cpu(), d.cpu().cos())
    assert fast() == before


def test_kernel_errors_from_the_cache_reach_the_caller():
    x = torch.randn(5, 3).nkipy()
    ok = torch.tensor([0, 4]).nkipy()
    bad = torch.tensor([0, 9]).nkipy()
    twice(lambda: torch.index_select(x, 0, ok))
    with pytest.raises(Exception, match="index"):
        torch.index_select(x, 0, bad)
    torch.testing.assert_close(torch.index_select(x, 0, ok).cpu(), x.cpu()[[0, 4]])


def test_register_checks_its_arguments():
    reg = _C.eager_cache.eager_register
    d = torch.randn(2).nkipy()
    # outside a fallback call nothing is filed
    assert reg("aten::exp", [d], None, 0, [0], [([2], torch.float32)], 1, [], [("output", 0)],
               [], 0, [False], [], [], False) is False
    with pytest.raises(TypeError):
        reg("aten::exp", [d])


def test_served_ops_run_one_kernel():
    """Ops PyTorch has composite kernels for (listed in _generic.SERVED_OPS)
    reach the fallback themselves: one device call each."""
    x = torch.randn(4, 8)
    d = x.nkipy()
    ln = torch.nn.functional.layer_norm
    for fn, want in [(lambda: ln(d, (8,)), ln(x, (8,))), (lambda: d * d, x * x)]:
        fn()
        before = spike_torch.op_stats()["device_calls"]
        torch.testing.assert_close(fn().cpu(), want, rtol=1e-5, atol=1e-5)
        assert spike_torch.op_stats()["device_calls"] == before + 1
    assert "native_layer_norm" in _generic.SERVED_OPS


def test_runtime_reset_reloads(tmp_path):
    d = torch.randn(3)
    dev = d.nkipy()
    twice(lambda: dev.sin())
    spike_torch.reset()
    dev = d.nkipy()
    torch.testing.assert_close(dev.sin().cpu(), d.sin())
    torch.testing.assert_close(dev.sin().cpu(), d.sin())


def test_a_return_the_kernel_does_not_compute_is_an_undefined_tensor():
    """native_batch_norm_backward without a weight returns no weight gradient:
    from the C++ cache too (the second call) an undefined tensor, which autograd
    takes, not None (which it refused: 'Expected Tensor but got None')."""
    torch.manual_seed(3)
    x = torch.randn(2, 4, 3, 3)
    want = None
    for _ in range(3):
        xc = x.clone().requires_grad_()
        torch.nn.functional.batch_norm(xc, torch.zeros(4), torch.ones(4), training=True).sum().backward()
        want = xc.grad
        xd = x.nkipy().requires_grad_()
        y = torch.nn.functional.batch_norm(xd, torch.zeros(4, device="nkipy"),
                                           torch.ones(4, device="nkipy"), training=True)
        y.sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), want, rtol=1e-5, atol=1e-5)
