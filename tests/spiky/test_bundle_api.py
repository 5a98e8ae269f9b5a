"""The original spiky's lower-level API: bundles of NEFFs per bucket
(register_bundle, select_bucket, execute_bundle, execute_pipelined,
flush_pipeline), DeviceTensor, and the doors over the backend's engine
(NKIPyCallable, CallableConfig, spiky.compile, DynamicSpec)."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch

import spiky
from nkipy.compiler.api import compile_to_neff
from nkipy.core.trace import trace
from spiky import CallableConfig, DeviceTensor, NKIPyCallable
from spiky.utils.dynamic_shapes import DynamicSpec, to_bundle_specs

BUCKETS = (4, 8, 16)


def f(x, w):
    return np.tanh(x @ w) * 2.0, x.sum(axis=1), w + 1.0


def want(x, w):
    return [np.tanh(x @ w) * 2.0, x.sum(axis=1), w + 1.0]


@pytest.fixture(scope="module")
def neffs(tmp_path_factory):
    """One NEFF per bucket of ``f``'s first dimension of ``x``."""
    d = tmp_path_factory.mktemp("bundle")
    out = {}
    for b in BUCKETS:
        g = trace(f, np.zeros((b, 32), np.float32), np.zeros((32, 16), np.float32), name=f"f{b}")
        out[b] = compile_to_neff(g, str(d), neff_name=f"f{b}.neff")
    return out


@pytest.fixture
def bundle(neffs):
    spiky.reset_stats()
    bid = spiky.register_bundle(neffs, {0: 0})
    yield bid
    spiky.unregister_bundle(bid)


def _np(outs):
    return [o.numpy() if isinstance(o, DeviceTensor) else o for o in outs]


def _check(outs, x, w):
    for got, ref in zip(_np(outs), want(x, w)):
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_select_bucket_of_a_bundle_and_of_a_list(bundle):
    assert [spiky.select_bucket(bundle, n) for n in (1, 4, 5, 9, 16, 17, 1000)] == \
        [4, 4, 8, 16, 16, 16, 16]
    # the list form keeps its meaning: None past the largest
    assert spiky.select_bucket([4, 8], 5) == 8 and spiky.select_bucket([4, 8], 9) is None
    b = spiky.get_bundle(bundle)
    assert b.buckets == list(BUCKETS) and b.dynamic_specs == {0: 0}
    assert "Bundle(id=" in repr(b)


@pytest.mark.parametrize("kw", [
    {}, {"keep_outputs_on_device": False}, {"pad_on_device": False},
    {"keep_outputs_on_device": False, "pad_on_device": False}])
@pytest.mark.parametrize("n", [1, 3, 4, 7, 13, 16])
def test_execute_bundle_pads_and_unpads(bundle, n, kw):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    outs = spiky.execute_bundle(bundle, spiky.select_bucket(bundle, n), [x, w], **kw)
    keep = kw.get("keep_outputs_on_device", True)
    assert all(isinstance(o, DeviceTensor if keep else np.ndarray) for o in outs)
    _check(outs, x, w)


def test_device_tensor_inputs_and_padded_outputs(bundle):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    outs = spiky.execute_bundle(bundle, 8, [DeviceTensor.from_numpy(x), DeviceTensor.from_numpy(w)])
    _check(outs, x, w)
    padded = spiky.execute_bundle(bundle, 8, [x, w], unpad_outputs=False,
                                  keep_outputs_on_device=False)
    assert padded[0].shape == (8, 16) and padded[1].shape == (8,)
    np.testing.assert_allclose(padded[0][:5], want(x, w)[0], rtol=1e-5, atol=1e-5)
    assert not padded[1][5:].any()                  # the padding rows were zeros
    # actual_len given explicitly agrees with the inputs' size
    _check(spiky.execute_bundle(bundle, 16, [x, w], actual_len=5), x, w)


def test_statistics_count_bucket_hits_and_padding(bundle):
    x = np.ones((3, 32), np.float32)
    w = np.ones((32, 16), np.float32)
    for _ in range(3):
        spiky.execute_bundle(bundle, 4, [x, w])
    spiky.execute_bundle(bundle, 16, [x, w])
    s = spiky.get_stats()
    assert s.total_executions == 4 and s.bucket_hits == {4: 3, 16: 1}
    assert s.total_pad_ratio_sum == pytest.approx(3 * 4 / 3 + 16 / 3)


