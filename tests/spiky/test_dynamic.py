"""Dynamic shapes: bucket selection and growth, padding in every position,
padding hazards, layouts, options, statistics."""
from __future__ import annotations

import logging
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import spiky

TOL = dict(rtol=1e-5, atol=1e-5)


def compiled_calls(f, sizes, make, dim=0, options=None, dynamic=None):
    """Calls with the size of ``dim`` varying (marked dynamic), each beside eager."""
    c = torch.compile(f, backend="nkipy", dynamic=dynamic, options=options)
    outs = []
    with torch.no_grad():
        for n in sizes:
            x = make(n)
            torch._dynamo.maybe_mark_dynamic(x, dim)
            outs.append((c(x), f(x)))
    return c, outs


def test_power_of_two_buckets_no_recompile_within_a_bucket(backend):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    # padding only (slice_buckets off): 17 runs in bucket 32, not as 16 + 1
    _, outs = compiled_calls(m, [5, 6, 7, 8, 3, 17], lambda n: torch.randn(n, 16),
                             options={"slice_buckets": False})
    for got, want in outs:
        torch.testing.assert_close(got, want, **TOL)
    s = spiky.get_stats()
    assert s.bucket_hits == {8: 4, 4: 1, 32: 1}
    assert s.total_compile_count == 3           # one kernel per bucket
    assert s.total_executions == 6
    pad = [8 / 5, 8 / 6, 8 / 7, 1.0, 4 / 3, 32 / 17]
    assert s.total_pad_ratio_sum == pytest.approx(sum(pad))
    assert s.total_h2d_time_ms > 0 and s.total_nrt_exec_time_ms > 0 and s.total_d2h_time_ms > 0
    assert s.min_execution_time_ms <= s.max_execution_time_ms


def test_explicit_buckets_and_jit_growth(backend, caplog):
    torch.manual_seed(0)
    m = nn.Linear(8, 4)
    with caplog.at_level(logging.INFO, logger="torch_to_nkipy"):
        _, outs = compiled_calls(m, [3, 10, 40, 33], lambda n: torch.randn(n, 8),
                                 options={"buckets": [16, 8], "slice_buckets": False})
    for got, want in outs:
        torch.testing.assert_close(got, want, **TOL)
    assert spiky.get_stats().bucket_hits == {8: 1, 16: 1, 64: 2}
    assert sum("new bucket 64" in r.getMessage() for r in caplog.records) == 1


def test_jit_off_refuses_sizes_beyond_the_buckets(backend):
    c = torch.compile(nn.Linear(8, 4), backend="nkipy", dynamic=True,
                      options={"buckets": [8], "jit": False})
    with torch.no_grad():
        c(torch.randn(5, 8))
        with pytest.raises(ValueError, match="dynamic size 9 exceeds the largest bucket 8 .* jit is off"):
            c(torch.randn(9, 8))


def test_linear_strategy(nkipy_cache):
    from spiky.torch import init_nkipy_backend, reset_nkipy_backend

    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=nkipy_cache, bucket_strategy="linear", max_bucket_size=256)
    torch._dynamo.reset()
    spiky.reset_stats()
    try:
        _, outs = compiled_calls(lambda x: x * 2 + 1, [3, 70], lambda n: torch.randn(n, 4))
        for got, want in outs:
            torch.testing.assert_close(got, want)
        assert spiky.get_stats().bucket_hits == {64: 1, 128: 1}
    finally:
        reset_nkipy_backend()
        torch._dynamo.reset()


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("where", ["cpu", "nkipy"])
def test_padding_in_each_position(backend, dim, where):
    """Row-independent work with the dynamic size in any dimension is bucketed."""
    torch.manual_seed(0)

    def f(x):
        return torch.tanh(x * 2 + 1).softmax(-1 if dim != 2 else 0) * 3

    def make(n):
        s = [3, 4, 6]
        s[dim] = n
        x = torch.randn(*s)
        return x if where == "cpu" else x.to("nkipy")

    c = torch.compile(f, backend="nkipy")
    with torch.no_grad():
        for n in (5, 7, 3):
            x = make(n)
            torch._dynamo.maybe_mark_dynamic(x, dim)
            got = c(x)
            assert got.device.type == where
            torch.testing.assert_close(got.cpu(), f(x.cpu()), **TOL)
    hits = spiky.get_stats().bucket_hits
    assert hits == {8: 2, 4: 1}, hits


