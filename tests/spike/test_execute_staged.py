"""Spike.execute_staged: host writes, one execution and host reads in one call."""
from __future__ import annotations

import time

import numpy as np
import pytest

from spike._spike import NrtError, SpikeError

N = 1024  # the sleep NEFF: output0 = x + 1 over float32[1024] after sleeping ms[0] ms


def io(s):
    x = s.allocate_tensor(4 * N, name="x")
    ms = s.allocate_tensor(4, name="ms")
    out = s.allocate_tensor(4 * N, name="out")
    return {"x": x, "ms": ms}, {"output0": out}


def test_writes_execute_reads(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = io(raw_spike)
    x = np.arange(N, dtype=np.float32)
    ms = np.full(1, 20, np.int32)            # the kernel sleeps 20 ms
    got = np.zeros(N, np.float32)
    t0 = time.perf_counter_ns()
    times = raw_spike.execute_staged(
        m, ins, outs,
        [(ins["x"], x.ctypes.data, x.nbytes), (ins["ms"], ms.ctypes.data, 4)],
        [(outs["output0"], got.ctypes.data, got.nbytes)])
    wall = time.perf_counter_ns() - t0
    assert np.array_equal(got, x + 1)
    # (write_ns, execute_ns, read_ns): phases of this call, in nanoseconds
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert times[1] >= 19_000_000               # the execution phase holds the 20 ms sleep
    assert sum(times) <= wall                   # and the phases fit inside the call
    ms[0] = 0
    raw_spike.execute_staged(m, ins, outs, [(ins["ms"], ms.ctypes.data, 4)], [])
    # partial copies: only the first half written and read back
    y = np.full(N // 2, 7, np.float32)
    half = np.zeros(N // 2, np.float32)
    raw_spike.execute_staged(m, ins, outs, [(ins["x"], y.ctypes.data, y.nbytes)],
                             [(outs["output0"], half.ctypes.data, half.nbytes)])
    assert np.array_equal(half, y + 1)
    raw_spike.execute_staged(m, ins, outs, [], [])    # nothing to copy: just the execution


def test_errors(raw_spike, neff):
    m = raw_spike.load_model(neff("sleep"))
    ins, outs = io(raw_spike)
    buf = np.zeros(2 * N, np.float32)
    with pytest.raises(TypeError, match=r"writes\[0\] must be a tuple \(NrtTensor, address, "
                                        r"nbytes\)"):
        raw_spike.execute_staged(m, ins, outs, [ins["x"]], [])
    with pytest.raises(TypeError, match=r"reads\[1\] must be a tuple"):
        raw_spike.execute_staged(m, ins, outs, [],
                                 [(outs["output0"], buf.ctypes.data, 4), (1, 2)])
    with pytest.raises(TypeError, match="writes must be an NrtTensor, got int"):
        raw_spike.execute_staged(m, ins, outs, [(3, buf.ctypes.data, 4)], [])
    with pytest.raises(SpikeError, match="writes of 8192 bytes at offset 0 exceeds the tensor "
                                         "bound: tensor 'x' has 4096 bytes"):
        raw_spike.execute_staged(m, ins, outs, [(ins["x"], buf.ctypes.data, buf.nbytes)], [])
    with pytest.raises(ValueError, match=r"writes\[0\] has a NULL host address"):
        raw_spike.execute_staged(m, ins, outs, [(ins["x"], 0, 4)], [])
    with pytest.raises(TypeError, match="writes and reads must be sequences"):
        raw_spike.execute_staged(m, ins, outs, 5, [])
    with pytest.raises(NrtError, match="output0"):
        raw_spike.execute_staged(m, ins, {}, [], [])
