"""Threads: allocation, I/O and execution from many threads on two cores; the
GIL is released so executions on different cores overlap."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import spike
from spike import SpikeError, SpikeModel, SpikeTensor, SystemTraceSession


def run_threads(target, n):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_many_threads_alloc_free_execute(two_cores, neff):
    models = [SpikeModel.load_from_neff(neff("add"), core_id=c) for c in (0, 1)]
    s = spike.get_spike_singleton()
    base = [s.memory_stats(c)["active_allocations"] for c in (0, 1)]

    def work(i):
        core = i % 2
        model = models[core]
        rng = np.random.default_rng(i)
        for _ in range(25):
            a = rng.standard_normal((64, 33)).astype(np.float32)
            b = rng.standard_normal((64, 33)).astype(np.float32)
            ta = SpikeTensor.from_numpy(a, "a", core_id=core)
            tb = SpikeTensor.from_numpy(b, "b", core_id=core)
            out = model({"a": ta, "b": tb})["output0"]
            np.testing.assert_array_equal(out.numpy(), a + b)
            scratch = s.allocate_tensor(int(rng.integers(1, 5000)), core_id=core)
            s.tensor_write(scratch, b"\x01" * scratch.size)
            s.free_tensor(scratch)
            ta.free()

    run_threads(work, 8)
    import gc
    gc.collect()
    assert [s.memory_stats(c)["active_allocations"] for c in (0, 1)] == base


def spin_inputs(core, iters):
    x = SpikeTensor.from_numpy(np.full(256, 0.3, np.float32), core_id=core)
    n = SpikeTensor.from_numpy(np.array([iters], np.int32), core_id=core)
    return {"x": x, "n": n}


def calibrate(model, inputs):
    t0 = time.perf_counter()
    model(inputs)
    return time.perf_counter() - t0


def test_executions_on_two_cores_overlap(two_cores, neff):
    models = [SpikeModel.load_from_neff(neff("spin"), core_id=c) for c in (0, 1)]
    iters = 20000
    while calibrate(models[0], spin_inputs(0, iters)) < 0.05 and iters < 1 << 26:
        iters *= 2
    inputs = [spin_inputs(c, iters) for c in (0, 1)]
    with SystemTraceSession() as session:
        run_threads(lambda i: models[i](inputs[i]), 2)
    spans = {}
    for e in session.drain_events():
        if e["event_type"] == "nc_exec_running":
            spans.setdefault(e["nc_idx"], {})[e["phase"]] = e["data"]["nc_timestamp_ns"]
    assert set(spans) == {0, 1}
    (s0, e0), (s1, e1) = ((spans[c]["start"], spans[c]["stop"]) for c in (0, 1))
    overlap = min(e0, e1) - max(s0, s1)
    assert overlap > 0, f"executions on cores 0 and 1 did not overlap: {spans}"


def test_python_threads_run_while_executing(two_cores, neff):
    """The GIL is released during execute: a Python thread keeps counting."""
    model = SpikeModel.load_from_neff(neff("spin"))
    iters = 20000
    while calibrate(model, spin_inputs(0, iters)) < 0.1 and iters < 1 << 26:
        iters *= 2
    inputs = spin_inputs(0, iters)
    ticks = []
    done = threading.Event()

    def counter():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = threading.Thread(target=counter)
    t.start()
    time.sleep(0.005)
    start = len(ticks)
    model(inputs)
    during = len(ticks) - start
    done.set()
    t.join()
    assert during >= 5, f"only {during} ticks while a ~100 ms execution ran"


def test_reset_while_threads_execute(two_cores, neff):
    """Closing the runtime while threads execute never crashes: the threads
    either finish or get SpikeError."""
    models = [SpikeModel.load_from_neff(neff("add"), core_id=c) for c in (0, 1)]
    tensors = [{k: SpikeTensor.from_numpy(np.ones((64, 33), np.float32), core_id=c)
                for k in ("a", "b")} for c in (0, 1)]
    outs = [{"output0": SpikeTensor.from_numpy(np.zeros((64, 33), np.float32), core_id=c)}
            for c in (0, 1)]
    started = threading.Barrier(5)
    results = []

    def work(i):
        c = i % 2
        started.wait()
        try:
            while True:
                models[c](tensors[c], outs[c])
        except SpikeError as exc:
            results.append(str(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.05)
    with pytest.warns(UserWarning):
        spike.reset()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(results) == 4 and all("closed" in r for r in results)


def test_unload_while_executing_is_deferred(fresh_spike, neff):
    """unload_model during an execution on another thread: the model reads as
    unloaded at once, the running execution completes normally."""
    from spike._spike import Spike

    s = Spike()
    try:
        m = s.load_model(neff("spin"))
        x = s.allocate_tensor(1024)
        s.tensor_write_from_pybuffer(x, np.full(256, 0.3, np.float32))
        n = s.allocate_tensor(4)
        out = s.allocate_tensor(1024)
        iters = 20000
        while True:
            s.tensor_write_from_pybuffer(n, np.array([iters], np.int32))
            t0 = time.perf_counter()
            s.execute(m, {"x": x, "n": n}, {"output0": out})
            if time.perf_counter() - t0 > 0.1 or iters > 1 << 26:
                break
            iters *= 2
        outcome = []

        def run():
            try:
                s.execute(m, {"x": x, "n": n}, {"output0": out})
                outcome.append("ok")
            except Exception as exc:  # reported below
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.03)
        s.unload_model(m)
        assert not m.loaded
        with pytest.raises(SpikeError, match="unloaded"):
            s.execute(m, {"x": x, "n": n}, {"output0": out})
        thread.join(timeout=30)
        assert not thread.is_alive() and outcome == ["ok"]
    finally:
        s.close()


def test_custom_mapping_that_frees_tensor(raw_spike, neff):
    """A Mapping whose items() runs Python code that frees a tensor: the
    binding re-checks under its lock and reports the freed tensor."""
    from collections.abc import Mapping

    m = raw_spike.load_model(neff("noop"))
    x = raw_spike.allocate_tensor(4, name="x")
    y = raw_spike.allocate_tensor(4, name="y")

    class Sneaky(Mapping):
        def __init__(self, d):
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

        def items(self):
            raw_spike.free_tensor(x)
            return list(self.d.items())

    with pytest.raises(SpikeError, match=r"Tensor 'x' is freed \(passed as inputs\['x'\]\)"):
        raw_spike.execute(m, Sneaky({"x": x}), {"output0": y})
    z = raw_spike.allocate_tensor(4, name="z")

    class Unloader(Sneaky):
        def items(self):
            raw_spike.unload_model(m)
            return list(self.d.items())

    with pytest.raises(SpikeError, match="Model 'noop' is unloaded"):
        raw_spike.execute(m, {"x": z}, Unloader({"output0": y}))