@pytest.mark.parametrize("op", ["softmax", "mean", "layer_norm", "cumsum", "matmul_k", "flip", "last"])
def test_hazard_over_the_dynamic_dim_compiles_exact_sizes(backend, op, caplog):
    """Ops that would mix padding into real values are never padded: results stay exact."""
    torch.manual_seed(0)
    fs = {
        "softmax": lambda x: x.softmax(0) * 2,
        "mean": lambda x: x.mean(0, keepdim=True) + x,
        "layer_norm": lambda x: F.layer_norm(x.t(), (x.shape[0],)),
        "cumsum": lambda x: x.cumsum(0),
        "matmul_k": lambda x: x.t() @ x,
        "flip": lambda x: x.flip(0) + 1,
        "last": lambda x: x[-1] * 2,
    }
    f = fs[op]
    with caplog.at_level(logging.WARNING, logger="torch_to_nkipy"):
        _, outs = compiled_calls(f, [5, 6, 7], lambda n: torch.randn(n, 4))
    for got, want in outs:
        torch.testing.assert_close(got, want, **TOL)
    assert any("not padding the dynamic size" in r.getMessage() for r in caplog.records)
    assert spiky.get_stats().bucket_hits == {}


def test_reductions_over_other_dims_are_bucketed(backend):
    torch.manual_seed(0)
    ln = nn.LayerNorm(16)

    def f(x):
        return ln(x).softmax(-1).sum(-1, keepdim=True) * x.mean(-1, keepdim=True)

    _, outs = compiled_calls(f, [5, 7], lambda n: torch.randn(n, 16))
    for got, want in outs:
        torch.testing.assert_close(got, want, **TOL)
    assert spiky.get_stats().bucket_hits == {8: 2}


def test_attention_with_dynamic_batch_is_bucketed(backend):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()
    _, outs = compiled_calls(layer, [3, 5], lambda n: torch.randn(n, 6, 32))
    for got, want in outs:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert spiky.get_stats().bucket_hits == {4: 1, 8: 1}


def test_padded_output_layout_and_padded_inputs(backend):
    torch.manual_seed(0)
    f1 = torch.compile(lambda x: x * 2, backend="nkipy", dynamic=True,
                       options={"output_layout": "padded"})
    f2 = torch.compile(lambda y: y + 1, backend="nkipy", dynamic=True,
                       options={"input_layout": "padded"})
    with torch.no_grad():
        x = torch.randn(5, 3)
        torch._dynamo.maybe_mark_dynamic(x, 0)
        y = f1(x)
        assert y.shape == (8, 3)
        meta = spiky.get_metadata(y)
        assert meta == spiky.PaddingMetadata(5, 8, 0, (0,))
        torch.testing.assert_close(y[:5], x * 2)
        assert torch.count_nonzero(y[5:]) == 0          # zero padding, kernel of zeros
        # a padded tensor: the real part is used, no second padding
        z = f2(y)
        torch.testing.assert_close(z[:5], x * 2 + 1)
    assert spiky.get_metadata(x) is None


def test_padded_input_layout_takes_the_real_rows(backend):
    f = torch.compile(lambda y: y.exp(), backend="nkipy", dynamic=True,
                      options={"input_layout": "padded", "buckets": [4, 16]})
    with torch.no_grad():
        y = torch.randn(8, 2)
        spiky.attach_metadata(y, spiky.PaddingMetadata(3, 8, 0))
        torch._dynamo.maybe_mark_dynamic(y, 0)
        out = f(y)
    torch.testing.assert_close(out, y[:3].exp(), **TOL)
    assert spiky.get_stats().bucket_hits == {4: 1}


def test_attach_metadata_checks_its_argument():
    with pytest.raises(TypeError, match="expected PaddingMetadata, got dict"):
        spiky.attach_metadata(torch.zeros(1), {"original_size": 1})


@pytest.mark.parametrize("pad_on_device", [True, False])
def test_pad_on_device_flag_gives_the_same_results(backend, pad_on_device):
    """A linear layer on (n, 2, 6) flattens to (2n, 6) rows: still padded at the end."""
    torch.manual_seed(0)
    m = nn.Linear(6, 3)
    _, outs = compiled_calls(m, [3, 5], lambda n: torch.randn(n, 2, 6), dim=0,
                             options={"pad_on_device": pad_on_device})
    for got, want in outs:
        torch.testing.assert_close(got, want, **TOL)
    assert spiky.get_stats().bucket_hits == {4: 1, 8: 1}


def test_flattening_a_padded_inner_dimension_is_refused(backend, caplog):
    """(2, n, 6) viewed as (2n, 6) would put padding between real rows: refused
    (exact sizes), results still eager's."""
    torch.manual_seed(0)
    m = nn.Linear(6, 3)
    with caplog.at_level(logging.WARNING, logger="torch_to_nkipy"):
        _, outs = compiled_calls(m, [3, 5], lambda n: torch.randn(2, n, 6), dim=1)
    for got, want in outs:
        torch.testing.assert_close(got, want, **TOL)
    assert any("interleaves the dynamic dimension" in r.getMessage() for r in caplog.records)


