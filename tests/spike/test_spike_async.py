"""Asynchronous execution (Spike.execute_async, ExecutionEvent, SpikeModel.submit),
ordering of synchronous copies after queued work, and the copy / memset /
2-D (pitched) copy methods of Spike."""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

from spike import ExecutionEvent, SpikeModel, SpikeTensor
from spike._spike import NrtError, Spike, SpikeError

from spike_helpers import quiet_reset

N = 1024  # the sleep NEFF: output0 = x + 1 over float32[1024] after sleeping ms[0] ms


def sleep_io(s: Spike, ms: int, out=None):
    x = s.allocate_tensor(4 * N, name="x")
    s.tensor_write_from_pybuffer(x, np.arange(N, dtype=np.float32))
    t = s.allocate_tensor(4, name="ms")
    s.tensor_write_from_pybuffer(t, np.array([ms], np.int32))
    if out is None:
        out = s.allocate_tensor(4 * N, name="out")
        s.tensor_memset(out, 0)
    return {"x": x, "ms": t}, {"output0": out}


def read_f32(s: Spike, tensor, count=N, offset=0):
    buf = np.empty(count, np.float32)
    s.tensor_read_to_pybuffer(tensor, buf, offset=offset, size=4 * count)
    return buf


# ---- execute_async and ExecutionEvent ---------------------------------------


def test_execute_async_wait_and_done(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 150)
    t0 = time.perf_counter()
    ev = raw_spike.execute_async(m, ins, outs)
    assert isinstance(ev, ExecutionEvent)
    assert time.perf_counter() - t0 < 0.1  # returned before the kernel finished
    assert ev.done is False
    assert isinstance(ev.id, int) and ev.id > 0
    assert ev.model_name == "sleep"
    assert repr(ev) == f"ExecutionEvent(id={ev.id}, model='sleep', done=False)"
    assert ev.wait() is None
    assert ev.done is True
    assert ev.wait(timeout=0) is None  # repeatable
    assert np.array_equal(read_f32(raw_spike, outs["output0"]), np.arange(N) + 1.0)
    ev2 = raw_spike.execute_async(m, ins, outs)
    assert ev2.id > ev.id
    ev2.wait(timeout=5.0)
    assert repr(ev2).endswith("done=True)")


def test_sync_read_orders_after_pending_execution(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 150)
    ev = raw_spike.execute_async(m, ins, outs)
    # no wait: the read waits for the execution writing its bytes
    assert np.array_equal(read_f32(raw_spike, outs["output0"]), np.arange(N) + 1.0)
    assert raw_spike.tensor_read(outs["output0"], 0, 4) == np.float32(1.0).tobytes()
    ev.wait()
    # writing an input the pending execution has yet to read waits for it too
    ev = raw_spike.execute_async(m, ins, outs)
    raw_spike.tensor_write_from_pybuffer(ins["x"], np.full(N, 100, np.float32))
    ev.wait()
    assert np.array_equal(read_f32(raw_spike, outs["output0"]), np.arange(N) + 1.0)


