"""Spike.execute_at: one execution with the tensors given by device address."""
from __future__ import annotations

import numpy as np
import pytest

from spike._spike import NrtError, SpikeError

N = 1024  # the sleep NEFF: output0 = x + 1 over float32[1024] after sleeping ms[0] ms


def test_addresses_in_model_order(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    assert list(raw_spike.get_tensor_info(m).inputs) == ["x", "ms"]
    # x and ms as parts of one allocation; the output at an offset inside another
    buf = raw_spike.allocate_tensor(4 * N + 64, name="buf")
    out = raw_spike.allocate_tensor(4 * N + 128, name="out")
    x = np.arange(N, dtype=np.float32)
    raw_spike.tensor_write(buf, x.tobytes() + np.zeros(1, np.int32).tobytes())
    raw_spike.execute_at(m, [buf.va, buf.va + 4 * N, out.va + 128])
    got = np.frombuffer(raw_spike.tensor_read(out, 128, 4 * N), np.float32)
    assert np.array_equal(got, x + 1)
    raw_spike.execute_at(m, (buf.va, buf.va + 4 * N, out.va + 128))   # any sequence


def test_errors(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    buf = raw_spike.allocate_tensor(4 * N + 4, name="buf")
    out = raw_spike.allocate_tensor(4 * N, name="out")
    ok = [buf.va, buf.va + 4 * N, out.va]
    with pytest.raises(ValueError, match=r"model 'sleep' takes 3 addresses \(its inputs, then its "
                                         r"outputs\), got 2"):
        raw_spike.execute_at(m, ok[:2])
    with pytest.raises(TypeError, match=r"addresses\[1\] must be a non-negative int \(a device "
                                        r"address\) or None, got 'x'"):
        raw_spike.execute_at(m, [buf.va, "x", out.va])
    with pytest.raises(TypeError, match=r"addresses\[0\] must be a non-negative int"):
        raw_spike.execute_at(m, [-1, buf.va, out.va])
    with pytest.raises(TypeError, match="addresses must be a sequence of ints"):
        raw_spike.execute_at(m, 5)
    with pytest.raises(NrtError, match="missing output tensor 'output0' for model 'sleep': its "
                                       "address is NULL"):
        raw_spike.execute_at(m, [buf.va, buf.va + 4 * N, None])
    host = np.zeros(N, np.float32)
    with pytest.raises(NrtError, match="input 'x' of model 'sleep': address 0x[0-9a-f]+ is not "
                                       "inside a live allocation on core 0"):
        raw_spike.execute_at(m, [host.ctypes.data, buf.va + 4 * N, out.va])
    with pytest.raises(NrtError, match=r"output 'output0' of model 'sleep' needs 4096 bytes at "
                                       r"0x[0-9a-f]+, past the end of allocation 'out'"):
        raw_spike.execute_at(m, [buf.va, buf.va + 4 * N, out.va + 4])
    raw_spike.free_tensor(out)
    with pytest.raises(NrtError, match="is not inside a live allocation"):
        raw_spike.execute_at(m, ok)         # freed memory is refused, never touched
    raw_spike.unload_model(m)
    with pytest.raises(SpikeError, match="Model 'sleep' is unloaded"):
        raw_spike.execute_at(m, ok)


def test_runs_after_queued_work(raw_spike, neff):
    """A busy core: execute_at waits for the submitted execution that writes its input."""
    m = raw_spike.load_model(neff("sleep"))
    x = raw_spike.allocate_tensor(4 * N, name="x")
    ms = raw_spike.allocate_tensor(4, name="ms")
    mid = raw_spike.allocate_tensor(4 * N, name="mid")
    out = raw_spike.allocate_tensor(4 * N, name="out")
    raw_spike.tensor_write(x, np.zeros(N, np.float32).tobytes())
    raw_spike.tensor_write(ms, np.array([30], np.int32).tobytes())
    ev = raw_spike.execute_async(m, {"x": x, "ms": ms}, {"output0": mid})
    raw_spike.execute_at(m, [mid.va, ms.va, out.va])
    assert ev.done
    got = np.frombuffer(raw_spike.tensor_read(out), np.float32)
    assert np.array_equal(got, np.full(N, 2, np.float32))