def test_keep_outputs_on_device(backend):
    torch.manual_seed(0)
    m = nn.Linear(6, 3)
    c = torch.compile(m, backend="nkipy", dynamic=True, options={"keep_outputs_on_device": True})
    with torch.no_grad():
        for n in (3, 6):
            x = torch.randn(n, 6)
            torch._dynamo.maybe_mark_dynamic(x, 0)
            y = c(x)
            assert y.device.type == "nkipy" and y.shape == (n, 3)
            torch.testing.assert_close(y.cpu(), m(x), **TOL)


def test_in_place_mutation_of_a_padded_input(backend):
    def f(x, acc):
        acc.add_(x * 2)
        return acc.sum(-1)

    c = torch.compile(f, backend="nkipy", dynamic=True)
    with torch.no_grad():
        for n in (3, 5):
            x, acc = torch.randn(n, 4), torch.randn(n, 4)
            ref = acc.clone()
            torch._dynamo.maybe_mark_dynamic(x, 0)
            torch._dynamo.maybe_mark_dynamic(acc, 0)
            out = c(x, acc)
            torch.testing.assert_close(acc, ref + x * 2, **TOL)
            torch.testing.assert_close(out, acc.sum(-1), **TOL)


def test_symint_outputs_and_dynamic_training(backend):
    """spiky's training example: dynamic batch sizes, SGD steps match eager."""
    import copy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    c = torch.compile(model, backend="nkipy", dynamic=True)
    for n in [4, 8, 4, 16, 8]:
        x, t = torch.randn(n, 8), torch.randn(n, 4)
        for net, o in ((c, opt), (ref, ropt)):
            o.zero_grad()
            loss = F.mse_loss(net(x), t)
            loss.backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_concurrent_growth_compiles_a_bucket_once(backend):
    c = torch.compile(lambda x: x + 1, backend="nkipy", dynamic=True,
                      options={"buckets": [4]})
    with torch.no_grad():
        x = torch.randn(3, 2)
        torch._dynamo.maybe_mark_dynamic(x, 0)
        c(x)
        base = spiky.get_stats().total_compile_count
        errors = []

        def call(n):
            try:
                y = torch.randn(n, 2)
                with torch.no_grad():       # grad mode is per thread
                    torch.testing.assert_close(c(y), y + 1)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=call, args=(n,)) for n in (20, 21, 22, 30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert spiky.get_stats().total_compile_count == base + 1
    assert spiky.get_stats().bucket_hits[32] == 4


def test_unknown_and_bad_options_are_errors(backend):
    m = nn.Linear(2, 2)
    with pytest.raises(Exception, match="unknown nkipy backend option 'bucket'"):
        torch.compile(m, backend="nkipy", options={"bucket": [1]})(torch.randn(1, 2))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="option 'jit' has the wrong type str"):
        torch.compile(m, backend="nkipy", options={"jit": "yes"})(torch.randn(1, 2))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="option buckets must be a non-empty list"):
        torch.compile(m, backend="nkipy", options={"buckets": []})(torch.randn(1, 2))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="output_layout must be 'unpad' or 'padded'"):
        torch.compile(m, backend="nkipy", options={"output_layout": "x"})(torch.randn(1, 2))


def test_bucket_helpers():
    assert spiky.infer_buckets(64) == [1, 2, 4, 8, 16, 32, 64]
    assert spiky.infer_buckets(200, "linear") == [64, 128, 192]
    assert spiky.select_bucket([4, 8], 5) == 8 and spiky.select_bucket([4, 8], 9) is None
    assert spiky.next_pow2(17) == 32 and spiky.next_pow2(1) == 1
    assert spiky.check_buckets([8, 4, 8]) == [4, 8]
    with pytest.raises(ValueError, match="unknown bucket strategy 'cubic'"):
        spiky.infer_buckets(64, "cubic")
    with pytest.raises(ValueError, match="buckets must be a non-empty list of positive ints"):
        spiky.check_buckets([0])
    with pytest.raises(ValueError, match="invalid bucket bounds"):
        spiky.infer_buckets(0)


# ---- regressions found in review: padding must never change results --------------

