"""The generic eager path (spike_torch/_generic.py): ops without a hand-written
kernel run as kernels generated from the ATen op registry, on the device; what
cannot be lowered runs on the CPU, warned once and counted."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F


def stats():
    import spike_torch

    return spike_torch.op_stats()


def on_device(fn, *args, rtol=None, atol=None, **kwargs):
    """Runs ``fn`` on nkipy copies of ``args``: a device kernel ran, the CPU
    fallback did not, and the result equals ``fn`` on the CPU tensors."""
    dargs = [a.nkipy() if isinstance(a, torch.Tensor) else a for a in args]
    before = stats()
    got = fn(*dargs, **kwargs)
    after = stats()
    assert after["device_calls"] > before["device_calls"]
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"]
    want = fn(*args, **kwargs)
    for g, w in zip(got if isinstance(got, (tuple, list)) else [got],
                    want if isinstance(want, (tuple, list)) else [want]):
        assert g.device.type == "nkipy" and g.dtype == w.dtype and g.shape == w.shape
        if w.dtype in (torch.int64, torch.int32, torch.bool):
            assert torch.equal(g.cpu(), w)       # exact
        elif w.dtype == torch.float64:           # computed in double: within a few ulp
            torch.testing.assert_close(g.cpu(), w, rtol=1e-13, atol=0)
        else:
            torch.testing.assert_close(g.cpu(), w, rtol=rtol, atol=atol, equal_nan=True)
    return got


def test_unary_and_binary_with_broadcasting_and_scalars():
    x, y = torch.randn(4, 5), torch.randn(5)
    on_device(torch.erf, x)
    on_device(torch.atan2, x, y)                       # broadcast
    on_device(lambda a: torch.clamp(a, -0.5, 0.25), x)  # Python scalars
    on_device(lambda a: torch.fmod(a, 0.75), x)
    on_device(lambda a: torch.pow(a.abs(), 1.5), x)
    # a 0-dim CPU tensor beside a device tensor (moved to the device per call)
    on_device(lambda a: torch.atan2(a, torch.tensor(2.0)), x)


def test_reductions_with_dims_and_keepdim():
    x = torch.randn(3, 4, 5)
    on_device(lambda a: a.std(1, keepdim=True), x)
    on_device(lambda a: a.var((0, 2), correction=0), x)
    on_device(lambda a: a.prod(-1), x)
    on_device(lambda a: a.max(1), x)          # values and int64 indices
    on_device(lambda a: torch.logsumexp(a, 2, keepdim=True), x)


def test_in_place_and_out():
    x = torch.randn(3, 4)
    d = x.nkipy()
    ptr = d.data_ptr()
    before = stats()
    d.erf_()
    d.clamp_(max=0.5)
    assert d.data_ptr() == ptr
    torch.testing.assert_close(d.cpu(), x.erf().clamp(max=0.5))
    # in place on a non-contiguous view writes through to its base
    base = torch.randn(4, 6)
    dbase = base.nkipy()
    dbase[:, ::2].erf_()
    base[:, ::2].erf_()
    torch.testing.assert_close(dbase.cpu(), base)
    # out=: an empty out tensor is resized quietly, a wrong-sized one with PyTorch's warning
    out = torch.empty(0, device="nkipy")
    r = torch.erf(x.nkipy(), out=out)
    assert r is out and out.shape == (3, 4)
    torch.testing.assert_close(out.cpu(), x.erf())
    out2 = torch.empty(2, 2, device="nkipy")
    with pytest.warns(UserWarning, match="was resized since it had shape"):
        torch.erf(x.nkipy(), out=out2)
    torch.testing.assert_close(out2.cpu(), x.erf())
    after = stats()
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"]
    assert after["device_calls"] >= before["device_calls"] + 5


def test_tensor_list_ops():
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    on_device(lambda x, y: torch.cat([x, y * 2], 1), a, b)
    on_device(lambda x, y: torch.stack([x, y]), a, b)


def test_integer_and_float64_are_exact():
    i = torch.randint(-1000, 1000, (4, 5), dtype=torch.int64) * 1_000_000_007
    on_device(lambda t: torch.remainder(t, 97), i)
    on_device(lambda t: torch.floor_divide(t, 13), i)
    on_device(lambda t: t.sum(1), i)
    f = torch.randn(4, 5, dtype=torch.float64)
    # 1e-300 and 1e-13 relative: neither fits float32, nothing was narrowed
    got = on_device(lambda t: torch.erf(t) * 1e-300, f)
    assert got.dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_within_opinfo_tolerance(dtype):
    x = torch.randn(4, 8).to(dtype)
    tol = {torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}
    on_device(torch.erf, x, **tol[dtype])
    on_device(lambda t: torch.clamp(t, -0.5, 0.5), x, **tol[dtype])


def test_kernels_are_cached():
    d = torch.randn(5, 3).nkipy()
    torch.sinh(d)
    before = stats()
    for _ in range(3):
        torch.sinh(d)
    after = stats()
    assert after["compiles"] == before["compiles"]
    assert after["device_calls"] == before["device_calls"] + 3


def test_scalar_variants_are_capped(monkeypatch):
    """Kernels bake scalar arguments in: past MAX_SCALAR_VARIANTS values per op and
    tensor signature, new values run on the CPU instead of compiling again."""
    from spike_torch import _generic

    monkeypatch.setattr(_generic, "MAX_SCALAR_VARIANTS", 2)
    x = torch.randn(7, 2)
    d = x.nkipy()
    for v in (0.1, 0.2):
        torch.testing.assert_close(torch.fmod(d, v).cpu(), torch.fmod(x, v))
    before = stats()
    torch.testing.assert_close(torch.fmod(d, 0.3).cpu(), torch.fmod(x, 0.3))
    after = stats()
    assert after["compiles"] == before["compiles"]
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"] + 1
    before = stats()
    torch.fmod(d, 0.1)             # a value compiled before still runs on the device
    assert stats()["device_calls"] == before["device_calls"] + 1


def test_convolution_forward_and_backward_match_cpu():
    for dims, conv in ((1, F.conv1d), (2, F.conv2d)):
        x = torch.randn(2, 3, *([7] * dims), requires_grad=True)
        w = torch.randn(4, 3, *([3] * dims), requires_grad=True)
        b = torch.randn(4, requires_grad=True)
        dx, dw, db = (t.detach().nkipy().requires_grad_() for t in (x, w, b))
        before = stats()
        y = conv(dx, dw, db, stride=2, padding=1)
        assert stats()["device_calls"] == before["device_calls"] + 1   # the forward kernel
        assert stats()["cpu_fallback_calls"] == before["cpu_fallback_calls"]
        ref = conv(x, w, b, stride=2, padding=1)
        torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-5)
        g = torch.randn_like(ref)
        y.backward(g.nkipy())
        ref.backward(g)
        for d, c in ((dx, x), (dw, w), (db, b)):
            torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)


def test_convolutions_that_do_not_lower_run_on_the_cpu():
    """conv3d and transposed convolutions: correct results, wherever they run."""
    x, w = torch.randn(1, 2, 4, 4, 4), torch.randn(3, 2, 2, 2, 2)
    torch.testing.assert_close(F.conv3d(x.nkipy(), w.nkipy()).cpu(), F.conv3d(x, w),
                               rtol=1e-5, atol=1e-5)
    x, w = torch.randn(1, 3, 4, 4), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(F.conv_transpose2d(x.nkipy(), w.nkipy(), stride=2).cpu(),
                               F.conv_transpose2d(x, w, stride=2), rtol=1e-5, atol=1e-5)


def test_cpu_path_for_an_op_that_cannot_lower():
    """Complex tensors never lower: the CPU computes the op, with one warning,
    every call counted; in place and out= write into the device tensors."""
    from spike_torch import _generic

    _generic.clear_fallback_warnings()
    x = torch.randn(6, dtype=torch.complex64)
    d = x.nkipy()
    before = stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r1 = torch.sinh(d)
        r2 = torch.sinh(d)
    msgs = [str(w.message) for w in caught if "nkipy: operator" in str(w.message)]
    assert len(msgs) == 1 and "sinh" in msgs[0] and "runs on the CPU" in msgs[0], msgs
    assert stats()["cpu_fallback_calls"] == before["cpu_fallback_calls"] + 2
    assert stats()["device_calls"] == before["device_calls"]
    assert r1.device.type == "nkipy"
    assert torch.equal(r1.cpu(), torch.sinh(x)) and torch.equal(r2.cpu(), torch.sinh(x))
    d2 = d.clone()
    d2.sinh_()
    assert torch.equal(d2.cpu(), torch.sinh(x))
    out = torch.empty(0, dtype=torch.complex64, device="nkipy")
    assert torch.sinh(d, out=out) is out and torch.equal(out.cpu(), torch.sinh(x))


def test_view_returning_op_is_refused():
    d = torch.randn(3, 3).nkipy()
    with pytest.raises(RuntimeError, match="returns a view of its input, which the CPU fallback "
                                           "can only return as a copy"):
        torch.ops.aten._indices(d)


def test_data_dependent_shapes_and_random_ops_run_on_the_cpu():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    d = x.nkipy()
    before = stats()
    assert torch.equal(torch.unique(d).cpu(), torch.unique(x))
    assert stats()["cpu_fallback_calls"] == before["cpu_fallback_calls"] + 1
    torch.nkipy.manual_seed(3)
    a = torch.bernoulli(torch.full((64,), 0.5, device="nkipy"))
    torch.nkipy.manual_seed(3)
    b = torch.bernoulli(torch.full((64,), 0.5, device="nkipy"))
    assert torch.equal(a.cpu(), b.cpu())     # the device generator's state, not a baked draw


def test_tensors_on_two_cores_run_on_the_cpu():
    a = torch.randn(3)
    r = torch.atan2(a.to("nkipy:1"), a.to("nkipy:1"))
    assert r.device == torch.device("nkipy:1")
    torch.testing.assert_close(r.cpu(), torch.atan2(a, a))


def test_wrapped_scalar_keeps_its_promotion():
    """``fmod(int_tensor, 0.5)`` passes 0.5 as a wrapped number (a Python float in
    the fallback): the result is float32 as on the CPU, not float64."""
    i = torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4)
    got = on_device(lambda t: torch.fmod(t, 0.5), i)
    assert got.dtype == torch.float32
    on_device(lambda t: torch.remainder(t, 2.5), torch.randn(3, 4).half(), rtol=1e-3, atol=1e-3)


def test_kernels_reload_after_reset():
    """Loaded kernels belong to a runtime: after spike_torch.reset() a cached
    signature loads its kernel into the new runtime and still computes right."""
    from spike_torch_helpers import run_python

    r = run_python(
        "import warnings, torch, spike_torch\n"
        "warnings.simplefilter('ignore')\n"
        "x = torch.linspace(-2, 2, 9)\n"
        "old = x.nkipy()\n"
        "a = torch.erf(old).cpu()\n"
        "spike_torch.reset()\n"
        "b = torch.erf(x.nkipy()).cpu()\n"
        "s = spike_torch.op_stats()\n"
        "print('OK', torch.allclose(a, x.erf()), torch.allclose(b, x.erf()),\n"
        "      s['device_calls'] >= 2, s['cpu_fallback_calls'])\n"
        "try:\n"
        "    torch.erf(old)\n"
        "except RuntimeError as e:\n"
        "    print('STALE', 'NRT_CLOSED' in str(e), str(e)[:40])\n")
    assert r.returncode == 0, r.stderr
    assert "OK True True True 0" in r.stdout, r.stdout + r.stderr
    # a tensor of the closed runtime is refused, not read
    assert "STALE True nkipy aten::erf.out: NRT_CLOSED" in r.stdout, r.stdout + r.stderr


def test_kernel_that_does_not_compile_runs_on_the_cpu_with_a_warning(monkeypatch, caplog):
    """A compile failure is not hidden: logged as a warning (once per op), the
    CPU computes the result."""
    import logging

    from nkipy.compiler.build import CompileError
    from nkipy.runtime import DeviceKernel

    from spike_torch import _generic

    def broken(cls, *args, **kwargs):
        raise CompileError("the C compiler said no")

    monkeypatch.setattr(DeviceKernel, "from_graph", classmethod(broken))
    monkeypatch.setattr(_generic, "_compile_failed", set())
    x = torch.randn(3, 11)
    before = stats()
    with caplog.at_level(logging.WARNING, logger="spike_torch"):
        r = torch.cosh(x.nkipy())
    torch.testing.assert_close(r.cpu(), torch.cosh(x))
    assert stats()["cpu_fallback_calls"] == before["cpu_fallback_calls"] + 1
    assert any("eager aten::cosh" in m and "on the CPU: CompileError: the C compiler said no" in m
               for m in caplog.messages), caplog.messages


def test_batch_norm_training_updates_running_statistics():
    """native_batch_norm writes running_mean/running_var without its schema saying
    so; whichever path runs it, the device's running statistics follow the CPU's."""
    import spike_torch

    torch.manual_seed(0)
    bn, bnd = torch.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3).to("nkipy")
    x = torch.randn(4, 3, 5, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            y, yd = bn(x), bnd(x.to("nkipy"))
    torch.testing.assert_close(yd.cpu(), y)
    torch.testing.assert_close(bnd.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(bnd.running_var.cpu(), bn.running_var)
    assert not torch.equal(bnd.running_var.cpu(), torch.ones(3))
    before = spike_torch.op_stats()["cpu_fallback_calls"]
    for _ in range(2):
        y, yd = bn(x), bnd(x.to("nkipy"))
    plain, plaind = (torch.nn.BatchNorm2d(3, track_running_stats=False) for _ in range(2))
    plaind.to("nkipy")
    torch.testing.assert_close(plaind(x.to("nkipy")).cpu(), plain(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bnd.running_var.cpu(), bn.running_var)
    bn.eval(), bnd.eval()   # the running statistics, not the batch's (zero-size saved stats)
    torch.testing.assert_close(bnd(x.to("nkipy")).cpu(), bn(x), rtol=1e-5, atol=1e-5)
    assert spike_torch.op_stats()["cpu_fallback_calls"] == before   # all on the device


def test_zero_size_tensors_run_on_the_device():
    """A zero-size input or output (an empty KV cache concatenated with new keys,
    a reduction over an empty dimension) is a device kernel too."""
    import spike_torch

    a, b, e = torch.randn(2, 0, 8), torch.randn(2, 3, 8), torch.empty(0, 4)
    before = spike_torch.op_stats()
    assert torch.equal(torch.cat([a.nkipy(), b.nkipy()], dim=1).cpu(), torch.cat([a, b], 1))
    assert torch.equal(e.nkipy().sum(0).cpu(), torch.zeros(4))
    assert (e.nkipy() + 1).shape == (0, 4)
    after = spike_torch.op_stats()
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"]
    assert after["device_calls"] == before["device_calls"] + 3


def test_backend_helpers_run_as_the_ops_they_implement():
    """cummax, logcumsumexp, index_put_ and cholesky_solve reach the device as the
    per-backend helpers their CPU kernels call (_cummax_helper writes arguments
    its schema marks, returning nothing): each is a device kernel."""
    x = torch.randn(4, 5)
    on_device(lambda a: torch.cummax(a, 1), x)
    on_device(lambda a: torch.cummin(a, 0), x)
    on_device(lambda a: torch.logcumsumexp(a, 1), x, rtol=1e-5, atol=1e-5)
    idx = torch.tensor([0, 2])
    on_device(lambda a, v: a.index_put((idx.to(a.device),), v, accumulate=True), x,
              torch.randn(2, 5))
    m = torch.randn(3, 3)
    a = m @ m.T + 3 * torch.eye(3)
    low = torch.linalg.cholesky(a)
    on_device(lambda b, l: torch.cholesky_solve(b, l), torch.randn(3, 2), low,
              rtol=1e-4, atol=1e-4)


def test_cpu_index_tensors_are_copied_to_the_device():
    """index_put with indices on the CPU (as CUDA accepts) is a device kernel."""
    x, v = torch.randn(5, 4), torch.randn(2, 4)
    idx = torch.tensor([4, 1])
    on_device(lambda a, b: a.index_put((idx,), b), x, v)


def test_ops_decomposed_beyond_core_aten():
    """upsample_bilinear2d with an output size (the backend form F.interpolate
    calls) has no registry entry; PyTorch's decomposition of it lowers."""
    x = torch.randn(2, 3, 4, 4)
    on_device(lambda a: F.interpolate(a, size=(6, 5), mode="bilinear", align_corners=False), x)
    on_device(lambda a: F.interpolate(a, scale_factor=2, mode="bicubic", align_corners=True), x,
              rtol=1e-5, atol=1e-5)