def test_pipelined_prefetch_never_runs_on_stale_inputs(bundle):
    """next_inputs are copied while the current kernel runs; inputs changed
    after their prefetch (in place, or replaced by other arrays; the weights
    too) are what the next call computes with."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    xs = [rng.standard_normal((6, 32)).astype(np.float32) for _ in range(9)]
    results, used = [], []
    for i, x in enumerate(xs):
        used.append((x.copy(), w.copy()))       # what this call must compute with
        nxt = [xs[i + 1], w] if i + 1 < len(xs) else None
        results.append(spiky.execute_pipelined(bundle, 8, [x, w], nxt))
        if i + 1 < len(xs):
            if i % 3 == 0:
                xs[i + 1][2, 5] = 1000.0 + i            # changed in place after the prefetch
            elif i % 3 == 1:
                xs[i + 1] = rng.standard_normal((6, 32)).astype(np.float32)  # another array
            if i == 4:
                w[0, 0] += 1.0                          # the weights, once
    spiky.flush_pipeline(bundle)
    for r, (x, w_then) in zip(results, used):
        assert all(isinstance(o, DeviceTensor) for o in r)
        _check(r, x, w_then)


def test_pipelined_prefetch_of_another_bucket_and_host_outputs(bundle):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    sizes = [3, 6, 6, 12, 2, 16]
    xs = [rng.standard_normal((n, 32)).astype(np.float32) for n in sizes]
    for i, x in enumerate(xs):
        nxt = [xs[i + 1], w] if i + 1 < len(xs) else []
        keep = i % 2 == 0
        outs = spiky.execute_pipelined(bundle, spiky.select_bucket(bundle, len(x)), [x, w],
                                       nxt, keep_outputs_on_device=keep)
        _check(outs, x, w)
    spiky.flush_pipeline(bundle)
    spiky.flush()                  # spiky.flush waits for bundles too


def test_save_trace_writes_a_perfetto_file(bundle, tmp_path):
    path = str(tmp_path / "run.ntff")
    x = np.ones((3, 32), np.float32)
    w = np.ones((32, 16), np.float32)
    spiky.execute_bundle(bundle, 4, [x, w], save_trace=True, ntff_name=path)
    with open(path) as fh:
        assert json.load(fh)


def test_static_bundle_and_device_tensor_names(neffs):
    bid = spiky.register_bundle({8: neffs[8]}, {})
    try:
        x = np.full((8, 32), 0.5, np.float32)
        w = np.full((32, 16), 0.25, np.float32)
        outs = spiky.execute_bundle(bid, 8, [x, w])
        _check(outs, x, w)
        t = outs[0]
        assert t.nrt_ptr == t.tensor_ref.va and t.device == 0
        assert t.size_bytes == 8 * 16 * 4 and t.shape == (8, 16) and t.dtype == np.float32
        assert t.read_to_bytes() == t.numpy().tobytes()
        assert spiky.select_bucket(bid, 3) == 8
    finally:
        spiky.unregister_bundle(bid)


def test_bundle_errors_name_the_problem(neffs, tmp_path):
    with pytest.raises(ValueError, match="non-empty dict of bucket size -> NEFF path"):
        spiky.register_bundle({}, {0: 0})
    with pytest.raises(ValueError, match="buckets must be a non-empty list of positive ints"):
        spiky.register_bundle({0: neffs[4]}, {0: 0})
    with pytest.raises(ValueError, match="dynamic_specs must be a dict of input index"):
        spiky.register_bundle(neffs, {0: "x"})
    with pytest.raises(ValueError, match="a bundle of 3 buckets needs dynamic_specs"):
        spiky.register_bundle(neffs, {})
    with pytest.raises(FileNotFoundError, match="bucket 4: NEFF file .* does not exist"):
        spiky.register_bundle({4: str(tmp_path / "missing.neff")}, {0: 0})
    with pytest.raises(ValueError, match=r"no bundle with id 9999 is registered"):
        spiky.execute_bundle(9999, 4, [])
    bid = spiky.register_bundle(neffs, {0: 0})
    x = np.ones((5, 32), np.float32)
    w = np.ones((32, 16), np.float32)
    try:
        with pytest.raises(ValueError, match=r"has no bucket 5 \(its buckets: \[4, 8, 16\]\)"):
            spiky.execute_bundle(bid, 5, [x, w])
        with pytest.raises(ValueError, match=r"actual size 5 exceeds the bucket 4 "
                                             r"\(select_bucket\(\d+, 5\) gives 8\)"):
            spiky.execute_bundle(bid, 4, [x, w])
        with pytest.raises(ValueError, match="takes 2 inputs .x, w., got 1"):
            spiky.execute_bundle(bid, 8, [x])
        with pytest.raises(ValueError, match=r"input 1 \('w'\) has shape \[16, 32\], the model "
                                             r"of bucket 8 takes \[32, 16\]"):
            spiky.execute_bundle(bid, 8, [x, np.ones((16, 32), np.float32)])
        with pytest.raises(ValueError, match=r"input 0 \('x'\) is float64, the model takes "
                                             r"float32"):
            spiky.execute_bundle(bid, 8, [x.astype(np.float64), w])
        with pytest.raises(ValueError, match=r"input 0 \('x'\) has 5 entries along its dynamic "
                                             r"dimension 0, but the call's actual size is 3"):
            spiky.execute_bundle(bid, 8, [x, w], actual_len=3)
        with pytest.raises(ValueError, match="actual_len must be >= 0"):
            spiky.execute_bundle(bid, 8, [x, w], actual_len=-1)
    finally:
        spiky.unregister_bundle(bid)
    # a spec naming a dimension that is not the bucket's size in the models
    bad = spiky.register_bundle(neffs, {1: 0})
    try:
        with pytest.raises(ValueError, match=r"input 1 \('w'\) of the model of bucket 8 has "
                                             r"shape \[32, 16\]: dimension 0 is not of the "
                                             r"bucket's size 8"):
            spiky.execute_bundle(bad, 8, [x, w])
    finally:
        spiky.unregister_bundle(bad)
    with pytest.raises(ValueError, match="no bundle with id"):
        spiky.unregister_bundle(bad)


def _bundle_of(tmp_path, fn, make_args, buckets, specs):
    neffs = {}
    for b in buckets:
        g = trace(fn, *make_args(b), name=f"{fn.__name__}{b}")
        neffs[b] = compile_to_neff(g, str(tmp_path), neff_name=f"{fn.__name__}{b}.neff")
    return spiky.register_bundle(neffs, specs)


def test_outputs_are_unpadded_where_they_carry_the_dynamic_size(tmp_path):
    """Which output dimensions are dynamic comes from comparing two buckets'
    models, not from a size that happens to equal the bucket: a static (8, 8)
    output in bucket 8, a transposed output, a static dimension equal to the
    bucket, and a (b, b) output padded in both dimensions."""
    rng = np.random.default_rng(3)

    def g(x, w):
        return w + 1.0, x.T * 2.0, w.sum(axis=1), x @ x.T

    bid = _bundle_of(tmp_path, g, lambda b: [np.zeros((b, 8), np.float32),
                                             np.zeros((8, 8), np.float32)], (4, 8), {0: 0})
    try:
        x = rng.standard_normal((5, 8)).astype(np.float32)
        w = rng.standard_normal((8, 8)).astype(np.float32)
        want = g(x, w)
        for keep in (False, True):
            got = _np(spiky.execute_bundle(bid, 8, [x, w], keep_outputs_on_device=keep))
            assert [o.shape for o in got] == [(8, 8), (8, 5), (8,), (5, 5)]
            for o, ref in zip(got, want):
                np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-5)
        assert spiky.get_bundle(bid).output_dims(8) == [(), (1,), (), (0, 1)]
    finally:
        spiky.unregister_bundle(bid)


def test_in_place_kernels_update_their_inputs(tmp_path):
    """An output aliasing an input: a DeviceTensor input is updated itself (also
    when the kernel ran on a padded copy of it); for an array input each call
    returns its own copy, which later calls do not overwrite."""

    def acc_add(x, acc):
        acc[...] = acc + x
        return x * 2.0, acc

    bid = _bundle_of(tmp_path, acc_add, lambda b: [np.zeros((b, 4), np.float32),
                                                   np.zeros((b, 4), np.float32)],
                     (4, 8), {0: 0, 1: 0})
    try:
        for n in (4, 3):                                  # unpadded, then padded
            acc = DeviceTensor.from_numpy(np.full((n, 4), 10, np.float32))
            out = spiky.execute_bundle(bid, 4, [np.ones((n, 4), np.float32), acc])
            assert out[1] is acc and np.array_equal(acc.numpy(), np.full((n, 4), 11, np.float32))
            np.testing.assert_array_equal(out[0].numpy(), np.full((n, 4), 2, np.float32))
        for api in (spiky.execute_bundle, spiky.execute_pipelined):
            r = [api(bid, 4, [np.full((4, 4), i, np.float32), np.full((4, 4), 10 * i, np.float32)])
                 for i in (1, 2, 3)]
            spiky.flush_pipeline(bid)
            assert [float(x[1].numpy()[0, 0]) for x in r] == [11.0, 22.0, 33.0]
    finally:
        spiky.unregister_bundle(bid)


def test_padded_inputs_of_the_wrong_shape_are_refused(bundle):
    """Only the dynamic dimension may differ from the model's shape; the other
    dimensions of a padded input are checked too (they were not, and the kernel
    read zeros and the previous call's bytes)."""
    w = np.ones((32, 16), np.float32)
    for x in (np.ones((3, 16), np.float32), np.ones(3, np.float32),
              DeviceTensor.from_numpy(np.ones((3, 16), np.float32))):
        shape = list(x.shape)
        with pytest.raises(ValueError, match=re.escape(
                f"input 0 ('x') has shape {shape}, the model of bucket 4 takes [3, 32] "
                f"(dimension 0 at the call's actual size)")):
            spiky.execute_bundle(bundle, 4, [x, w])


def test_inputs_may_be_any_array_like(bundle):
    """A tuple of inputs, a nested list as an input: converted as NumPy does
    (a list of Python floats is float64, which a float32 model refuses by
    name, never converting silently)."""
    x = np.ones((3, 32), np.float32)
    w = np.ones((32, 16), np.float32)
    _check(spiky.execute_bundle(bundle, 4, (x, w)), x, w)
    with pytest.raises(ValueError, match=r"input 1 \('w'\) is float64, the model takes "
                                         r"float32"):
        spiky.execute_bundle(bundle, 4, [x, w.tolist()])
    with pytest.raises(TypeError, match="inputs must be a sequence of arrays or device tensors "
                                        r"\(one per model input\), not a single ndarray"):
        spiky.execute_pipelined(bundle, 4, [np.ones((3, 32), np.float32), np.ones((32, 16),
                                np.float32)], next_inputs=np.ones((3, 32), np.float32))


# ---- the doors over the backend's engine -----------------------------------------------

def test_dynamic_spec_checks_and_bundle_form():
    specs = [DynamicSpec(0, 0, max_size=64), DynamicSpec(2, 1)]
    assert to_bundle_specs(specs) == {0: 0, 2: 1}
    assert spiky.utils.DynamicSpec is DynamicSpec
    assert DynamicSpec(1, -1).size_of([None, np.zeros((2, 7))]) == 7
    with pytest.raises(ValueError, match=r"input\(s\) \[0\] have more than one DynamicSpec"):
        to_bundle_specs([DynamicSpec(0, 0), DynamicSpec(0, 1)])
    with pytest.raises(ValueError, match="DynamicSpec.min_size must be >= 1, not 0"):
        DynamicSpec(0, 0, min_size=0)
    with pytest.raises(ValueError, match=r"DynamicSpec.max_size must be an int >= min_size"):
        DynamicSpec(0, 0, min_size=8, max_size=4)
    with pytest.raises(TypeError, match="DynamicSpec.dim_idx must be an int, not str"):
        DynamicSpec(0, "0")
    with pytest.raises(ValueError, match="names input 3, but the call has 1 inputs"):
        DynamicSpec(3, 0).size_of([np.zeros(2)])
    with pytest.raises(ValueError, match=r"input 0 has no dimension 2 \(shape \[2\]\)"):
        DynamicSpec(0, 2).size_of([np.zeros(2)])


def test_callable_config_maps_onto_backend_options(backend):
    cfg = CallableConfig(dynamic_specs=(DynamicSpec(0, 0, min_size=4, max_size=64),),
                         pipelined=True, unpad_outputs=False)
    opts = cfg.options()
    assert opts["buckets"] == [4, 8, 16, 32, 64] and opts["pipelined"] is True
    assert opts["unpad_outputs"] is False and opts["jit"] is True
    assert CallableConfig(buckets=[16, 8]).buckets == (8, 16)
    with pytest.raises(TypeError, match="CallableConfig.pipelined must be a bool, not int"):
        CallableConfig(pipelined=1)
    with pytest.raises(ValueError, match="option input_layout must be 'auto' or 'padded'"):
        CallableConfig(input_layout="other")
    with pytest.raises(ValueError, match="buckets must be a non-empty list"):
        CallableConfig(buckets=[])
    with pytest.raises(TypeError, match="expected DynamicSpec, got tuple"):
        CallableConfig(dynamic_specs=((0, 0),))
    with pytest.raises(TypeError, match="config must be a CallableConfig, not dict"):
        NKIPyCallable(lambda x: x, {})
    with pytest.raises(TypeError, match="NKIPyCallable needs a callable"):
        NKIPyCallable(3)


def test_nkipy_callable_runs_buckets_through_the_backend(backend):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    c = NKIPyCallable(m, CallableConfig(buckets=(4, 8, 16), dynamic_specs=(DynamicSpec(0, 0),)))
    with torch.no_grad():
        for n in (3, 5, 8, 11, 16):
            x = torch.randn(n, 16)
            torch.testing.assert_close(c(x), m(x))
    s = spiky.get_stats()
    assert s.total_compile_count == 3 and set(s.bucket_hits) == {4, 8, 16}
    c.close()


def test_a_negative_dynamic_dimension_is_bucketed_from_the_first_call(backend):
    """DynamicSpec(0, -1): Dynamo only reads non-negative indices, so -1 is
    marked as the dimension it names (it had compiled the first call's exact
    shape, then buckets)."""
    c = NKIPyCallable(lambda a: a * 2, CallableConfig(buckets=(4, 8),
                                                     dynamic_specs=(DynamicSpec(0, -1),)))
    for n in (3, 6, 8):
        torch.testing.assert_close(c(torch.ones(2, n)), torch.full((2, n), 2.0))
    assert spiky.get_stats().bucket_hits == {4: 1, 8: 2}


def test_nkipy_callable_checks_its_dynamic_inputs(backend):
    c = NKIPyCallable(lambda a, b: a + b, CallableConfig(
        dynamic_specs=(DynamicSpec(0, 0), DynamicSpec(1, 0, max_size=8)), jit_enabled=False))
    with pytest.raises(ValueError, match=r"size 3, but the primary .* has size 2: dynamic "
                                         r"inputs share one size"):
        c(torch.ones(2, 4), torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"size 9 is outside \[1, 8\]"):
        c(torch.ones(9, 4), torch.ones(9, 4))
    torch.testing.assert_close(c(torch.ones(5, 4), torch.ones(5, 4)), torch.full((5, 4), 2.0))


def test_spiky_compile_is_inference_with_positional_inputs(backend):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 4)
    c = spiky.compile(m, options={"buckets": [8]})
    x = torch.randn(3, 8, requires_grad=True)
    y = c(x)
    assert not y.requires_grad
    torch.testing.assert_close(y, m(x).detach())
    with pytest.raises(TypeError, match=r"takes positional inputs only, got keyword "
                                        r"argument\(s\) \['input'\]"):
        c(input=x)
    with pytest.raises(ValueError, match="unknown nkipy backend option 'bukets'"):
        spiky.compile(m, options={"bukets": [8]})
    with pytest.raises(TypeError, match="spiky.compile needs a callable"):
        spiky.compile(None)
    c.flush()
    c.close()