def _check_sizes(f, make, sizes, dims=((0, 0),)):
    """f(*make(n)) compiled against eager for each n; inputs compared after the call
    too (in-place updates). dims: (argument, dimension) pairs marked dynamic."""
    c = torch.compile(f, backend="nkipy")
    with torch.no_grad():
        for n in sizes:
            args = make(n)
            ref_args = [a.clone() for a in args]
            for i, d in dims:
                torch._dynamo.maybe_mark_dynamic(args[i], d)
            got, want = c(*args), f(*ref_args)
            torch.testing.assert_close(got, want, **TOL)
            for a, b in zip(args, ref_args):
                torch.testing.assert_close(a, b, **TOL)


def test_kv_cache_style_slice_update_of_a_static_buffer(backend):
    def kv(x, cache):
        cache[: x.shape[0]] = x
        return cache + 0

    _check_sizes(kv, lambda n: (torch.randn(n, 4), torch.arange(32.).reshape(8, 4)), [3, 5, 6])


@pytest.mark.parametrize("kind", ["scatter", "scatter_add"])
def test_scatter_from_a_dynamic_index_into_a_static_tensor(backend, kind):
    if kind == "scatter":
        def f(idx):
            return torch.zeros(8).scatter(0, idx, 1.0)
    else:
        def f(idx):
            return torch.zeros(8).scatter_add(0, idx, torch.ones(idx.shape[0]) * 2)
    _check_sizes(f, lambda n: (torch.arange(n) % 7 + 1,), [3, 5, 6])


@pytest.mark.parametrize("which", ["scale", "fill", "divide", "compare"])
def test_the_dynamic_size_used_as_a_value(backend, which):
    fs = {
        "scale": lambda x: x * x.shape[0],
        "fill": lambda x: x + torch.full((x.shape[0], 1), x.shape[0]),
        "divide": lambda x: x + torch.arange(x.shape[0]).unsqueeze(1) / x.shape[0],
        "compare": lambda x: torch.where((torch.arange(x.shape[0]) == x.shape[0] - 1)
                                         .unsqueeze(1), x, 0.0),
    }
    _check_sizes(fs[which], lambda n: (torch.randn(n, 4),), [3, 5, 6])


def test_two_dynamic_sizes_in_one_view(backend):
    def f(x, y):
        z = y.unsqueeze(2) * (x + 0).t().unsqueeze(0)
        return z.reshape(y.shape[0], -1) * 2

    _check_sizes(f, lambda n: (torch.randn(n, 4), torch.randn(n + 3, 4)), [3, 5],
                 dims=((0, 0), (1, 0)))


def test_related_sizes_that_padding_would_split(backend):
    def f(idx, src):
        return torch.zeros(8).scatter(0, idx, src)

    _check_sizes(f, lambda n: (torch.arange(n) % 8, torch.randn(n + 1)), [3, 5],
                 dims=((0, 0), (1, 0)))


def test_padded_input_larger_than_its_bucket_is_an_error(backend):
    f = torch.compile(lambda x, y: x + y, backend="nkipy", dynamic=True,
                      options={"input_layout": "padded"})
    with torch.no_grad():
        x, y = torch.randn(8, 2), torch.randn(8, 2)
        spiky.attach_metadata(x, spiky.PaddingMetadata(3, 4, 0))
        torch._dynamo.maybe_mark_dynamic(x, 0)
        with pytest.raises(Exception, match="has 8 entries along its dynamic dimension 0 but "
                                            "the call's dynamic size is 3 .bucket 4."):
            f(x, y)


def test_option_and_config_type_errors(nkipy_cache, backend):
    from spiky.torch import init_nkipy_backend, reset_nkipy_backend

    with pytest.raises(Exception, match="unpad_outputs and output_layout='unpad' contradict"):
        torch.compile(nn.Linear(2, 2), backend="nkipy",
                      options={"unpad_outputs": False, "output_layout": "unpad"})(
            torch.randn(1, 2))
    reset_nkipy_backend()
    with pytest.raises(TypeError, match="pipelined must be a bool, not str 'no'"):
        init_nkipy_backend(nkipy_cache=nkipy_cache, pipelined="no")
    with pytest.raises(ValueError, match="bucket_strategy must be one of power_of_2, linear"):
        init_nkipy_backend(nkipy_cache=nkipy_cache, bucket_strategy="cubic")
    with pytest.raises(ValueError, match="max_bucket_size must be a positive int"):
        init_nkipy_backend(nkipy_cache=nkipy_cache, max_bucket_size=0)


