"""SpikeTensor and SpikeModel: NumPy I/O, numerics, validation, benchmark."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import spike
from spike import BenchmarkResult, NrtTensor, SpikeError, SpikeModel, SpikeTensor
from spike._dtypes import DTYPE_NAMES, to_numpy_dtype

RNG = np.random.default_rng(1234)


# ---- SpikeTensor -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_roundtrip_every_dtype(dtype):
    np_dtype = to_numpy_dtype(dtype)
    data = (RNG.standard_normal((3, 5)) * 10).astype(np_dtype)
    t = SpikeTensor.from_numpy(data, name=f"t_{dtype}")
    assert t.dtype == np_dtype and t.shape == (3, 5)
    assert t.size == 15 and t.nbytes == data.nbytes and t.ndim == 2
    out = t.numpy()
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out.view(np.uint8), data.view(np.uint8))


def test_from_numpy_properties_and_repr():
    t = SpikeTensor.from_numpy(np.ones((2, 2), np.int16), name="w", core_id=3)
    assert t.core_id == 3 and t.name == "w" and t.tensor_ref.name == "w"
    assert isinstance(t.tensor_ref, NrtTensor)
    assert repr(t) == "SpikeTensor(name='w', shape=(2, 2), dtype=int16, core_id=3)"
    assert SpikeTensor.from_numpy(np.zeros(1, np.float32)).name == "unnamed_tensor"


def test_from_numpy_non_contiguous_and_scalars():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    view = base[:, ::2].T  # non-contiguous
    t = SpikeTensor.from_numpy(view)
    np.testing.assert_array_equal(t.numpy(), view)
    scalar = SpikeTensor.from_numpy(np.float32(2.5))
    assert scalar.shape == () and scalar.numpy() == np.float32(2.5)
    empty = SpikeTensor.from_numpy(np.zeros((0, 3), np.int32))
    assert empty.numpy().shape == (0, 3)
    lst = SpikeTensor.from_numpy([1, 2, 3])
    assert lst.dtype == np.int64


def test_bfloat16_roundtrip():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    data = np.array([1.0, -2.5, 3.140625, 1e10], dtype=ml_dtypes.bfloat16)
    t = SpikeTensor.from_numpy(data)
    assert str(t.dtype) == "bfloat16" and t.nbytes == 8
    np.testing.assert_array_equal(t.numpy(), data)


def test_unsupported_dtypes():
    with pytest.raises(TypeError, match="unsupported dtype 'complex64'"):
        SpikeTensor.from_numpy(np.zeros(2, np.complex64))
    with pytest.raises(TypeError, match="unsupported dtype 'object'"):
        SpikeTensor.from_numpy(np.array([None, 1], dtype=object))
    with pytest.raises(TypeError, match="expected one of"):
        to_numpy_dtype("quaternion")


def test_write_from_numpy():
    t = SpikeTensor.from_numpy(np.zeros((2, 3), np.float32))
    ref = t.tensor_ref
    t.write_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    t.write_from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2).T)  # same size, non-contig
    np.testing.assert_array_equal(t.numpy().ravel(), np.arange(6).reshape(3, 2).T.ravel())
    assert t.tensor_ref is ref  # no reallocation
    with pytest.raises(ValueError, match="dtype mismatch.*expected float32, got float64"):
        t.write_from_numpy(np.zeros(6))
    with pytest.raises(ValueError, match=r"size mismatch.*expected 6 elements.*got 4"):
        t.write_from_numpy(np.zeros(4, np.float32))


def test_spike_tensor_constructor_checks():
    ref = spike.get_spike_singleton().allocate_tensor(24)
    t = SpikeTensor(ref, (2, 3), "float32", name="named")
    assert t.name == "named" and t.dtype == np.float32
    with pytest.raises(ValueError, match=r"shape \(2, 2\) of float32 needs 16 bytes but tensor"):
        SpikeTensor(ref, (2, 2), np.float32)
    with pytest.raises(TypeError, match="tensor_ref must be an NrtTensor"):
        SpikeTensor(np.zeros(3), (3,), np.float64)
    with pytest.raises(ValueError, match="negative"):
        SpikeTensor(ref, (-2, -3), np.float32)


def test_spike_tensor_free():
    t = SpikeTensor.from_numpy(np.zeros(3, np.float32), name="tmp")
    t.free()
    with pytest.raises(SpikeError, match="Tensor 'tmp' is freed"):
        t.numpy()
    with pytest.raises(SpikeError, match="Tensor 'tmp' is freed"):
        t.write_from_numpy(np.zeros(3, np.float32))


# ---- SpikeModel: numerics ---------------------------------------------------


def test_add_numerics(neff):
    model = SpikeModel.load_from_neff(neff("add"))
    assert model.name == "add" and model.neff_path == neff("add") and model.core_id == 0
    a = RNG.standard_normal((64, 33)).astype(np.float32)
    b = RNG.standard_normal((64, 33)).astype(np.float32)
    ta, tb = SpikeTensor.from_numpy(a, "a"), SpikeTensor.from_numpy(b, "b")
    outputs = model({"a": ta, "b": tb})
    assert list(outputs) == ["output0"]
    np.testing.assert_allclose(outputs["output0"].numpy(), a + b, rtol=0, atol=0)
    # given outputs are written in place and nothing is returned
    out = SpikeTensor.from_numpy(np.zeros((64, 33), np.float32))
    assert model({"a": ta, "b": tb}, {"output0": out}) is None
    np.testing.assert_array_equal(out.numpy(), a + b)


def test_mixed_numerics(neff):
    model = SpikeModel.load_from_neff(neff("mixed"), name="mix")
    assert model.name == "mix"
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    y = np.array([3, -7, 11], np.int32)
    out = model({"x": SpikeTensor.from_numpy(x), "y": SpikeTensor.from_numpy(y)})
    np.testing.assert_allclose(out["output0"].numpy(), x + y.astype(np.float32), rtol=1e-6)
    assert out["output1"].numpy().dtype == np.int32
    np.testing.assert_array_equal(out["output1"].numpy(), [y.sum()])


def test_inplace_alias(neff):
    model = SpikeModel.load_from_neff(neff("inplace"))
    assert model.output_tensors_info["output0"].alias_of == "x"
    x = SpikeTensor.from_numpy(np.arange(16, dtype=np.float32), "x")
    assert model.allocate_output_tensors() == []  # the aliased output is not allocated
    out = model({"x": x})
    assert out["output0"] is x
    np.testing.assert_array_equal(x.numpy(), np.arange(16) + 1)
    model({"x": x}, {})  # aliased outputs may be left out
    np.testing.assert_array_equal(x.numpy(), np.arange(16) + 2)
    # an explicitly given output tensor receives the result
    y = SpikeTensor.from_numpy(np.zeros(16, np.float32))
    model({"x": x}, {"output0": y})
    np.testing.assert_array_equal(y.numpy(), np.arange(16) + 3)


def test_aliased_input_by_its_original_name(neff):
    """The original stack names an aliased input '<name>.must_alias_input';
    SpikeModel takes that name as well as the plain one, in __call__ and
    submit, and refuses the two together."""
    model = SpikeModel.load_from_neff(neff("inplace"))
    x = SpikeTensor.from_numpy(np.arange(16, dtype=np.float32), "x")
    out = model({"x.must_alias_input": x})
    assert out["output0"] is x
    np.testing.assert_array_equal(x.numpy(), np.arange(16) + 1)
    model({"x.must_alias_input": x}, {})
    model.submit({"x.must_alias_input": x}, {}).wait()
    np.testing.assert_array_equal(x.numpy(), np.arange(16) + 3)
    with pytest.raises(ValueError, match=r"input 'x' of model 'inplace' is given twice "
                                         r"\(as 'x' and 'x.must_alias_input'\)"):
        model({"x": x, "x.must_alias_input": x})
    # only an aliased input has the second name
    noop = SpikeModel.load_from_neff(neff("noop"))
    with pytest.raises(ValueError, match=r"unknown input name\(s\) \['x.must_alias_input'\]"):
        noop({"x.must_alias_input": SpikeTensor.from_numpy(np.zeros(1, np.float32))})


def test_allocate_output_tensors(neff):
    model = SpikeModel.load_from_neff(neff("mixed"))
    outs = model.allocate_output_tensors()
    assert [(o.name, o.shape, o.dtype.name) for o in outs] == [
        ("output0", (2, 3), "float32"), ("output1", (1,), "int32")]


def test_model_on_other_core(neff):
    model = SpikeModel.load_from_neff(neff("noop"), core_id=5)
    x = SpikeTensor.from_numpy(np.array([4.0], np.float32), core_id=5)
    out = model({"x": x})
    assert out["output0"].core_id == 5 and out["output0"].numpy()[0] == 4.0
    assert "core_id=5" in repr(model)


def test_model_unload(neff):
    model = SpikeModel.load_from_neff(neff("noop"))
    model.unload()
    with pytest.raises(SpikeError, match="Model 'noop' is unloaded"):
        model({"x": SpikeTensor.from_numpy(np.zeros(1, np.float32))})


# ---- SpikeModel: validation -------------------------------------------------


@pytest.fixture
def mixed(neff):
    model = SpikeModel.load_from_neff(neff("mixed"))
    x = SpikeTensor.from_numpy(np.zeros((2, 3), np.float32), "x")
    y = SpikeTensor.from_numpy(np.zeros(3, np.int32), "y")
    return model, x, y


def test_unknown_input_name(mixed):
    model, x, y = mixed
    with pytest.raises(ValueError) as info:
        model({"x": x, "y": y, "z": y})
    msg = str(info.value)
    assert "unknown input name(s) ['z']" in msg and "expected inputs: ['x', 'y']" in msg


def test_missing_input(mixed):
    model, x, _ = mixed
    with pytest.raises(ValueError, match=r"missing input\(s\) \['y'\] for model 'mixed'"):
        model({"x": x})


def test_unknown_and_missing_outputs(mixed):
    model, x, y = mixed
    outs = {o.name: o for o in model.allocate_output_tensors()}
    with pytest.raises(ValueError, match=r"unknown output name\(s\) \['out'\].*expected outputs: "
                                         r"\['output0', 'output1'\]"):
        model({"x": x, "y": y}, {**outs, "out": outs["output0"]})
    with pytest.raises(ValueError, match=r"missing output\(s\) \['output1'\]"):
        model({"x": x, "y": y}, {"output0": outs["output0"]})


def test_wrong_shape(mixed):
    model, _, y = mixed
    x = SpikeTensor.from_numpy(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"input 'x' of model 'mixed': expected shape \(2, 3\), "
                                         r"got \(3, 2\)"):
        model({"x": x, "y": y})


def test_wrong_dtype(mixed):
    model, x, _ = mixed
    y = SpikeTensor.from_numpy(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="input 'y' of model 'mixed': expected dtype int32, "
                                         "got float32"):
        model({"x": x, "y": y})
    out0 = SpikeTensor.from_numpy(np.zeros((2, 3), np.float64))
    out1 = SpikeTensor.from_numpy(np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="output 'output0'.*expected dtype float32, got float64"):
        model({"x": x, "y": SpikeTensor.from_numpy(np.zeros(3, np.int32))},
              {"output0": out0, "output1": out1})


def test_wrong_core(mixed):
    model, x, _ = mixed
    y = SpikeTensor.from_numpy(np.zeros(3, np.int32), core_id=1)
    with pytest.raises(ValueError, match="input 'y' of model 'mixed': expected a tensor on core 0, "
                                         "got core 1"):
        model({"x": x, "y": y})


def test_wrong_container_types(mixed):
    model, x, y = mixed
    with pytest.raises(TypeError, match="inputs must be a dict"):
        model([x, y])
    with pytest.raises(TypeError, match="input 'x' of model 'mixed' must be a SpikeTensor, got "
                                        "NrtTensor"):
        model({"x": x.tensor_ref, "y": y})


def test_freed_input_in_model_call(mixed):
    model, x, y = mixed
    x.free()
    with pytest.raises(SpikeError, match="Tensor 'x' is freed"):
        model({"x": x, "y": y})


# ---- trace and benchmark ----------------------------------------------------


def test_save_trace_default_name(neff, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = SpikeModel.load_from_neff(neff("add"))
    a = SpikeTensor.from_numpy(np.ones((64, 33), np.float32))
    model({"a": a, "b": a}, save_trace=True)
    doc = json.loads((tmp_path / "add.ntff").read_text())
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    execs = [e for e in doc["traceEvents"] if e.get("cat") == "nc_exec_running"]
    assert len(execs) == 1 and execs[0]["name"] == "add"
    model({"a": a, "b": a}, save_trace=True, ntff_name=tmp_path / "custom.json")
    assert "traceEvents" in json.loads((tmp_path / "custom.json").read_text())


@pytest.mark.parametrize("mode", ["host", "device"])
def test_benchmark_modes(neff, mode):
    model = SpikeModel.load_from_neff(neff("add"))
    a = SpikeTensor.from_numpy(np.ones((64, 33), np.float32))
    result = model.benchmark({"a": a, "b": a}, warmup_iter=2, benchmark_iter=6, mode=mode)
    assert isinstance(result, BenchmarkResult)
    assert result.iterations == 6 and result.warmup_iterations == 2
    assert len(result.durations_ms) == 6
    assert all(d > 0 for d in result.durations_ms)
    assert result.min_ms <= result.mean_ms <= result.max_ms
    out = SpikeTensor.from_numpy(np.zeros((64, 33), np.float32))
    model.benchmark({"a": a, "b": a}, {"output0": out}, warmup_iter=0, benchmark_iter=1, mode=mode)
    np.testing.assert_array_equal(out.numpy(), 2.0)


def test_benchmark_argument_errors(neff):
    model = SpikeModel.load_from_neff(neff("noop"))
    x = SpikeTensor.from_numpy(np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="mode must be 'device' or 'host'"):
        model.benchmark({"x": x}, mode="gpu")
    with pytest.raises(ValueError, match="benchmark_iter must be >= 1"):
        model.benchmark({"x": x}, benchmark_iter=0)
    with pytest.raises(ValueError, match="warmup_iter must be >= 0"):
        model.benchmark({"x": x}, warmup_iter=-1)
    with pytest.raises(TypeError, match="benchmark_iter must be an int"):
        model.benchmark({"x": x}, benchmark_iter=2.0)


def test_exec_durations_from_events():
    from spike.spike_model import _exec_durations_ms

    ev = lambda tid, phase, ns, name="k", kind="nc_exec_running": {  # noqa: E731
        "event_type": kind, "phase": phase, "tracking_id": tid, "name": name,
        "data": {"nc_timestamp_ns": ns}}
    events = [ev(2, "start", 5_000_000), ev(1, "start", 1_000_000), ev(1, "stop", 3_000_000),
              ev(3, "start", 0, kind="tensor_write"), ev(3, "stop", 99_000_000, kind="tensor_write"),
              ev(2, "stop", 9_000_000), ev(4, "start", 10_000_000, name="other"),
              ev(4, "stop", 11_000_000, name="other"), ev(5, "stop", 1)]
    assert _exec_durations_ms(events, "k") == [2.0, 4.0]
    assert _exec_durations_ms(events) == [2.0, 4.0, 1.0]


def test_model_default_ntff_name(neff):
    model = SpikeModel.load_from_neff(neff("noop"))
    assert model._default_ntff_name() == "noop.ntff"
    assert os.path.basename(model.neff_path) == "noop.neff"