def test_spiky_starts_the_backend_when_needed(nkipy_cache, monkeypatch):
    """NKIPyCallable without init_nkipy_backend: the backend starts with its
    defaults (its cache under HOME, here a temporary one)."""
    import torch._dynamo

    from spiky.torch import is_nkipy_backend_initialized, reset_nkipy_backend

    reset_nkipy_backend()
    monkeypatch.setenv("HOME", os.path.dirname(nkipy_cache))
    torch._dynamo.reset()
    try:
        c = NKIPyCallable(lambda a: a * 3)
        torch.testing.assert_close(c(torch.ones(2)), torch.full((2,), 3.0))
        assert is_nkipy_backend_initialized()
    finally:
        torch._dynamo.reset()
        reset_nkipy_backend()


def test_next_inputs_that_cannot_be_prefetched_do_not_fail_this_call(bundle):
    """Wrong next_inputs (too few, a 0-d primary input) are not prefetched; the
    current call's results stand, and the call that uses them raises."""
    x = np.ones((3, 32), np.float32)
    w = np.ones((32, 16), np.float32)
    for bad in ([x], [np.ones((), np.float32), w]):
        outs = spiky.execute_pipelined(bundle, 4, [x, w], bad)
        _check(outs, x, w)
    spiky.flush_pipeline(bundle)
    with pytest.raises(ValueError, match=r"takes 2 inputs \(x, w\), got 1"):
        spiky.execute_pipelined(bundle, 4, [x])
    with pytest.raises(ValueError, match=r"input 0 \('x'\) has shape \[\], without its "
                                         r"dynamic dimension 0"):
        spiky.execute_bundle(bundle, 4, [np.ones((), np.float32), w])