def test_a_bucket_kernel_that_fails_to_build_falls_back_to_exact_sizes(backend, monkeypatch,
                                                                       caplog):
    from torch_to_nkipy import dynamic

    def broken(self, env):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(dynamic.DynamicSignature, "concrete", broken)
    with caplog.at_level(logging.WARNING, logger="torch_to_nkipy"):
        _check_sizes(lambda x: x * 2 + 1, lambda n: (torch.randn(n, 3),), [3, 5])
    assert any("failed to build (ValueError: operands could not be broadcast together); "
               "compiling each size exactly" in r.getMessage() for r in caplog.records)
    assert spiky.get_stats().bucket_hits == {}


def test_sizes_between_buckets_run_as_unpadded_slices(backend):
    """slice_buckets (the default): a size between buckets runs as consecutive
    slices of the inputs, each through one bucket's kernel at its own size (200 =
    128 + 64 + 8, nothing padded; 100 = 64 + 32 + 4); results are eager's, on
    nkipy and on CPU tensors, and a padded single call is still used where one
    bucket fits best."""
    from spiky.buckets import plan_chunks

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    sizes = [200, 100, 3, 129]
    _, outs = compiled_calls(m, sizes, lambda n: torch.randn(n, 16))
    for got, want in outs:
        assert got.shape == want.shape and got.device.type == "cpu"
        torch.testing.assert_close(got, want, **TOL)
    s = spiky.get_stats()
    # 200: 128 + 64 + 8; 100: 64 + 32 + 4; 3: padded to 4; 129: 128 + 1
    assert s.bucket_hits == {128: 2, 64: 2, 8: 1, 32: 1, 4: 2, 1: 1}
    assert s.total_executions == 9
    assert s.total_pad_ratio_sum == pytest.approx(8 + 4 / 3)
    dev = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    dev.load_state_dict(m.state_dict())
    dev.to("nkipy")
    c = torch.compile(dev, backend="nkipy")
    with torch.no_grad():
        for n in (200, 100, 77):
            x = torch.randn(n, 16)
            xd = x.to("nkipy")
            torch._dynamo.maybe_mark_dynamic(xd, 0)
            got = c(xd)
            assert got.device.type == "nkipy" and len(plan_chunks(list(range(1, 300)), n)) >= 1
            torch.testing.assert_close(got.cpu(), m(x), **TOL)


def test_slices_overlap_rather_than_pad():
    from spiky.buckets import plan_chunks

    pow2 = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert plan_chunks(pow2, 200) == [(0, 128, 128), (128, 64, 64), (192, 8, 8)]
    assert plan_chunks(pow2, 128) == [(0, 128, 128)]
    assert plan_chunks(pow2, 255) == [(0, 255, 256)]         # one padded call is cheaper
    assert plan_chunks(pow2, 300) is None                    # beyond the buckets
    # a last slice overlapping the one before instead of padding
    assert plan_chunks([8, 64, 128], 70) == [(0, 64, 64), (62, 8, 8)]
    assert plan_chunks([64, 128], 100) == [(0, 100, 128)]     # 64 + 64 costs more
    for n in range(1, 257):
        plan = plan_chunks(pow2, n)
        covered = set()
        for start, size, bucket in plan:
            assert size == bucket or len(plan) == 1
            covered |= set(range(start, start + size))
        assert covered == set(range(n)) and len(plan) <= 4


def test_in_place_updates_are_not_sliced(backend):
    """A graph that updates an input in place runs as one padded call (slices would
    each write back), with eager's result and update."""
    def f(x, acc):
        acc.add_(x * 2)
        return acc + 1

    c = torch.compile(f, backend="nkipy")
    with torch.no_grad():
        for n in (200, 100):
            x, acc = torch.randn(n, 4), torch.randn(n, 4)
            ref_acc = acc.clone()
            want = f(x, ref_acc)
            torch._dynamo.maybe_mark_dynamic(x, 0)
            torch._dynamo.maybe_mark_dynamic(acc, 0)
            got = c(x, acc)
            torch.testing.assert_close(got, want, **TOL)
            torch.testing.assert_close(acc, ref_acc, **TOL)


def test_a_slice_kernel_that_fails_to_build_falls_back_to_exact_sizes(backend, monkeypatch,
                                                                      caplog):
    """A size that would run as slices (100 = 64 + 32 + 4) whose bucket kernels fail
    to build: the call is compiled for its exact size, with eager's result."""
    from torch_to_nkipy import dynamic

    def broken(self, env):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(dynamic.DynamicSignature, "concrete", broken)
    with caplog.at_level(logging.WARNING, logger="torch_to_nkipy"):
        _check_sizes(lambda x: x * 2 + 1, lambda n: (torch.randn(n, 3),), [100, 200])
    assert any("compiling each size exactly" in r.getMessage() for r in caplog.records)
    assert spiky.get_stats().bucket_hits == {}
