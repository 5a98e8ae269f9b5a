"""`make demo`: build a NEFF from a hand-written C kernel, run it through spike.

Until the nkipy compiler exists, this is the whole path a compiled kernel
takes, done by hand:

1. compile examples/kernels/softmax.c (a fused row softmax over float32
   [ROWS, COLS], rows spread over the runtime's workers with parallel_for)
   into a NEFF with ``cc -O2 -shared -fPIC -I<spike.get_include()>``;
2. load it with SpikeModel.load_from_neff and show its tensors;
3. run it on the device (the nkrt runtime's CPU driver) and check the result
   against NumPy;
4. benchmark it against the same softmax in NumPy;
5. write a Perfetto trace of one execution.

    python examples/demo_spike.py [--rows 2048] [--cols 1024] [--iterations 30]

Exits with status 1 if the result does not match NumPy.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import spike
from spike import SpikeModel, SpikeTensor

REPO = Path(__file__).resolve().parents[1]
KERNEL = REPO / "examples" / "kernels" / "softmax.c"
TOLERANCE = 1e-5  # float32 softmax, values in [0, 1], compared with a float64 reference


def build_neff(rows: int, cols: int, out_dir: Path) -> Path:
    """Compiles the softmax kernel for one shape; reuses an up-to-date NEFF."""
    out_dir.mkdir(parents=True, exist_ok=True)
    neff = out_dir / f"softmax_{rows}x{cols}.neff"
    header = Path(spike.get_include()) / "nkrt" / "neff_abi.h"
    newest_input = max(KERNEL.stat().st_mtime, header.stat().st_mtime)
    cmd = [os.environ.get("CC", "cc"), "-std=c11", "-O2", "-shared", "-fPIC",
           "-I", spike.get_include(), f"-DROWS={rows}", f"-DCOLS={cols}",
           str(KERNEL), "-o", str(neff)]
    if neff.is_file() and neff.stat().st_mtime >= newest_input:
        print(f"NEFF       {neff.relative_to(REPO)} (up to date)")
        return neff
    t0 = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"demo: compiling the kernel failed:\n$ {shlex.join(cmd)}\n{result.stderr}")
    print(f"NEFF       {neff.relative_to(REPO)} ({neff.stat().st_size} bytes, built in "
          f"{time.perf_counter() - t0:.2f} s)")
    print(f"           $ {shlex.join(cmd).replace(str(REPO) + '/', '')}")
    return neff


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """The same computation in NumPy (float32, as the kernel)."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def time_numpy(fn, x: np.ndarray, warmup: int, iterations: int) -> list:
    for _ in range(warmup):
        fn(x)
    durations = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn(x)
        durations.append((time.perf_counter() - t0) * 1e3)
    return durations


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2048)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--iterations", type=int, default=30, help="benchmark iterations")
    p.add_argument("--out-dir", default=str(REPO / "build" / "demo"))
    args = p.parse_args(argv)
    if args.rows < 1 or args.cols < 1 or args.iterations < 1:
        p.error("--rows, --cols and --iterations must be positive")
    out_dir = Path(args.out_dir)

    print("== spike demo: a hand-written softmax NEFF on the nkrt runtime ==")
    neff = build_neff(args.rows, args.cols, out_dir)

    runtime = spike.get_spike_singleton()
    model = SpikeModel.load_from_neff(neff)
    print(f"runtime    {runtime.core_count} visible NeuronCores (virtual, CPU driver), "
          f"{runtime.num_workers} worker threads, "
          f"{runtime.core_memory_bytes / 2**30:.0f} GiB device memory per core")
    print(f"model      '{model.name}' loaded on core {model.core_id}")
    for kind, info in (("input", model.input_tensors_info), ("output", model.output_tensors_info)):
        for name, meta in info.items():
            print(f"  {kind:<6}   {name}: {meta.dtype}{list(meta.shape)}, {meta.size} bytes")

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 4).astype(np.float32)
    x_dev = SpikeTensor.from_numpy(x, name="x")
    outputs = model({"x": x_dev})  # outputs=None: allocated and returned
    got = outputs["output0"].numpy()
    ref = numpy_softmax(x.astype(np.float64))
    err = float(np.max(np.abs(got - ref)))
    row_sums = float(np.max(np.abs(got.sum(axis=1, dtype=np.float64) - 1.0)))
    ok = err <= TOLERANCE and np.all(np.isfinite(got))
    print(f"check      max abs error vs NumPy (float64 reference) {err:.2e} "
          f"(tolerance {TOLERANCE:.0e}); rows sum to 1 within {row_sums:.1e}: "
          f"{'OK' if ok else 'FAILED'}")

    warmup = 3
    ours = model.benchmark({"x": x_dev}, outputs, warmup_iter=warmup,
                           benchmark_iter=args.iterations)
    host = model.benchmark({"x": x_dev}, outputs, warmup_iter=warmup,
                           benchmark_iter=args.iterations, mode="host")
    theirs = time_numpy(numpy_softmax, x, warmup, args.iterations)
    ours_med = statistics.median(ours.durations_ms)
    host_med = statistics.median(host.durations_ms)
    theirs_med = statistics.median(theirs)
    mib = x.nbytes / 2**20
    print(f"benchmark  {args.iterations} iterations (+{warmup} warmup), medians, "
          f"{args.rows}x{args.cols} float32 ({mib:.0f} MiB)")
    print(f"  device   {ours_med:8.3f} ms   (min {ours.min_ms:.3f}, max {ours.max_ms:.3f}; "
          "nc_exec_running in the trace)")
    print(f"  host     {host_med:8.3f} ms   (min {host.min_ms:.3f}, max {host.max_ms:.3f}; "
          "one nkrt_execute, timed on the host)")
    print(f"  NumPy    {theirs_med:8.3f} ms   (min {min(theirs):.3f}, max {max(theirs):.3f}; "
          "np.exp / max / sum, single thread)")
    ratio = theirs_med / host_med
    print(f"  ratio    {ratio:.2f} (NumPy time / ours, host clock): ours is "
          + (f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"))

    trace = out_dir / "softmax_trace.json"
    model({"x": x_dev}, outputs, save_trace=True, ntff_name=trace)
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    print(f"trace      {trace.relative_to(REPO)}: {len(events)} execution event(s), "
          f"{events[0]['dur']:.1f} us; open it at https://ui.perfetto.dev (Open trace file)")

    if not ok:
        print("demo: FAILED: the device result does not match NumPy", file=sys.stderr)
        return 1
    print("demo: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