def test_zero_size_out_tensors_restrided():
    """An out= tensor PyTorch restrides (as_strided_) to a zero-size result's
    layout, and eye(0): device kernels, not the CPU path."""
    on_device(torch.logical_not, torch.randn(1, 0, 3))
    before = stats()
    assert torch.eye(0, device="nkipy").shape == (0, 0)
    assert stats()["cpu_fallback_calls"] == before["cpu_fallback_calls"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_batch_norm_rounds_statistics_as_the_cpu(dtype):
    """Half-precision batch norm in training normalises with the batch
    statistics rounded to the parameters' dtype, as PyTorch's CPU kernel does
    (unrounded statistics differ where the output cancels)."""
    torch.manual_seed(0)
    x = (torch.randn(5, 5, 5) * 5 + 3).to(dtype)
    w, b = torch.randn(5).to(dtype), torch.randn(5).to(dtype)
    rm, rv = torch.randn(5).to(dtype), torch.rand(5).to(dtype)
    want = torch.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.5, 0.6)
    got = torch.native_batch_norm(*(t.nkipy() for t in (x, w, b, rm, rv)), True, 0.5, 0.6)
    rtol, atol = (1e-3, 1e-3) if dtype == torch.float16 else (1.6e-2, 1e-2)
    for g, e in zip(got, want):
        torch.testing.assert_close(g.cpu(), e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_addmm_and_addbmm_round_once_per_product_as_the_cpu(dtype):
    """addmm in half precision is computed in float32 and rounded once (the
    hand-written kernel and the registry's entry); addbmm rounds after each
    batch's addmm, as PyTorch's CPU kernel: both equal the CPU bit for bit."""
    torch.manual_seed(0)
    s = (torch.randn(5, 5) * 3).to(dtype)
    b1, b2 = (torch.randn(4, 5, 6) * 3).to(dtype), (torch.randn(4, 6, 5) * 3).to(dtype)
    for fn in (lambda a, x, y: torch.addmm(a, x[0], y[0], beta=0.2, alpha=0.6),
               lambda a, x, y: torch.addbmm(a, x, y, beta=0.2, alpha=0.6)):
        got = on_device(fn, s, b1, b2)
        assert torch.equal(got.cpu(), fn(s, b1, b2))


def test_equal_runs_as_device_kernels():
    """torch.equal returns a Python bool: eq and all run on the device."""
    x = torch.randn(3, 4)
    d = x.nkipy()
    before = stats()
    assert torch.equal(d, x.clone().nkipy())
    assert not torch.equal(d, (x + 1).nkipy())
    assert not torch.equal(d, d.reshape(4, 3))                  # shapes differ
    assert torch.equal(torch.ones(0).nkipy(), torch.ones(0).nkipy())
    assert torch.equal(torch.tensor([1]).nkipy(), torch.tensor([1.0]).nkipy())   # promoted
    assert not torch.equal(torch.tensor([float("nan")]).nkipy(),
                           torch.tensor([float("nan")]).nkipy())
    after = stats()
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"]
    assert after["device_calls"] > before["device_calls"]


def test_data_dependent_nonzero_and_masked_select_on_the_device():
    """nonzero, nonzero_static, argwhere and masked_select (output length
    depends on the values): the count is read back, then device kernels of that
    length compute the result, equal to the CPU's."""
    torch.manual_seed(0)
    x = torch.randn(3, 4) * (torch.randn(3, 4) > 0)
    m = torch.randn(3, 4) > 0
    before = stats()
    for t in (x, torch.tensor(0.0), torch.tensor(2.0), torch.zeros(2, 0), torch.ones(2, 3),
              torch.tensor([float("nan"), 0.0, 1.0])):
        assert torch.equal(torch.nonzero(t.nkipy()).cpu(), torch.nonzero(t))
        assert torch.equal(torch.argwhere(t.nkipy()).cpu(), torch.argwhere(t))
        assert torch.equal(torch.nonzero_static(t.nkipy(), size=4, fill_value=-2).cpu(),
                           torch.nonzero_static(t, size=4, fill_value=-2))
    assert torch.equal(torch.masked_select(x.nkipy(), m.nkipy()).cpu(), torch.masked_select(x, m))
    col, row = torch.randn(4, 1), torch.randn(1, 3) > 0          # broadcast
    assert torch.equal(torch.masked_select(col.nkipy(), row.nkipy()).cpu(),
                       torch.masked_select(col, row))
    after = stats()
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64])
def test_cross_rounds_half_products_like_the_cpu(dtype):
    """linalg.cross of half operands rounds each product to the dtype before the
    difference, as the CPU kernel does: equal to the CPU bit for bit, also where
    the products cancel (integers scaled so that they do not fit the mantissa)."""
    torch.manual_seed(0)
    a = (torch.randn(6, 3, 5) * 40).to(dtype)
    b = (torch.randn(6, 3, 5) * 40).to(dtype)
    b[:, :, 0] = a[:, :, 0] * 3                   # parallel: products cancel
    got = on_device(lambda x, y: torch.linalg.cross(x, y, dim=1), a, b, rtol=0, atol=0)
    on_device(lambda x, y: torch.cross(x, y, dim=-2), a, b[:1], rtol=0, atol=0)  # broadcast
    assert torch.equal(got.cpu(), torch.linalg.cross(a, b, dim=1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("p", [4, 2, 1, 3.5])
def test_half_norms_accumulate_in_float32(dtype, p):
    """Vector norms (and dist) of half tensors accumulate in float32 and round
    once, as the CPU does: sums of powers past float16's range (5 ** 4 * 125)
    do not overflow to inf, and the result equals the CPU's."""
    torch.manual_seed(0)
    x = (torch.randn(5, 5, 5) * 8).to(dtype)
    y = torch.full((5, 5, 5), 5.0, dtype=dtype)
    on_device(lambda a, b: torch.dist(a, b, p), x, torch.zeros_like(x), rtol=0, atol=0)
    on_device(lambda a: torch.linalg.vector_norm(a, p), y, rtol=0, atol=0)
    on_device(lambda a: torch.linalg.vector_norm(a, p, dim=(0, 2)), x, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_adaptive_avg_pool3d_rounds_like_the_cpu(dtype):
    """adaptive_avg_pool3d of half inputs sums each window in the dtype, rounding
    every addition, and divides by depth, height and width in turn, as the CPU
    kernel does: bit-for-bit equal. Windows past HALF_POOL3D_MAX_WINDOW
    positions run on the CPU (exact too)."""
    torch.manual_seed(0)
    for shape, size in (((8, 8, 8, 8), (5, 7, 4)), ((2, 3, 6, 5, 9), (4, 2, 3)),
                        ((3, 4, 5, 6), (8, 9, 10))):
        x = (torch.randn(shape) * 3).to(dtype)
        on_device(F.adaptive_avg_pool3d, x, size, rtol=0, atol=0)
    x = (torch.randn(1, 2, 16, 16, 16) * 3).to(dtype)
    before = stats()["cpu_fallback_calls"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = F.adaptive_avg_pool3d(x.nkipy(), (1, 2, 2))
    assert stats()["cpu_fallback_calls"] > before
    assert torch.equal(got.cpu(), F.adaptive_avg_pool3d(x, (1, 2, 2)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_transposed_convolution_runs_on_the_cpu(dtype):
    """Transposed convolutions in half precision run on the CPU (its kernel
    rounds the overlapping columns' sums in the dtype, which the device does not
    reproduce): equal to the CPU bit for bit; plain convolutions stay on the device."""
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 3, 4, 4).to(dtype), torch.randn(3, 3, 3, 3).to(dtype), \
        torch.randn(3).to(dtype)
    kw = dict(stride=(2, 2), padding=2, output_padding=(1, 1))
    before = stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = F.conv_transpose2d(x.nkipy(), w.nkipy(), b.nkipy(), **kw)
    after = stats()
    assert after["cpu_fallback_calls"] > before["cpu_fallback_calls"]
    assert torch.equal(got.cpu(), F.conv_transpose2d(x, w, b, **kw))
    tol = {torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}
    on_device(F.conv2d, x, w, b, **tol[dtype])


def test_bfloat16_training_batch_norm_runs_exactly_on_the_cpu():
    """bfloat16 batch norm in training (and the instance norm built on it) takes
    the CPU path, which is exact: the device's emulation of the CPU kernel's
    rounded statistics differed by one ulp of invstd in some channels. float16
    keeps its device kernel (equal to the CPU bit for bit)."""
    import torch.nn.functional as F

    torch.manual_seed(1)
    x = (torch.randn(5, 5, 5) * 5 + 3)
    w, b = torch.randn(5), torch.randn(5)
    for dtype, on_cpu in ((torch.bfloat16, True), (torch.float16, False)):
        xs, ws, bs = (t.to(dtype) for t in (x, w, b))
        want = F.instance_norm(xs, weight=ws, bias=bs, eps=0.6)
        before = stats()
        got = F.instance_norm(xs.nkipy(), weight=ws.nkipy(), bias=bs.nkipy(), eps=0.6)
        after = stats()
        assert torch.equal(got.cpu(), want), dtype
        assert (after["cpu_fallback_calls"] > before["cpu_fallback_calls"]) == on_cpu, dtype


@pytest.mark.parametrize("name", ["relu", "abs", "floor", "neg", "rsub", "sub"])
def test_bool_inputs_the_cpu_refuses_are_refused(nkipy, name):
    """The device's kernels are traced with the ops' meta functions, which
    accept bool inputs that the CPU kernels refuse (relu of a mask gave a
    result): the device raises the CPU's error instead."""
    fn = {"relu": torch.relu, "abs": torch.abs, "floor": torch.floor, "neg": torch.neg,
          "rsub": lambda x: 1 - x, "sub": lambda x: x - x}[name]
    b = torch.tensor([True, False])
    with pytest.raises((RuntimeError, NotImplementedError)) as cpu:
        fn(b)
    with pytest.raises(type(cpu.value), match=str(cpu.value)[:30].replace("(", r"\(")
                       .replace(")", r"\)").replace("`", ".")):
        fn(b.to("nkipy"))
    # what the CPU accepts still runs on the device
    for ok in (torch.sigmoid, torch.bitwise_not, lambda x: x.cumsum(0), lambda x: x + x):
        assert torch.equal(ok(b.to("nkipy")).cpu(), ok(b))


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "softmax", "sum_twice"])
@pytest.mark.parametrize("dim", [3, -4, 5])
def test_dims_out_of_range_raise_as_on_the_cpu(nkipy, name, dim):
    """The device's reductions and softmax wrapped a dimension out of range
    (sum(dim=-4) of a 3-D tensor reduced over dim 2) where the CPU raises;
    found by the differential fuzzer."""
    fn = {"sum": lambda t: t.sum(dim=dim, keepdim=True), "mean": lambda t: t.mean(dim=dim),
          "amax": lambda t: t.amax(dim=dim), "softmax": lambda t: torch.softmax(t, dim=dim),
          "sum_twice": lambda t: t.sum(dim=(0, 0))}[name]
    a = torch.randn(3, 2, 1)
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        fn(a)
    with pytest.raises(type(cpu.value), match=str(cpu.value)[:24].replace("(", r"\(")
                       .replace("[", r"\[")):
        fn(a.to("nkipy"))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_first_integer_call_of_an_out_op_prints_no_warning(dtype):
    """The dtype probe (``_cpu_accepts_dtypes``) runs the op on small CPU
    tensors before the first kernel of a signature is built; its out= tensor
    has no elements, so ``cat.out`` resizes it silently. A one-element out made
    every first ``torch.cat`` of int64 tensors print PyTorch's "An output with
    one or more elements was resized" (make demo's generate() showed it)."""
    from spike_torch import _generic

    _generic.clear_cache()
    a = torch.ones(1, 1, dtype=dtype, device="nkipy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.cat([a, a], dim=-1)
    assert [str(w.message) for w in caught] == []
    assert torch.equal(got.cpu(), torch.ones(1, 2, dtype=dtype))
    # and the probe still sees what the CPU refuses for these dtypes, out= or not
    if dtype == torch.bool:
        with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
            torch.abs(a, out=torch.empty(0, dtype=dtype, device="nkipy"))
