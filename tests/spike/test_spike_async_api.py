"""SpikeAsync: the original's asyncio-style API over Spike.execute_async."""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from spike import SpikeAsync, SpikeAsyncFuture, SpikeAsyncTask, SpikeStream
from spike._spike import Spike

N = 1024  # the sleep NEFF: output0 = x + 1 over float32[1024] after sleeping ms[0] ms


@pytest.fixture
def sa(fresh_spike):
    s = SpikeAsync()
    yield s
    s.close()


def sleep_tensors(sa: SpikeAsync, ms: int):
    x = sa.allocate_tensor(4 * N, name="x")
    t = sa.allocate_tensor(4, name="ms")
    out = sa.allocate_tensor(4 * N, name="out")
    sa.tensor_write(t, np.array([ms], np.int32)).wait()
    return x, t, out


def test_coroutine_pipeline_write_execute_read(sa, neff):
    m = sa.load_model(neff("sleep"))
    x, t, out = sleep_tensors(sa, 1)

    async def step(data):
        await sa.tensor_write(x, data)
        await sa.execute(m, sa.create_tensor_set({"x": x, "ms": t}),
                         sa.create_tensor_set({"output0": out}))
        return np.frombuffer(await sa.tensor_read(out), np.float32)

    for k in range(3):
        data = np.full(N, k, np.float32) * np.arange(N, dtype=np.float32)
        task = sa.submit(step(data))
        assert isinstance(task, SpikeAsyncTask)
        assert np.array_equal(task.wait(timeout=30), data + 1)


def test_execute_returns_before_the_kernel_finishes(sa, neff):
    m = sa.load_model(neff("sleep"))
    x, t, out = sleep_tensors(sa, 300)
    sa.tensor_write(x, np.arange(N, dtype=np.float32)).wait()
    t0 = time.perf_counter()
    fut = sa.execute(m, {"x": x, "ms": t}, {"output0": out})
    submitted = time.perf_counter() - t0
    assert isinstance(fut, SpikeAsyncFuture) and not fut.done()
    assert fut.wait(timeout=30) is None and fut.done()
    finished = time.perf_counter() - t0
    assert finished >= 0.29 and submitted < finished   # done only once the kernel slept
    # a read after the queued execution sees its bytes (the runtime orders it)
    dest = np.empty(N, np.float32)
    assert sa.tensor_read(out, dest).wait() is dest
    assert np.array_equal(dest, np.arange(N) + 1.0)


def test_deps_and_streams_order_operations(sa, neff):
    m = sa.load_model(neff("sleep"))
    x, t, out = sleep_tensors(sa, 50)
    x2 = sa.allocate_tensor(4 * N)
    out2 = sa.allocate_tensor(4 * N)
    sa.tensor_write(x, np.zeros(N, np.float32)).wait()
    order = []

    async def mark(tag):
        order.append(tag)

    # explicit deps: the second execution reads what the first wrote
    a = sa.execute(m, {"x": x, "ms": t}, {"output0": out})
    b = sa.execute(m, {"x": out, "ms": t}, {"output0": out2}, deps=[a])
    assert isinstance(b, SpikeAsyncTask)
    after = sa.custom_op(mark("after-b"), deps=[b])
    after.wait(timeout=30)
    assert order == ["after-b"] and a.done() and b.done()
    assert np.array_equal(np.frombuffer(sa.tensor_read(out2).wait(), np.float32), np.full(N, 2.0))

    # a stream chains everything made while it is current
    with sa.create_stream() as s:
        assert isinstance(s, SpikeStream)
        sa.tensor_write(x2, np.full(N, 5, np.float32))
        sa.execute(m, {"x": x2, "ms": t}, {"output0": out})
        sa.custom_op(mark("stream-end"))
        ev = s.record_event()
    other = sa.create_stream()
    other.wait_event(ev)
    sa.custom_op(mark("other"), stream=other)
    other.wait(timeout=30)
    assert order == ["after-b", "stream-end", "other"]
    assert np.array_equal(np.frombuffer(sa.tensor_read(out).wait(), np.float32), np.full(N, 6.0))

    futs = [sa.execute(m, {"x": x, "ms": t}, {"output0": out}) for _ in range(3)]
    assert sa.submit(sa.all(futs)).wait(timeout=30) == [None, None, None]


def test_errors_reach_the_future(sa, neff):
    m = sa.load_model(neff("fails"))
    x, out = sa.allocate_tensor(16), sa.allocate_tensor(16)
    fut = sa.execute(m, {"x": x}, {"output0": out})
    with pytest.raises(Exception, match="deliberate kernel failure"):
        fut.wait(timeout=30)
    # refused at submission (a missing input) also lands on the future
    with pytest.raises(Exception, match="x"):
        sa.execute(m, {}, {"output0": out}).wait(timeout=30)
    with pytest.raises(ValueError, match="cannot save a trace"):
        sa.execute(m, {"x": x}, {"output0": out}, save_trace=True)
    with pytest.raises(ValueError, match="size 99 outside the 16 bytes"):
        sa.tensor_write(x, bytes(16), size=99).wait()
    with pytest.raises(TypeError, match="needs a coroutine, not int"):
        sa.submit(3)
    with pytest.raises(TypeError, match="must map a str to an NrtTensor"):
        sa.create_tensor_set({"x": 1})
    with pytest.raises(TypeError, match="SpikeStream of this SpikeAsync"):
        sa.tensor_read(x, stream=object())
    with pytest.raises(ValueError, match="timeout must be None or a number"):
        sa.tensor_read(x).wait(timeout=-1)


def test_wait_timeout_and_wait_inside_the_loop(sa, neff):
    m = sa.load_model(neff("sleep"))
    x, t, out = sleep_tensors(sa, 400)
    fut = sa.execute(m, {"x": x, "ms": t}, {"output0": out})
    with pytest.raises(TimeoutError, match="not done after 0.01 s"):
        fut.wait(timeout=0.01)
    fut.wait(timeout=30)

    async def bad():
        return sa.tensor_read(x).wait()

    with pytest.raises(RuntimeError, match="await it instead"):
        sa.submit(bad()).wait()


def test_close_and_a_given_runtime(fresh_spike, neff):
    raw = Spike()
    try:
        sa = SpikeAsync(spike=raw)
        assert sa.spike is raw
        sa.close()
        sa.close()                                   # idempotent
        assert not raw.closed                        # not ours to close
        with pytest.raises(RuntimeError, match="SpikeAsync is closed"):
            sa.tensor_read(raw.allocate_tensor(4))
        coro = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="SpikeAsync is closed"):
            sa.submit(coro)
        coro.close()
    finally:
        raw.close()
    with pytest.raises(TypeError, match="needs a spike._spike.Spike"):
        SpikeAsync(spike="no")
    with SpikeAsync() as own:
        pass
    assert own.spike.closed
