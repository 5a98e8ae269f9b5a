"""Python-level benchmarks of spike over the nkrt runtime (run by bench/run.py).

Each function returns a plain dict of figures (times in nanoseconds, rates in
bytes or executions per second). Every figure is the median over `repeats`
batches; where a baseline exists, ours and the baseline are measured in
alternation within the same process so that drift affects both alike.

    python bench/bench_spike.py [--neff-dir build/neff] [--quick]

prints the results as JSON.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

REPO = Path(__file__).resolve().parents[1]

__all__ = ["bench_execute", "bench_copies", "bench_two_cores", "run_all"]


def _per_call_ns(fn: Callable[[], None], iters: int) -> float:
    """Mean nanoseconds of one fn() over a batch of iters calls."""
    t0 = time.perf_counter_ns()
    for _ in range(iters):
        fn()
    return (time.perf_counter_ns() - t0) / iters


def _summary(samples: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def bench_execute(neff_dir: Path, repeats: int, iters: int) -> Dict[str, object]:
    """Execute round trip of noop.neff: Spike.execute and SpikeModel.__call__."""
    import spike
    from spike import SpikeModel, SpikeTensor

    model = SpikeModel.load_from_neff(neff_dir / "noop.neff")
    x = SpikeTensor.from_numpy(np.ones(1, np.float32), name="x")
    y = SpikeTensor.from_numpy(np.zeros(1, np.float32), name="output0")
    low = spike.get_spike_singleton()
    ref, ins, outs = model.model_ref, {"x": x.tensor_ref}, {"output0": y.tensor_ref}
    inputs, outputs = {"x": x}, {"output0": y}

    def low_level() -> None:
        low.execute(ref, ins, outs)

    def high_level() -> None:
        model(inputs, outputs)

    def allocating() -> None:
        model(inputs)

    results: Dict[str, List[float]] = {"spike_execute": [], "spikemodel_call": [],
                                       "spikemodel_call_alloc": []}
    for fn in (low_level, high_level, allocating):  # warm-up
        _per_call_ns(fn, iters // 10 + 1)
    for _ in range(repeats):
        results["spike_execute"].append(_per_call_ns(low_level, iters))
        results["spikemodel_call"].append(_per_call_ns(high_level, iters))
        results["spikemodel_call_alloc"].append(_per_call_ns(allocating, max(iters // 10, 1)))
    # Spike.benchmark times each nkrt_execute in C: the runtime's own share.
    in_c = low.benchmark(ref, ins, outs, warmup_iterations=1000, benchmark_iterations=iters)
    out = {k: _summary(v) for k, v in results.items()}
    out["spike_benchmark_in_c_ns"] = {"median": statistics.median(in_c.durations_ms) * 1e6}
    out["check"] = float(y.numpy()[0])
    out["iters"] = iters
    out["repeats"] = repeats
    return out


def bench_copies(nbytes: int, repeats: int) -> Dict[str, object]:
    """64 MiB host<->device copies against np.copyto of the same bytes."""
    from spike import SpikeTensor, get_spike_singleton

    n = nbytes // 4
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    dst = np.empty_like(src)
    t = SpikeTensor.from_numpy(np.zeros(n, np.float32), name="big")
    low = get_spike_singleton()
    dst_bytes = dst.view(np.uint8)

    def numpy_copy() -> None:
        np.copyto(dst, src)

    def numpy_alloc_copy() -> None:
        src.copy()

    def write() -> None:
        t.write_from_numpy(src)

    def read_prealloc() -> None:
        low.tensor_read_to_pybuffer(t.tensor_ref, dst_bytes)

    def read_new() -> None:
        t.numpy()

    fns = {"numpy_copyto": numpy_copy, "numpy_ndarray_copy": numpy_alloc_copy,
           "write_from_numpy": write, "tensor_read_to_pybuffer": read_prealloc,
           "numpy_method": read_new}
    for fn in fns.values():  # warm-up: touch every page on both sides
        fn()
        fn()
    samples: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_per_call_ns(fn, 1))
    t.write_from_numpy(src)
    ok = bool(np.array_equal(t.numpy(), src))
    out: Dict[str, object] = {"bytes": nbytes, "repeats": repeats, "roundtrip_equal": ok}
    for name, v in samples.items():
        s = _summary(v)
        s["gb_per_s"] = nbytes / s["median"]  # bytes per ns == GB/s
        out[name] = s
    return out


class _NeffDesc(ctypes.Structure):
    """The head of nkrt_neff_desc_t (runtime/include/nkrt/neff_abi.h)."""

    _fields_ = [("struct_size", ctypes.c_uint32), ("abi_version", ctypes.c_uint32),
                ("name", ctypes.c_char_p), ("num_inputs", ctypes.c_uint32),
                ("num_outputs", ctypes.c_uint32), ("inputs", ctypes.c_void_p),
                ("outputs", ctypes.c_void_p), ("scratch_bytes", ctypes.c_uint64),
                ("kernel", ctypes.c_void_p)]


_KERNEL_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _raw_spin(neff: Path, spin_iters: int) -> Callable[[], None]:
    """spin.neff's kernel called straight through ctypes (which releases the GIL),
    with no runtime: the control for what the host alone can run in parallel."""
    lib = ctypes.CDLL(str(neff))
    query = lib.nkrt_neff_query
    query.restype = ctypes.POINTER(_NeffDesc)
    query.argtypes = [ctypes.c_uint32]
    kernel = _KERNEL_FN(query(1).contents.kernel)
    x = (0.1 + np.arange(256, dtype=np.float32) / 1000).astype(np.float32)
    n = np.array([spin_iters], np.int32)
    y = np.zeros(256, np.float32)
    ins = (ctypes.c_void_p * 2)(x.ctypes.data, n.ctypes.data)
    outs = (ctypes.c_void_p * 1)(y.ctypes.data)
    keep = (lib, x, n, y, ins, outs)

    def call() -> None:
        kernel(None, ins, outs)
        call.keep = keep  # type: ignore[attr-defined]  (keeps the buffers alive)

    return call


def bench_two_cores(neff_dir: Path, spin_iters: int, reps: int, repeats: int) -> Dict[str, object]:
    """spin.neff on one core with one thread, then on two cores with a thread each.

    Interleaved with the same kernel called on plain threads without the
    runtime (through ctypes), which gives the two-thread scaling the host
    itself delivers at that moment.
    """
    from spike import SpikeModel, SpikeTensor

    x0 = (0.1 + np.arange(256, dtype=np.float32) / 1000).astype(np.float32)
    jobs = []
    for core in (0, 1):
        model = SpikeModel.load_from_neff(neff_dir / "spin.neff", core_id=core)
        inputs = {"x": SpikeTensor.from_numpy(x0, name="x", core_id=core),
                  "n": SpikeTensor.from_numpy(np.array([spin_iters], np.int32), name="n",
                                              core_id=core)}
        outputs = {"output0": SpikeTensor.from_numpy(np.zeros(256, np.float32), name="y",
                                                     core_id=core)}
        jobs.append((model, inputs, outputs))

    def worker(job, count: int, barrier: threading.Barrier) -> None:
        model, inputs, outputs = job
        barrier.wait()
        for _ in range(count):
            model(inputs, outputs)

    def throughput(ncores: int, count: int) -> float:
        barrier = threading.Barrier(ncores + 1)
        threads = [threading.Thread(target=worker, args=(jobs[c], count, barrier))
                   for c in range(ncores)]
        for th in threads:
            th.start()
        barrier.wait()
        t0 = time.perf_counter()
        for th in threads:
            th.join()
        return ncores * count / (time.perf_counter() - t0)

    raw_calls = [_raw_spin(neff_dir / "spin.neff", spin_iters) for _ in range(2)]

    def raw_worker(call: Callable[[], None], count: int, barrier: threading.Barrier) -> None:
        barrier.wait()
        for _ in range(count):
            call()

    def raw_throughput(nthreads: int, count: int) -> float:
        barrier = threading.Barrier(nthreads + 1)
        threads = [threading.Thread(target=raw_worker, args=(raw_calls[c], count, barrier))
                   for c in range(nthreads)]
        for th in threads:
            th.start()
        barrier.wait()
        t0 = time.perf_counter()
        for th in threads:
            th.join()
        return nthreads * count / (time.perf_counter() - t0)

    throughput(2, max(reps // 10, 1))  # warm-up
    one, two, ratio, host = [], [], [], []
    for _ in range(repeats):
        a = throughput(1, reps)
        b = throughput(2, reps)
        one.append(a)
        two.append(b)
        ratio.append(b / a)
        host.append(raw_throughput(2, reps) / raw_throughput(1, reps))
    ref = x0.copy()
    for _ in range(spin_iters):
        ref = np.float32(3.7) * ref * (np.float32(1) - ref)
    got = jobs[1][2]["output0"].numpy()
    return {
        "spin_iters": spin_iters, "reps": reps, "repeats": repeats,
        "one_core_per_s": _summary(one), "two_cores_per_s": _summary(two),
        "ratio": _summary(ratio), "host_two_thread_ratio": _summary(host),
        "exec_ms_one_core": 1e3 / statistics.median(one),
        "max_abs_err_vs_numpy": float(np.max(np.abs(got - ref))),
    }


def run_all(neff_dir: Path, quick: bool = False) -> Dict[str, object]:
    """Every Python benchmark, on a runtime with two visible cores."""
    import spike

    if not spike.spike_singleton.is_active():
        spike.configure(visible_cores=[0, 1], core_memory_bytes=512 << 20)
    runtime = spike.get_spike_singleton()
    return {
        "num_workers": runtime.num_workers,
        "execute": bench_execute(neff_dir, repeats=7 if quick else 21,
                                 iters=2000 if quick else 20000),
        "copies": bench_copies(64 << 20, repeats=5 if quick else 21),
        "two_cores": bench_two_cores(neff_dir, spin_iters=2000, reps=50 if quick else 200,
                                     repeats=3 if quick else 7),
    }


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--neff-dir", default=str(REPO / "build" / "neff"))
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = p.parse_args(argv)
    print(json.dumps(run_all(Path(args.neff_dir), quick=args.quick), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
