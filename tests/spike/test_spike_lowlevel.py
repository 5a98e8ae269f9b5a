"""The low-level spike._spike API: Spike, NrtTensor, NrtModel, tensor I/O."""
from __future__ import annotations

import gc
import struct

import numpy as np
import pytest

from spike._spike import (
    ModelTensorInfo,
    NrtError,
    NrtModel,
    NrtTensor,
    Spike,
    SpikeError,
    SpikeRuntimeError,
    TensorMetadata,
    ensure_usable,
)

from spike_helpers import quiet_reset

# ---- lifecycle -------------------------------------------------------------


def test_close_returns_zero_and_is_idempotent(fresh_spike):
    s = Spike()
    assert not s.closed
    assert s.close() == 0
    assert s.closed
    assert s.close() == 0
    assert repr(s) == "Spike(closed)"


def test_only_one_live_spike(raw_spike):
    with pytest.raises(SpikeError, match="^Spike Error: a Spike runtime is already active"):
        Spike()
    raw_spike.close()
    again = Spike()  # allowed once the first is closed
    again.close()


def test_spike_options_and_properties(fresh_spike):
    s = Spike(verbose_level=2, core_memory_bytes=8 << 20, num_workers=1)
    try:
        assert s.verbose_level == 2
        assert s.core_memory_bytes == 8 << 20
        assert s.num_workers == 1
        assert s.core_count == Spike.get_visible_neuron_core_count()
        assert "workers=1" in repr(s)
    finally:
        s.close()


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"core_memory_bytes": 0}, ValueError, "core_memory_bytes must be a positive"),
    ({"core_memory_bytes": -5}, ValueError, "core_memory_bytes must be a positive"),
    ({"core_memory_bytes": "1G"}, TypeError, "core_memory_bytes must be an int"),
    ({"num_workers": 0}, ValueError, "num_workers must be a positive int"),
    ({"num_workers": 1.5}, TypeError, "num_workers must be an int"),
    ({"verbose_level": "x"}, TypeError, "integer"),
])
def test_spike_bad_options(fresh_spike, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Spike(**kwargs)


def test_visible_core_count_reads_env(monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-2,5")
    assert Spike.get_visible_neuron_core_count() == 4
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES")
    assert Spike.get_visible_neuron_core_count() == 32
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "zero")
    with pytest.raises(NrtError, match="zero"):
        Spike.get_visible_neuron_core_count()


def test_runtime_outlives_deleted_spike_while_tensors_live(fresh_spike):
    s = Spike()
    t = s.allocate_tensor(16, name="keep")
    del s
    gc.collect()
    # The tensor keeps the runtime; it is still the live one.
    with pytest.raises(SpikeError, match="already active"):
        Spike()
    assert t.va != 0 and not t.freed
    del t
    gc.collect()
    s2 = Spike()  # the runtime went with the last tensor
    s2.close()


def test_objects_after_close_raise(fresh_spike, neff):
    s = Spike()
    t = s.allocate_tensor(64, name="after")
    m = s.load_model(neff("add"))
    s.close()
    assert "runtime closed" in repr(t)
    assert "runtime closed" in repr(m)
    assert not m.loaded
    with pytest.raises(SpikeError, match="runtime is closed"):
        s.allocate_tensor(4)
    with pytest.raises(SpikeError, match="runtime is closed"):
        s.tensor_read(t)
    with pytest.raises(SpikeError, match="Tensor 'after' belongs to a runtime that is closed"):
        ensure_usable(t)
    with pytest.raises(SpikeError, match="closed"):
        t.va
    with pytest.raises(SpikeError, match="closed"):
        ensure_usable(m)
    s2 = Spike()
    try:
        with pytest.raises(SpikeError, match="closed"):
            s2.tensor_read(t)
        with pytest.raises(SpikeError, match="closed"):
            s2.execute(m, {}, {})
        with pytest.raises(SpikeError, match="closed"):
            s2.free_tensor(t)
    finally:
        s2.close()
    del t, m  # destructors after close are no-ops
    gc.collect()


def test_types_not_constructible():
    with pytest.raises(TypeError):
        NrtTensor()
    with pytest.raises(TypeError):
        NrtModel()


def test_error_hierarchy():
    assert issubclass(SpikeRuntimeError, RuntimeError)
    assert issubclass(SpikeError, SpikeRuntimeError)
    assert issubclass(NrtError, SpikeRuntimeError)
    assert NrtError("x").status_code is None


# ---- tensors ---------------------------------------------------------------


def test_allocate_and_properties(raw_spike):
    t = raw_spike.allocate_tensor(100, core_id=1, name="weights")
    assert (t.size, t.core_id, t.name, t.is_slice, t.freed) == (100, 1, "weights", False, False)
    assert isinstance(t.va, int) and t.va % 64 == 0
    assert repr(t) == "NrtTensor(name='weights', size=100, core_id=1)"
    assert raw_spike.allocate_tensor(8).name == "unnamed_tensor"
    assert raw_spike.allocate_tensor(0).size == 0


def test_write_read_roundtrip(raw_spike):
    t = raw_spike.allocate_tensor(16)
    raw_spike.tensor_write(t, b"0123456789abcdef")
    assert raw_spike.tensor_read(t) == b"0123456789abcdef"
    raw_spike.tensor_write(t, b"XY", offset=4)
    assert raw_spike.tensor_read(t, offset=2, size=6) == b"23XY67"
    assert raw_spike.tensor_read(t, offset=12) == b"cdef"
    assert raw_spike.tensor_read(t, offset=16) == b""
    raw_spike.tensor_write(t, bytearray(b"zz"), 14)
    assert raw_spike.tensor_read(t, 14) == b"zz"
    raw_spike.tensor_write(t, memoryview(b"mm"))
    assert raw_spike.tensor_read(t, 0, 2) == b"mm"


def test_pybuffer_roundtrip(raw_spike):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = raw_spike.allocate_tensor(a.nbytes, name="buf")
    raw_spike.tensor_write_from_pybuffer(t, a)
    out = np.zeros_like(a)
    raw_spike.tensor_read_to_pybuffer(t, out)
    np.testing.assert_array_equal(out, a)
    # offsets and partial reads
    part = np.zeros(2, dtype=np.float32)
    raw_spike.tensor_read_to_pybuffer(t, part, offset=8 * 4, size=8)
    np.testing.assert_array_equal(part, [8, 9])
    raw_spike.tensor_write_from_pybuffer(t, np.array([-1, -2], np.float32), offset=4)
    assert struct.unpack("<3f", raw_spike.tensor_read(t, 0, 12)) == (0.0, -1.0, -2.0)
    # a larger buffer reads the rest of the tensor
    big = np.zeros(20, dtype=np.float32)
    raw_spike.tensor_read_to_pybuffer(t, big, offset=40)
    np.testing.assert_array_equal(big[:2], [10, 11])
    # bytearray and memoryview work as well
    ba = bytearray(4)
    raw_spike.tensor_read_to_pybuffer(t, ba, offset=4, size=4)
    assert struct.unpack("<f", ba)[0] == -1.0


def test_pybuffer_errors(raw_spike):
    t = raw_spike.allocate_tensor(64, name="buf")
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    with pytest.raises(ValueError, match="C-contiguous"):
        raw_spike.tensor_write_from_pybuffer(t, a[:, ::4])
    with pytest.raises(ValueError, match="C-contiguous"):
        raw_spike.tensor_read_to_pybuffer(t, np.zeros((4, 8), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="writable"):
        raw_spike.tensor_read_to_pybuffer(t, b"0" * 64)
    ro = np.zeros(16, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="writable"):
        raw_spike.tensor_read_to_pybuffer(t, ro)
    with pytest.raises(TypeError, match="buffer protocol"):
        raw_spike.tensor_write_from_pybuffer(t, [1, 2, 3])
    with pytest.raises(ValueError, match="too small"):
        raw_spike.tensor_read_to_pybuffer(t, np.zeros(4, np.float32))


@pytest.mark.parametrize("call, figures", [
    (lambda s, t: s.tensor_write(t, b"x" * 17), "17 bytes at offset 0"),
    (lambda s, t: s.tensor_write(t, b"x" * 4, offset=13), "4 bytes at offset 13"),
    (lambda s, t: s.tensor_write(t, b"", offset=17), "0 bytes at offset 17"),
    (lambda s, t: s.tensor_read(t, offset=10, size=7), "7 bytes at offset 10"),
    (lambda s, t: s.tensor_read(t, offset=17), "at offset 17"),
    (lambda s, t: s.tensor_write_from_pybuffer(t, np.zeros(5, np.float32)), "20 bytes at offset 0"),
    (lambda s, t: s.tensor_write_from_pybuffer(t, np.zeros(2, np.float32), 12), "8 bytes at offset 12"),
    (lambda s, t: s.tensor_read_to_pybuffer(t, np.zeros(8, np.float32), 8, 12), "12 bytes at offset 8"),
    (lambda s, t: s.slice_from_tensor(t, 8, 9), "9 bytes at offset 8"),
    (lambda s, t: s.slice_from_tensor(t, 20), "at offset 20"),
])
def test_out_of_bounds(raw_spike, call, figures):
    t = raw_spike.allocate_tensor(16, name="small")
    with pytest.raises(SpikeError) as info:
        call(raw_spike, t)
    msg = str(info.value)
    assert msg.startswith("Spike Error: ")
    assert "exceeds the tensor bound" in msg
    assert figures in msg
    assert "'small' has 16 bytes" in msg


@pytest.mark.parametrize("call, match", [
    (lambda s, t: s.allocate_tensor(-1), "size must be a non-negative integer, got -1"),
    (lambda s, t: s.allocate_tensor(8, core_id=-1), "core_id must be a non-negative"),
    (lambda s, t: s.tensor_write(t, b"x", offset=-1), "offset must be a non-negative"),
    (lambda s, t: s.tensor_read(t, size=-3), "size must be a non-negative integer, got -3"),
    (lambda s, t: s.tensor_read(t, offset=-3), "offset must be a non-negative"),
    (lambda s, t: s.slice_from_tensor(t, -1), "offset must be a non-negative"),
    (lambda s, t: s.tensor_read_to_pybuffer(t, bytearray(16), size=-1), "size must be"),
    (lambda s, t: s.memory_stats(-2), "core_id must be a non-negative"),
])
def test_negative_arguments(raw_spike, call, match):
    t = raw_spike.allocate_tensor(16)
    with pytest.raises(ValueError, match=match):
        call(raw_spike, t)


@pytest.mark.parametrize("call", [
    lambda s, t: s.allocate_tensor("16"),
    lambda s, t: s.allocate_tensor(1.5),
    lambda s, t: s.allocate_tensor(16, name=3),
    lambda s, t: s.tensor_write(t, "text"),
    lambda s, t: s.tensor_write("t", b"x"),
    lambda s, t: s.tensor_read(None),
    lambda s, t: s.free_tensor(42),
    lambda s, t: s.slice_from_tensor(object()),
    lambda s, t: s.get_tensor_info(t),
    lambda s, t: s.unload_model(t),
    lambda s, t: s.load_model(123),
])
def test_wrong_types(raw_spike, call):
    t = raw_spike.allocate_tensor(16)
    with pytest.raises(TypeError):
        call(raw_spike, t)


def test_core_out_of_range_is_nrt_error(raw_spike):
    with pytest.raises(NrtError, match="core 40 is not visible") as info:
        raw_spike.allocate_tensor(16, core_id=40)
    assert info.value.status_name == "NRT_LOAD_NOT_ENOUGH_NC"
    with pytest.raises(NrtError, match="NRT_LOAD_NOT_ENOUGH_NC"):
        raw_spike.memory_stats(core_id=99)


def test_slices(raw_spike):
    t = raw_spike.allocate_tensor(16, name="base")
    raw_spike.tensor_write(t, bytes(range(16)))
    s = raw_spike.slice_from_tensor(t, offset=4, size=8, name="win")
    assert (s.size, s.is_slice, s.name, s.core_id) == (8, True, "win", 0)
    assert s.va == t.va + 4
    assert raw_spike.tensor_read(s) == bytes(range(4, 12))
    raw_spike.tensor_write(s, b"\xff", offset=7)
    assert raw_spike.tensor_read(t, 11, 1) == b"\xff"
    rest = raw_spike.slice_from_tensor(t, 10)
    assert rest.size == 6 and rest.name == "unnamed_tensor"
    assert raw_spike.slice_from_tensor(t).size == 16
    # a slice keeps the memory alive after the source is freed
    raw_spike.free_tensor(t)
    assert raw_spike.tensor_read(s, 0, 2) == bytes([4, 5])
    # slice of a slice
    inner = raw_spike.slice_from_tensor(s, 2, 2)
    assert raw_spike.tensor_read(inner) == bytes([6, 7])
    with pytest.raises(SpikeError, match="exceeds the tensor bound"):
        raw_spike.tensor_read(s, 0, 9)


def test_use_after_free(raw_spike, neff):
    t = raw_spike.allocate_tensor(16, name="gone")
    raw_spike.free_tensor(t)
    assert t.freed
    assert "freed" in repr(t)
    assert t.size == 16 and t.name == "gone"  # metadata stays readable
    for call in (
        lambda: raw_spike.tensor_read(t),
        lambda: raw_spike.tensor_write(t, b"x"),
        lambda: raw_spike.tensor_write_from_pybuffer(t, b"x"),
        lambda: raw_spike.tensor_read_to_pybuffer(t, bytearray(1)),
        lambda: raw_spike.slice_from_tensor(t),
        lambda: raw_spike.free_tensor(t),
        lambda: t.va,
        lambda: ensure_usable(t),
    ):
        with pytest.raises(SpikeError, match="^Spike Error: Tensor 'gone' is freed"):
            call()
    m = raw_spike.load_model(neff("noop"))
    out = raw_spike.allocate_tensor(4)
    with pytest.raises(SpikeError, match="Tensor 'gone' is freed"):
        raw_spike.execute(m, {"x": t}, {"output0": out})


def test_memory_stats(raw_spike):
    before = raw_spike.memory_stats()
    assert set(before) == {
        "core", "capacity_bytes", "allocated_bytes", "peak_allocated_bytes", "reserved_bytes",
        "peak_reserved_bytes", "active_allocations", "total_allocations", "total_frees",
        "oom_count", "free_blocks", "largest_free_block"}
    t = raw_spike.allocate_tensor(1000)
    after = raw_spike.memory_stats(core_id=0)
    assert after["allocated_bytes"] >= before["allocated_bytes"] + 1000
    assert after["active_allocations"] == before["active_allocations"] + 1
    raw_spike.free_tensor(t)
    freed = raw_spike.memory_stats()
    assert freed["total_frees"] == before["total_frees"] + 1
    assert freed["peak_allocated_bytes"] >= after["allocated_bytes"]
    raw_spike.memory_reset_peak()
    assert raw_spike.memory_stats()["peak_allocated_bytes"] == freed["allocated_bytes"]
    assert raw_spike.memory_stats(3)["core"] == 3


def test_tensor_deleted_frees_memory(raw_spike):
    base = raw_spike.memory_stats()["active_allocations"]
    tensors = [raw_spike.allocate_tensor(256) for _ in range(10)]
    assert raw_spike.memory_stats()["active_allocations"] == base + 10
    del tensors
    gc.collect()
    assert raw_spike.memory_stats()["active_allocations"] == base


# ---- models ----------------------------------------------------------------


def test_load_model_and_tensor_info(raw_spike, neff):
    path = neff("mixed")
    m = raw_spike.load_model(path, core_id=2)
    assert isinstance(m, NrtModel)
    assert (m.neff_path, m.name, m.core_id, m.rank_id, m.world_size) == (path, "mixed", 2, 0, 1)
    assert not m.is_collective and m.loaded
    assert repr(m) == f"NrtModel(name='mixed', neff_path={path!r}, core_id=2)"
    info = raw_spike.get_tensor_info(m)
    assert isinstance(info, ModelTensorInfo)
    assert list(info.inputs) == ["x", "y"] and list(info.outputs) == ["output0", "output1"]
    x = info.inputs["x"]
    assert isinstance(x, TensorMetadata)
    assert (x.size, x.dtype, x.shape, x.alias_of) == (24, "float32", [2, 3], None)
    assert type(x.shape) is list         # a list, as the original's
    assert info.inputs["y"].dtype == "int32"
    assert info.outputs["output1"] == TensorMetadata((4, "int32", [1], None))
    assert "TensorMetadata(size=24, dtype='float32', shape=[2, 3], alias_of=None)" in repr(info)


def test_load_model_options(raw_spike, neff):
    m = raw_spike.load_model(neff("add"), cc_enabled=True, rank_id=1, world_size=4, name="adder")
    assert (m.is_collective, m.rank_id, m.world_size, m.name) == (True, 1, 4, "adder")
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        raw_spike.load_model(neff("add"), world_size=0)
    with pytest.raises(ValueError, match=r"rank_id must be in \[0, world_size=2\)"):
        raw_spike.load_model(neff("add"), rank_id=2, world_size=2)
    with pytest.raises(ValueError, match="core_id"):
        raw_spike.load_model(neff("add"), core_id=-1)


def test_alias_of_in_tensor_info(raw_spike, neff):
    m = raw_spike.load_model(neff("inplace"))
    info = raw_spike.get_tensor_info(m)
    assert info.outputs["output0"].alias_of == "x"
    assert info.inputs["x"].alias_of is None


def test_unload_model(raw_spike, neff):
    m = raw_spike.load_model(neff("noop"))
    x = raw_spike.allocate_tensor(4)
    y = raw_spike.allocate_tensor(4)
    raw_spike.unload_model(m)
    assert not m.loaded and "unloaded" in repr(m)
    with pytest.raises(SpikeError, match="^Spike Error: Model 'noop' is unloaded"):
        raw_spike.execute(m, {"x": x}, {"output0": y})
    with pytest.raises(SpikeError, match="unloaded"):
        raw_spike.get_tensor_info(m)
    with pytest.raises(SpikeError, match="unloaded"):
        raw_spike.unload_model(m)
    with pytest.raises(SpikeError, match="unloaded"):
        raw_spike.benchmark(m, {"x": x}, {"output0": y})


def test_execute_add(raw_spike, neff):
    m = raw_spike.load_model(neff("add"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 33), dtype=np.float32)
    b = rng.standard_normal((64, 33), dtype=np.float32)
    ta, tb, to = (raw_spike.allocate_tensor(a.nbytes, name=n) for n in ("a", "b", "out"))
    raw_spike.tensor_write_from_pybuffer(ta, a)
    raw_spike.tensor_write(tb, b.tobytes())
    raw_spike.execute(m, {"a": ta, "b": tb}, {"output0": to})
    out = np.frombuffer(raw_spike.tensor_read(to), dtype=np.float32).reshape(64, 33)
    np.testing.assert_array_equal(out, a + b)


def test_execute_inplace_alias_default(raw_spike, neff):
    m = raw_spike.load_model(neff("inplace"))
    x = raw_spike.allocate_tensor(64)
    raw_spike.tensor_write_from_pybuffer(x, np.arange(16, dtype=np.float32))
    raw_spike.execute(m, {"x": x}, {})  # output0 defaults to its input
    out = np.zeros(16, np.float32)
    raw_spike.tensor_read_to_pybuffer(x, out)
    np.testing.assert_array_equal(out, np.arange(16) + 1)


def test_execute_argument_errors(raw_spike, neff):
    m = raw_spike.load_model(neff("noop"))
    x = raw_spike.allocate_tensor(4, name="x")
    y = raw_spike.allocate_tensor(4, name="y")
    with pytest.raises(TypeError, match="inputs must be a mapping of str to NrtTensor, got list"):
        raw_spike.execute(m, [x], {"output0": y})
    with pytest.raises(TypeError, match="outputs keys must be tensor names"):
        raw_spike.execute(m, {"x": x}, {0: y})
    with pytest.raises(TypeError, match=r"inputs\['x'\] must be an NrtTensor, got bytes"):
        raw_spike.execute(m, {"x": b"1234"}, {"output0": y})
    with pytest.raises(TypeError, match="model must be an NrtModel"):
        raw_spike.execute("noop", {"x": x}, {"output0": y})
    with pytest.raises(NrtError, match="unknown input tensor 'z'.*expects inputs: x") as info:
        raw_spike.execute(m, {"x": x, "z": x}, {"output0": y})
    assert info.value.status_name == "NRT_EXEC_BAD_INPUT"
    assert info.value.status_code == 1002
    with pytest.raises(NrtError, match="missing input tensor 'x'"):
        raw_spike.execute(m, {}, {"output0": y})
    with pytest.raises(NrtError, match="missing output tensor 'output0'"):
        raw_spike.execute(m, {"x": x}, {})
    big = raw_spike.allocate_tensor(8)
    with pytest.raises(NrtError, match="8 bytes but the model expects 4 bytes"):
        raw_spike.execute(m, {"x": big}, {"output0": y})
    other_core = raw_spike.allocate_tensor(4, core_id=1)
    with pytest.raises(NrtError, match="on core 1 but model 'noop' is loaded on core 0"):
        raw_spike.execute(m, {"x": other_core}, {"output0": y})


def test_benchmark_low_level(raw_spike, neff):
    m = raw_spike.load_model(neff("noop"))
    x = raw_spike.allocate_tensor(4)
    y = raw_spike.allocate_tensor(4)
    r = raw_spike.benchmark(m, {"x": x}, {"output0": y}, warmup_iterations=2,
                            benchmark_iterations=7)
    from spike import BenchmarkResult
    assert isinstance(r, BenchmarkResult)
    assert r.iterations == 7 and r.warmup_iterations == 2 and len(r.durations_ms) == 7
    assert 0 <= r.min_ms <= r.mean_ms <= r.max_ms
    d = np.asarray(r.durations_ms)
    assert (r.min_ms, r.max_ms) == (d.min(), d.max())
    assert r.mean_ms == pytest.approx(d.mean(), rel=1e-9)
    assert r.std_dev_ms == pytest.approx(d.std(), rel=1e-9, abs=1e-12)  # population std
    with pytest.raises(ValueError, match="benchmark_iterations must be between 1"):
        raw_spike.benchmark(m, {"x": x}, {"output0": y}, benchmark_iterations=0)
    with pytest.raises(ValueError, match="warmup_iterations must be a non-negative"):
        raw_spike.benchmark(m, {"x": x}, {"output0": y}, warmup_iterations=-1)


def test_benchmark_reports_kernel_failure(raw_spike, neff):
    m = raw_spike.load_model(neff("fails"))
    x = raw_spike.allocate_tensor(16)
    y = raw_spike.allocate_tensor(16)
    with pytest.raises(NrtError, match="deliberate kernel failure"):
        raw_spike.benchmark(m, {"x": x}, {"output0": y})


def test_save_trace_low_level(raw_spike, neff, tmp_path, monkeypatch):
    import json

    m = raw_spike.load_model(neff("noop"))
    x = raw_spike.allocate_tensor(4)
    y = raw_spike.allocate_tensor(4)
    path = tmp_path / "run.ntff"
    raw_spike.execute(m, {"x": x}, {"output0": y}, ntff_name=str(path), save_trace=True)
    doc = json.loads(path.read_text())
    assert any(e.get("name") == "noop" for e in doc["traceEvents"])
    monkeypatch.chdir(tmp_path)
    raw_spike.execute(m, {"x": x}, {"output0": y}, save_trace=True)
    assert "traceEvents" in json.loads((tmp_path / "profile.ntff").read_text())
    # without save_trace nothing is written
    raw_spike.execute(m, {"x": x}, {"output0": y}, ntff_name=str(tmp_path / "no.ntff"))
    assert not (tmp_path / "no.ntff").exists()
    with pytest.raises(NrtError):
        raw_spike.execute(m, {"x": x}, {"output0": y}, save_trace=True,
                          ntff_name=str(tmp_path / "missing_dir" / "t.ntff"))


def test_quiet_reset_helper_closes_singleton():
    import warnings

    import spike

    first = spike.get_spike_singleton()
    assert not first.closed
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # quiet: no UserWarning escapes
        quiet_reset()
    assert first.closed                         # the singleton's runtime is closed
    second = spike.get_spike_singleton()        # and a new one is made on demand
    try:
        assert second is not first and not second.closed
    finally:
        quiet_reset()


def test_write_only_changes(raw_spike):
    """tensor_write_from_pybuffer(only_changes=True) ends with the same bytes as
    a plain write, whatever differed."""
    t = raw_spike.allocate_tensor(100000, name="t")
    a = np.arange(25000, dtype=np.float32)
    raw_spike.tensor_write_from_pybuffer(t, a, only_changes=True)
    assert np.array_equal(np.frombuffer(raw_spike.tensor_read(t), np.float32), a)
    a[[0, 12345, 24999]] = -1
    raw_spike.tensor_write_from_pybuffer(t, a, only_changes=True)
    assert np.array_equal(np.frombuffer(raw_spike.tensor_read(t), np.float32), a)
    raw_spike.tensor_write_from_pybuffer(t, a[:10], 40, only_changes=True)
    b = a.copy()
    b[10:20] = a[:10]
    assert np.array_equal(np.frombuffer(raw_spike.tensor_read(t), np.float32), b)
    with pytest.raises(SpikeError, match="exceeds the tensor bound"):
        raw_spike.tensor_write_from_pybuffer(t, a, 4, only_changes=True)