def test_disjoint_bytes_of_one_allocation_do_not_wait(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    block = raw_spike.allocate_tensor(2 * 4 * N, name="block")
    raw_spike.tensor_memset(block, 0)
    out = raw_spike.slice_from_tensor(block, 0, 4 * N, name="out")
    spare = raw_spike.slice_from_tensor(block, 4 * N, 4 * N, name="spare")
    ins, outs = sleep_io(raw_spike, 400, out=out)
    t0 = time.perf_counter()
    ev = raw_spike.execute_async(m, ins, outs)
    raw_spike.tensor_write_from_pybuffer(spare, np.ones(N, np.float32))
    raw_spike.tensor_memset_2d(block, 7, 4 * N, 64, 16, 8)
    raw_spike.tensor_copy(spare, 0, block, 4 * N + 2048, 64)
    assert not ev.done and time.perf_counter() - t0 < 0.3
    # the last float of `out` overlaps: this waits for the execution
    raw_spike.tensor_write(block, b"\xab" * 8, offset=4 * N - 4)
    assert ev.done
    assert raw_spike.tensor_read(block, 4 * N - 4, 8) == b"\xab" * 8
    ev.wait()


def test_wait_timeout(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 300)
    ev = raw_spike.execute_async(m, ins, outs)
    with pytest.raises(TimeoutError) as info:
        ev.wait(timeout=0.01)
    assert str(info.value) == f"execution {ev.id} of model 'sleep' is not done after 0.01 s"
    with pytest.raises(TimeoutError, match=r"is not done after 0 s$"):
        ev.wait(0)
    ev.wait(timeout=10)
    ev.wait(timeout=0)


def test_wait_argument_errors(raw_spike, neff):
    m = raw_spike.load_model(neff("noop"))
    x = raw_spike.allocate_tensor(4)
    ev = raw_spike.execute_async(m, {"x": x}, {"output0": x})
    with pytest.raises(TypeError, match="^timeout must be a number of seconds or None, got str$"):
        ev.wait("1")
    with pytest.raises(TypeError, match="^timeout must be a number of seconds or None, got bool$"):
        ev.wait(True)
    with pytest.raises(ValueError,
                       match=r"^timeout must be a non-negative number of seconds or None, got -1$"):
        ev.wait(-1)
    with pytest.raises(ValueError, match=r"got nan$"):
        ev.wait(float("nan"))
    ev.wait(float("inf"))
    with pytest.raises(TypeError, match="cannot create 'spike._spike.ExecutionEvent' instances"):
        ExecutionEvent()


def test_execution_error_raised_by_wait(raw_spike, neff):
    m = raw_spike.load_model(neff("fails"))
    x = raw_spike.allocate_tensor(16)
    y = raw_spike.allocate_tensor(16)
    with pytest.raises(NrtError) as sync_info:
        raw_spike.execute(m, {"x": x}, {"output0": y})
    ev = raw_spike.execute_async(m, {"x": x}, {"output0": y})
    for _ in range(2):  # the same error each time
        with pytest.raises(NrtError) as info:
            ev.wait()
        assert str(info.value) == str(sync_info.value)
        assert info.value.status_name == "NRT_EXEC_COMPLETED_WITH_ERR"
        assert info.value.status_code == 1004
        assert "deliberate kernel failure" in str(info.value)
    assert ev.done


def test_execute_async_argument_errors(raw_spike, neff):
    m = raw_spike.load_model(neff("add"))
    a = raw_spike.allocate_tensor(8448, name="a")
    with pytest.raises(NrtError, match="missing input tensor 'b' for model 'add'; it expects "
                                       "inputs: a, b"):
        raw_spike.execute_async(m, {"a": a}, {"output0": a})
    with pytest.raises(TypeError, match="^model must be an NrtModel, got str$"):
        raw_spike.execute_async("add", {}, {})
    with pytest.raises(TypeError, match="^inputs must be a mapping of str to NrtTensor, got int$"):
        raw_spike.execute_async(m, 1, {})
    with pytest.raises(TypeError, match=r"^outputs\['output0'\] must be an NrtTensor, got int$"):
        raw_spike.execute_async(m, {"a": a, "b": a}, {"output0": 1})
    freed = raw_spike.allocate_tensor(8448, name="gone")
    raw_spike.free_tensor(freed)
    with pytest.raises(SpikeError, match=r"Tensor 'gone' is freed \(passed as inputs\['b'\]\)"):
        raw_spike.execute_async(m, {"a": a, "b": freed}, {"output0": a})
    raw_spike.unload_model(m)
    with pytest.raises(SpikeError, match="Model 'add' is unloaded"):
        raw_spike.execute_async(m, {"a": a, "b": a}, {"output0": a})


def test_event_keeps_tensors_and_model_alive(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 100)
    out = outs["output0"]
    before = raw_spike.memory_stats()["active_allocations"]
    ev = raw_spike.execute_async(m, dict(ins), {"output0": out})
    ins.clear()  # the event and the runtime keep the tensors
    raw_spike.unload_model(m)  # unloaded once the execution is done
    assert not m.loaded
    ev.wait()
    assert np.array_equal(read_f32(raw_spike, out), np.arange(N) + 1.0)
    del ev
    gc.collect()
    assert raw_spike.memory_stats()["active_allocations"] == before - 2


def test_dropping_unwaited_events_is_safe(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 20)
    base = raw_spike.memory_stats()["active_allocations"]
    for _ in range(20):
        raw_spike.execute_async(m, ins, outs)  # dropped at once
    # the sync read is ordered after all of them
    assert np.array_equal(read_f32(raw_spike, outs["output0"]), np.arange(N) + 1.0)
    gc.collect()
    assert raw_spike.memory_stats()["active_allocations"] == base


def test_close_with_pending_events(fresh_spike, neff):
    s = Spike()
    m = s.load_model(neff("sleep"))
    ins, outs = sleep_io(s, 100)
    done = s.execute_async(m, ins, outs)
    done.wait()
    pending = s.execute_async(m, ins, outs)
    dropped = s.execute_async(m, ins, outs)
    del dropped
    s.close()  # drains the queue
    assert pending.done
    with pytest.raises(SpikeError, match=f"^Spike Error: execution {pending.id} of model 'sleep' "
                                         "was not waited for before its runtime was closed"):
        pending.wait()
    assert done.wait() is None  # collected before close: kept
    del pending, done
    gc.collect()


def test_reset_with_pending_submit(fresh_spike, neff):
    model = SpikeModel.load_from_neff(neff("sleep"))
    x = SpikeTensor.from_numpy(np.arange(N, dtype=np.float32))
    ms = SpikeTensor.from_numpy(np.array([50], np.int32))
    out = SpikeTensor.empty((N,), np.float32)
    ev = model.submit({"x": x, "ms": ms}, {"output0": out})
    quiet_reset()
    assert ev.done
    with pytest.raises(SpikeError, match="its result is lost"):
        ev.wait()


def test_wait_releases_the_gil(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 200)
    ev = raw_spike.execute_async(m, ins, outs)
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    ev.wait()
    stop.set()
    th.join()
    assert len(ticks) > 20


def test_concurrent_waiters(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = sleep_io(raw_spike, 100)
    ev = raw_spike.execute_async(m, ins, outs)
    errors = []

    def waiter():
        try:
            ev.wait()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and ev.done and ev.wait() is None


# ---- SpikeModel.submit -----------------------------------------------------------


def test_submit(neff):
    model = SpikeModel.load_from_neff(neff("sleep"))
    x = SpikeTensor.from_numpy(np.arange(N, dtype=np.float32))
    ms = SpikeTensor.from_numpy(np.array([50], np.int32))
    out = SpikeTensor.empty((N,), np.float32)
    ev = model.submit({"x": x, "ms": ms}, {"output0": out})
    assert isinstance(ev, ExecutionEvent)
    assert np.array_equal(out.numpy(), np.arange(N) + 1.0)  # ordered after the execution
    ev.wait()
    # the slow path (a non-dict mapping) validates the same way
    from types import MappingProxyType
    ev = model.submit(MappingProxyType({"x": x, "ms": ms}), {"output0": out})
    ev.wait()


def test_submit_validation(neff):
    model = SpikeModel.load_from_neff(neff("add"))
    a = SpikeTensor.from_numpy(np.ones((64, 33), np.float32))
    out = SpikeTensor.empty((64, 33), np.float32)
    with pytest.raises(TypeError, match=r"^SpikeModel.submit of model 'add' needs its outputs: "
                                        r"pass a dict of output name -> SpikeTensor "
                                        r"\(allocate_output_tensors\(\) makes them\)$"):
        model.submit({"a": a, "b": a}, None)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'outputs'"):
        model.submit({"a": a, "b": a})
    with pytest.raises(ValueError, match=r"^missing input\(s\) \['b'\] for model 'add'; "
                                         r"expected inputs: \['a', 'b'\]$"):
        model.submit({"a": a}, {"output0": out})
    with pytest.raises(ValueError, match=r"^unknown output name\(s\) \['z'\] for model 'add'"):
        model.submit({"a": a, "b": a}, {"output0": out, "z": out})
    with pytest.raises(ValueError, match=r"^missing output\(s\) \['output0'\] for model 'add'"):
        model.submit({"a": a, "b": a}, {})
    bad = SpikeTensor.from_numpy(np.ones((33, 64), np.float32))
    with pytest.raises(ValueError, match=r"^input 'b' of model 'add': expected shape \(64, 33\), "
                                         r"got \(33, 64\)$"):
        model.submit({"a": a, "b": bad}, {"output0": out})
    with pytest.raises(TypeError, match="^input 'a' of model 'add' must be a SpikeTensor, got "
                                        "int$"):
        model.submit({"a": 1, "b": a}, {"output0": out})
    model.submit({"a": a, "b": a}, {"output0": out}).wait()
    assert out.numpy()[0, 0] == 2.0
    model.unload()
    with pytest.raises(SpikeError, match="is unloaded"):
        model.submit({"a": a, "b": a}, {"output0": out})


def test_submit_aliased_output(neff):
    model = SpikeModel.load_from_neff(neff("inplace"))
    x = SpikeTensor.from_numpy(np.zeros(16, np.float32), name="x")
    model.submit({"x": x}, {}).wait()
    model.submit({"x": x}, {}).wait()
    assert np.array_equal(x.numpy(), np.full(16, 2, np.float32))


# ---- tensor_copy / tensor_memset --------------------------------------------------


def test_tensor_copy_and_memset(raw_spike):
    a = raw_spike.allocate_tensor(64, name="a")
    b = raw_spike.allocate_tensor(32, name="b")
    raw_spike.tensor_write(a, bytes(range(64)))
    raw_spike.tensor_copy(a, 8, b, 4, 16)
    raw_spike.tensor_memset(b, 0xEE, 0, 4)
    raw_spike.tensor_memset(b, 1, 20)  # size 0: to the end
    assert raw_spike.tensor_read(b) == b"\xee" * 4 + bytes(range(8, 24)) + b"\x01" * 12
    raw_spike.tensor_copy(a, 0, a, 1, 8)  # overlap is fine
    assert raw_spike.tensor_read(a, 0, 9) == bytes([0, 0, 1, 2, 3, 4, 5, 6, 7])
    raw_spike.tensor_copy(a, 64, b, 32, 0)  # empty, at the ends


def test_tensor_copy_and_memset_errors(raw_spike):
    a = raw_spike.allocate_tensor(64, name="a")
    b = raw_spike.allocate_tensor(32, name="b")
    with pytest.raises(SpikeError, match=r"^Spike Error: copy source of 16 bytes at offset 56 "
                                         r"exceeds the tensor bound: tensor 'a' has 64 bytes$"):
        raw_spike.tensor_copy(a, 56, b, 0, 16)
    with pytest.raises(SpikeError, match=r"^Spike Error: copy destination of 16 bytes at offset "
                                         r"20 exceeds the tensor bound: tensor 'b' has 32 bytes$"):
        raw_spike.tensor_copy(a, 0, b, 20, 16)
    with pytest.raises(ValueError, match="^src_offset must be a non-negative integer, got -1$"):
        raw_spike.tensor_copy(a, -1, b, 0, 1)
    with pytest.raises(ValueError, match="^dst_offset must be a non-negative integer, got -2$"):
        raw_spike.tensor_copy(a, 0, b, -2, 1)
    with pytest.raises(ValueError, match="^size must be a non-negative integer, got -3$"):
        raw_spike.tensor_copy(a, 0, b, 0, -3)
    with pytest.raises(TypeError, match="^src must be an NrtTensor, got bytes$"):
        raw_spike.tensor_copy(b"x", 0, b, 0, 1)
    with pytest.raises(TypeError, match="^dst must be an NrtTensor, got NoneType$"):
        raw_spike.tensor_copy(a, 0, None, 0, 1)
    with pytest.raises(SpikeError, match=r"^Spike Error: memset of 8 bytes at offset 60 exceeds "
                                         r"the tensor bound: tensor 'a' has 64 bytes$"):
        raw_spike.tensor_memset(a, 0, 60, 8)
    with pytest.raises(SpikeError, match=r"^Spike Error: memset of 0 bytes at offset 65 exceeds"):
        raw_spike.tensor_memset(a, 0, 65)
    with pytest.raises(ValueError, match="^value must be a byte value from 0 to 255, got 256$"):
        raw_spike.tensor_memset(a, 256)
    with pytest.raises(ValueError, match="^value must be a byte value from 0 to 255, got -1$"):
        raw_spike.tensor_memset_2d(a, -1, 0, 8, 8, 2)
    with pytest.raises(ValueError, match="^offset must be a non-negative integer, got -1$"):
        raw_spike.tensor_memset(a, 0, -1)
    with pytest.raises(ValueError, match="^size must be a non-negative integer, got -1$"):
        raw_spike.tensor_memset(a, 0, 0, -1)
    raw_spike.free_tensor(b)
    with pytest.raises(SpikeError, match="Tensor 'b' is freed"):
        raw_spike.tensor_copy(a, 0, b, 0, 1)
    with pytest.raises(SpikeError, match="Tensor 'b' is freed"):
        raw_spike.tensor_memset(b, 0)


# ---- 2-D copies --------------------------------------------------------------------


def test_write_read_2d(raw_spike):
    t = raw_spike.allocate_tensor(256, name="t")
    raw_spike.tensor_memset(t, 0)
    rows = np.arange(1, 33, dtype=np.uint8).reshape(4, 8)
    # pad 4 rows of 8 bytes into rows of 32 (dst_pitch), src_pitch defaults to row_bytes
    raw_spike.tensor_write_2d(t, rows, dst_offset=0, dst_pitch=32, row_bytes=8, rows=4)
    dev = np.frombuffer(raw_spike.tensor_read(t, 0, 128), np.uint8).reshape(4, 32)
    assert np.array_equal(dev[:, :8], rows) and not dev[:, 8:].any()
    # read back packed (dst_pitch defaults to row_bytes) and into a wider buffer
    packed = np.zeros((4, 8), np.uint8)
    raw_spike.tensor_read_2d(t, packed, src_offset=0, src_pitch=32, row_bytes=8, rows=4)
    assert np.array_equal(packed, rows)
    wide = np.full((4, 12), 0xEE, np.uint8)
    raw_spike.tensor_read_2d(t, wide, 0, 32, 8, 4, dst_pitch=12)
    assert np.array_equal(wide[:, :8], rows) and (wide[:, 8:] == 0xEE).all()
    # a column block out of a wider host array (src_pitch), and one repeated row
    host = np.arange(64, dtype=np.uint8).reshape(4, 16)
    raw_spike.tensor_write_2d(t, host, 128, 8, 4, 4, src_pitch=16)
    block = np.zeros((4, 4), np.uint8)
    raw_spike.tensor_read_2d(t, block, 128, 8, 4, 4)
    assert np.array_equal(block, host[:, :4])
    raw_spike.tensor_memset(t, 0, 192)
    raw_spike.tensor_write_2d(t, np.full(4, 9, np.uint8), 192, 8, 4, 8, src_pitch=0)
    assert raw_spike.tensor_read(t, 192, 64) == (b"\x09" * 4 + b"\x00" * 4) * 8
    # any C-contiguous buffer works
    raw_spike.tensor_write_2d(t, bytearray(b"ab" * 4), 0, 2, 2, 4)
    raw_spike.tensor_write_2d(t, memoryview(b"xyxy"), 0, 2, 2, 2)
    raw_spike.tensor_write_2d(t, b"", 256, 0, 0, 0)  # empty


def test_copy_and_memset_2d(raw_spike):
    src = raw_spike.allocate_tensor(64, name="src")
    dst = raw_spike.allocate_tensor(128, name="dst")
    raw_spike.tensor_write(src, bytes(range(64)))
    raw_spike.tensor_memset(dst, 0)
    raw_spike.tensor_copy_2d(src, 0, 16, dst, 0, 32, 16, 4)  # pad rows to a bucket
    raw_spike.tensor_memset_2d(dst, 0xFF, 16, 32, 16, 4)  # fill the padding
    got = np.frombuffer(raw_spike.tensor_read(dst), np.uint8).reshape(4, 32)
    assert np.array_equal(got[:, :16], np.arange(64, dtype=np.uint8).reshape(4, 16))
    assert (got[:, 16:] == 0xFF).all()
    # overlapping with equal pitches behaves like memmove
    raw_spike.tensor_copy_2d(src, 0, 16, src, 4, 16, 8, 4)
    got = np.frombuffer(raw_spike.tensor_read(src), np.uint8).reshape(4, 16)
    assert np.array_equal(got[:, 4:12], np.arange(64, dtype=np.uint8).reshape(4, 16)[:, :8])


def test_2d_errors(raw_spike):
    t = raw_spike.allocate_tensor(128, name="x")
    u = raw_spike.allocate_tensor(64, name="y")
    buf = np.zeros(256, np.uint8)
    with pytest.raises(ValueError, match=r"^buffer of 255 bytes is too small: 4 rows of 16 bytes "
                                         r"at src_pitch 80 need 256 bytes$"):
        raw_spike.tensor_write_2d(t, np.zeros(255, np.uint8), 0, 16, 16, 4, src_pitch=80)
    with pytest.raises(ValueError, match=r"^buffer of 32 bytes is too small: 4 rows of 16 bytes "
                                         r"at dst_pitch 16 need 64 bytes$"):
        raw_spike.tensor_read_2d(t, np.zeros(32, np.uint8), 0, 16, 16, 4)
    with pytest.raises(NrtError, match=r"^NRT Error NRT_INVALID\(2\): write_2d of 4 rows of 16 "
                                       r"bytes \(dst_pitch 32\) at offset 40 spans bytes \[40, 152\) "
                                       r"and exceeds the tensor bound of 'x' \(128 bytes\)$"):
        raw_spike.tensor_write_2d(t, buf, 40, 32, 16, 4)
    with pytest.raises(NrtError, match=r"write_2d: dst_pitch 8 is smaller than row_bytes 16 "
                                       r"\(destination rows would overlap\)$"):
        raw_spike.tensor_write_2d(t, buf, 0, 8, 16, 4)
    with pytest.raises(NrtError, match=r"write_2d: 4 rows of 16 bytes at dst_pitch "
                                       r"9223372036854775807 span more than 2\^64 bytes$"):
        raw_spike.tensor_write_2d(t, buf, 0, 2**63 - 1, 16, 4)
    with pytest.raises(NrtError, match=r"read_2d: 4 rows of 16 bytes at src_pitch "
                                       r"9223372036854775807 span more than 2\^64 bytes$"):
        raw_spike.tensor_read_2d(t, buf, 0, 2**63 - 1, 16, 4)
    with pytest.raises(NrtError, match=r"read_2d: dst_pitch 4 is smaller than row_bytes 16"):
        raw_spike.tensor_read_2d(t, buf, 0, 16, 16, 4, dst_pitch=4)
    with pytest.raises(NrtError, match=r"read_2d of 3 rows of 16 bytes \(src_pitch 48\) at offset "
                                       r"32 spans bytes \[32, 144\) and exceeds the tensor bound "
                                       r"of 'x' \(128 bytes\)$"):
        raw_spike.tensor_read_2d(t, buf, 32, 48, 16, 3)
    with pytest.raises(NrtError, match=r"copy_2d destination of 4 rows of 16 bytes \(dst_pitch 16\)"
                                       r" at offset 16 spans bytes \[16, 80\) and exceeds the "
                                       r"tensor bound of 'y' \(64 bytes\)$"):
        raw_spike.tensor_copy_2d(t, 0, 16, u, 16, 16, 16, 4)
    with pytest.raises(NrtError, match=r"copy_2d source of 3 rows of 16 bytes \(src_pitch 32\) "
                                       r"at offset 64 spans bytes \[64, 144\)"):
        raw_spike.tensor_copy_2d(t, 64, 32, u, 0, 16, 16, 3)
    with pytest.raises(NrtError, match=r"copy_2d: the source rows \[0, 48\) of 'x' and the "
                                       r"destination rows \[8, 88\) of 'x' overlap with different "
                                       r"pitches \(src_pitch 16, dst_pitch 32\)"):
        raw_spike.tensor_copy_2d(t, 0, 16, t, 8, 32, 16, 3)
    with pytest.raises(NrtError, match=r"memset_2d: pitch 15 is smaller than row_bytes 16"):
        raw_spike.tensor_memset_2d(t, 0, 0, 15, 16, 2)
    with pytest.raises(NrtError, match=r"memset_2d of 2 rows of 16 bytes \(pitch 16\) at offset "
                                       r"100 spans bytes \[100, 132\)"):
        raw_spike.tensor_memset_2d(t, 0, 100, 16, 16, 2)
    # Python-side argument checks
    for name, call in (
        ("dst_offset", lambda: raw_spike.tensor_write_2d(t, buf, -1, 16, 16, 1)),
        ("dst_pitch", lambda: raw_spike.tensor_write_2d(t, buf, 0, -1, 16, 1)),
        ("row_bytes", lambda: raw_spike.tensor_write_2d(t, buf, 0, 16, -1, 1)),
        ("rows", lambda: raw_spike.tensor_write_2d(t, buf, 0, 16, 16, -1)),
        ("src_pitch", lambda: raw_spike.tensor_write_2d(t, buf, 0, 16, 16, 1, src_pitch=-1)),
        ("src_offset", lambda: raw_spike.tensor_read_2d(t, buf, -1, 16, 16, 1)),
        ("src_pitch", lambda: raw_spike.tensor_read_2d(t, buf, 0, -1, 16, 1)),
        ("dst_pitch", lambda: raw_spike.tensor_read_2d(t, buf, 0, 16, 16, 1, dst_pitch=-5)),
        ("src_offset", lambda: raw_spike.tensor_copy_2d(t, -1, 16, u, 0, 16, 16, 1)),
        ("src_pitch", lambda: raw_spike.tensor_copy_2d(t, 0, -1, u, 0, 16, 16, 1)),
        ("dst_offset", lambda: raw_spike.tensor_copy_2d(t, 0, 16, u, -1, 16, 16, 1)),
        ("dst_pitch", lambda: raw_spike.tensor_copy_2d(t, 0, 16, u, 0, -1, 16, 1)),
        ("row_bytes", lambda: raw_spike.tensor_copy_2d(t, 0, 16, u, 0, 16, -1, 1)),
        ("rows", lambda: raw_spike.tensor_copy_2d(t, 0, 16, u, 0, 16, 16, -1)),
        ("offset", lambda: raw_spike.tensor_memset_2d(t, 0, -1, 16, 16, 1)),
        ("pitch", lambda: raw_spike.tensor_memset_2d(t, 0, 0, -1, 16, 1)),
        ("row_bytes", lambda: raw_spike.tensor_memset_2d(t, 0, 0, 16, -1, 1)),
        ("rows", lambda: raw_spike.tensor_memset_2d(t, 0, 0, 16, 16, -1)),
    ):
        with pytest.raises(ValueError, match=f"^{name} must be a non-negative integer, got -"):
            call()
    with pytest.raises(TypeError, match="^src_pitch must be an int or None, got float$"):
        raw_spike.tensor_write_2d(t, buf, 0, 16, 16, 1, src_pitch=1.5)
    with pytest.raises(TypeError, match="^dst_pitch must be an int or None, got str$"):
        raw_spike.tensor_read_2d(t, buf, 0, 16, 16, 1, dst_pitch="16")
    with pytest.raises(TypeError, match=r"^buffer must support the buffer protocol \(bytes, "
                                        r"bytearray, memoryview, numpy array\), got list$"):
        raw_spike.tensor_write_2d(t, [1, 2], 0, 16, 16, 1)
    with pytest.raises(ValueError, match=r"^buffer must be C-contiguous"):
        raw_spike.tensor_write_2d(t, np.zeros((8, 8), np.uint8)[:, ::2], 0, 16, 16, 1)
    with pytest.raises(ValueError, match="^buffer must be writable to read into it, got a "
                                         "read-only bytes$"):
        raw_spike.tensor_read_2d(t, b"\0" * 64, 0, 16, 16, 1)
    with pytest.raises(TypeError, match="^tensor must be an NrtTensor, got int$"):
        raw_spike.tensor_memset_2d(3, 0, 0, 16, 16, 1)
    with pytest.raises(TypeError, match="^src must be an NrtTensor, got int$"):
        raw_spike.tensor_copy_2d(3, 0, 16, u, 0, 16, 16, 1)
    with pytest.raises(TypeError, match="^dst must be an NrtTensor, got int$"):
        raw_spike.tensor_copy_2d(t, 0, 16, 3, 0, 16, 16, 1)
    raw_spike.free_tensor(u)
    with pytest.raises(SpikeError, match="Tensor 'y' is freed"):
        raw_spike.tensor_write_2d(u, buf, 0, 16, 16, 1)
    with pytest.raises(SpikeError, match="Tensor 'y' is freed"):
        raw_spike.tensor_read_2d(u, buf, 0, 16, 16, 1)


def test_copies_after_close(fresh_spike):
    s = Spike()
    t = s.allocate_tensor(64, name="t")
    s.close()
    msg = "^Spike Error: the runtime is closed"
    with pytest.raises(SpikeError, match=msg):
        s.tensor_write_2d(t, b"\0" * 16, 0, 16, 16, 1)
    with pytest.raises(SpikeError, match=msg):
        s.tensor_copy(t, 0, t, 8, 8)
    with pytest.raises(SpikeError, match=msg):
        s.tensor_memset_2d(t, 0, 0, 16, 16, 1)
    with pytest.raises(SpikeError, match=msg):
        s.execute_async(None, {}, {})
