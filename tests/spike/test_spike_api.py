"""Package surface, BenchmarkResult math, dtype mapping, get_include."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

import spike
from spike import BenchmarkResult
from spike._dtypes import DTYPE_NAMES, dtype_name, to_numpy_dtype


def test_all_exports():
    assert set(spike.__all__) == {
        "SpikeModel", "SpikeTensor", "configure", "reset", "get_spike_singleton", "NrtError",
        "NrtIndexError",
        "SpikeError", "SpikeRuntimeError", "SystemTraceSession", "BenchmarkResult",
        "ModelTensorInfo", "NrtModel", "NrtTensor", "TensorMetadata", "ExecutionEvent",
        "SpikeAsync", "SpikeAsyncFuture", "SpikeAsyncTask", "SpikeStream", "SpikeProfiler"}
    for name in spike.__all__:
        assert getattr(spike, name) is not None
    import spike._spike as low
    for name in ("Spike", "NrtTensor", "NrtModel", "SystemTraceSession", "TensorMetadata",
                 "ModelTensorInfo", "SpikeError", "NrtError", "NrtIndexError", "SpikeRuntimeError",
                 "ExecutionEvent"):
        assert hasattr(low, name)
    assert low.TOTAL_CORES == 32 and low.NEFF_ABI_VERSION >= 1


def test_public_api_documented():
    from spike import spike_model, spike_singleton, spike_tensor
    for obj in (spike.SpikeModel, spike.SpikeTensor, spike.configure, spike.reset,
                spike.get_spike_singleton, spike.get_include, spike.BenchmarkResult,
                spike_model.SpikeModel.__call__, spike_model.SpikeModel.benchmark,
                spike_model.SpikeModel.load_from_neff, spike_model.SpikeModel.submit,
                spike.ExecutionEvent, spike.ExecutionEvent.wait, spike.ExecutionEvent.done,
                spike_tensor.SpikeTensor.from_numpy,
                spike_tensor.SpikeTensor.numpy, spike_tensor.SpikeTensor.write_from_numpy,
                spike_singleton.get_spike_singleton):
        assert obj.__doc__, obj
    from spike._spike import Spike
    for name in ("load_model", "execute", "benchmark", "tensor_read_to_pybuffer",
                 "memory_stats", "allocate_tensor", "execute_async", "tensor_copy",
                 "tensor_memset", "tensor_write_2d", "tensor_read_2d", "tensor_copy_2d",
                 "tensor_memset_2d"):
        assert getattr(Spike, name).__doc__.startswith(name)


def test_get_include():
    inc = spike.get_include()
    assert os.path.isabs(inc)
    assert os.path.isfile(os.path.join(inc, "nkrt", "neff_abi.h"))
    assert os.path.isfile(os.path.join(inc, "nkrt", "nkrt.h"))


def test_benchmark_result_math():
    r = BenchmarkResult.from_durations([1.0, 2.0, 3.0, 6.0], warmup_iterations=3)
    assert r.mean_ms == 3.0 and r.min_ms == 1.0 and r.max_ms == 6.0
    assert r.std_dev_ms == pytest.approx(math.sqrt(3.5))  # population, not sample
    assert r.std_dev_ms == pytest.approx(float(np.std([1.0, 2.0, 3.0, 6.0])))
    assert (r.iterations, r.warmup_iterations, r.durations_ms) == (4, 3, [1.0, 2.0, 3.0, 6.0])
    one = BenchmarkResult.from_durations([0.5])
    assert (one.mean_ms, one.std_dev_ms, one.iterations, one.warmup_iterations) == (0.5, 0.0, 1, 0)
    assert "4 iterations (+3 warmup): mean 3.0000 ms" in str(r)
    with pytest.raises(ValueError, match="at least one duration"):
        BenchmarkResult.from_durations([])
    with pytest.raises(ValueError, match="non-negative"):
        BenchmarkResult.from_durations([1.0, -1.0])
    direct = BenchmarkResult(1.0, 1.0, 1.0, 0.0, 1, 0, [1.0])
    assert direct == BenchmarkResult.from_durations([1.0])


def test_dtype_mapping():
    assert DTYPE_NAMES == ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16",
                           "int32", "uint32", "int64", "uint64", "bool", "float64",
                           "float8_e4m3fn", "float8_e5m2", "float8_e4m3")
    for name in DTYPE_NAMES:
        if name == "bfloat16" or name.startswith("float8"):
            pytest.importorskip("ml_dtypes")
        assert dtype_name(to_numpy_dtype(name)) == name
    assert to_numpy_dtype(np.float16) == np.float16
    with pytest.raises(TypeError, match="unsupported dtype 'complex128'"):
        dtype_name(np.complex128)


def test_reprs_are_readable(neff):
    m = spike.SpikeModel.load_from_neff(neff("noop"))
    assert repr(m).startswith("SpikeModel(name='noop'")
    assert repr(m.model_ref).startswith("NrtModel(name='noop'")
    assert repr(m.input_tensors_info["x"]) == (
        "spike._spike.TensorMetadata(size=4, dtype='float32', shape=[1], alias_of=None)")
    assert repr(spike.get_spike_singleton()).startswith("Spike(cores=")
