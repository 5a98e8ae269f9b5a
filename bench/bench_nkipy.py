"""Benchmarks of nkipy-compiled kernels against NumPy and eager PyTorch.

Same data, same process, same thread count for everyone (the runtime's
worker pool and torch both use every core; NumPy's elementwise code is
single-threaded by design). Every figure is the median of repeated runs;
ratios are baseline time / our time, so higher is better for us.

Writes docs/benchmarks/nkipy.json and docs/benchmarks/nkipy.md (and
nkipy.png when matplotlib is installed).

    python bench/bench_nkipy.py [--quick] [--only conv|other] [--out docs/benchmarks]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# torch's OpenMP threads busy-wait after each parallel region by default, on
# the same two CPUs the runtime's worker pool then needs; interleaved timings
# would charge that to us. Passive waiting leaves torch's own timings as they
# are (measured: torch.mm 1024^3 6.2 ms either way) and makes the comparison fair.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import charts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def median_time(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> float:
    # let other libraries' idle threads (OpenBLAS, OpenMP) stop spinning first
    time.sleep(0.3)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def chain(x):
    """Ten elementwise operations."""
    y = x * 1.5 + 0.5
    y = np.maximum(y, 0.0)
    y = y * y - 2.0
    y = np.abs(y) + 1.0
    y = np.sqrt(y) * 3.0
    return y + x


def chain_torch(x):
    import torch
    y = x * 1.5 + 0.5
    y = torch.clamp_min(y, 0.0)
    y = y * y - 2.0
    y = torch.abs(y) + 1.0
    y = torch.sqrt(y) * 3.0
    return y + x


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def twenty_ops(x, y):
    a = np.exp(x) + y
    b = np.tanh(a) * x - y
    c = np.sqrt(np.abs(b)) + 1.0
    d = c * c / (1.0 + np.exp(-c))
    e = np.maximum(d, y) - np.minimum(x, 0.5)
    f = np.log(np.abs(e) + 1.0) * 0.25
    return f + a - b * 0.5


class Device:
    """Runs a kernel on the device with preallocated device tensors."""

    def __init__(self, fn, *arrays, cache_dir, name):
        from nkipy.runtime import DeviceKernel, DeviceTensor
        self.kernel = DeviceKernel.compile_and_load(fn, *arrays, name=name, build_dir=cache_dir)
        g = self.kernel.graph
        self.inputs = {v.name: DeviceTensor.from_numpy(a) for v, a in zip(g.inputs, arrays)}
        self.outputs = {n: DeviceTensor.from_numpy(np.zeros(v.shape, v.dtype))
                        for n, v in zip(g.output_names, g.outputs)}

    def __call__(self):
        self.kernel(inputs=self.inputs, outputs=self.outputs)

    def result(self):
        return next(iter(self.outputs.values())).numpy()


def row(name, ours_s, base_s, baseline, target=None, note=""):
    ratio = base_s / ours_s if ours_s > 0 else float("inf")
    met = None if target is None else ratio >= target
    return {"benchmark": name, "ours_ms": ours_s * 1e3, "baseline": baseline,
            "baseline_ms": base_s * 1e3, "ratio": ratio, "target": target, "met": met,
            "note": note}


def run(quick: bool, only: str | None = None) -> dict:
    import torch
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    rep = 3 if quick else 9
    rng = np.random.default_rng(0)
    cache = tempfile.mkdtemp(prefix="nkipy_bench_")
    rows = []
    try:
        if only in (None, "other"):
            # elementwise chain, 16M float32
            n = (1 << 22) if quick else (1 << 24)
            x = rng.standard_normal(n).astype(np.float32)
            dev = Device(chain, x, cache_dir=cache, name="chain")
            dev()
            np.testing.assert_allclose(dev.result(), chain(x), rtol=1e-5, atol=1e-5)
            t_dev = median_time(dev, rep)
            t_np = median_time(lambda: chain(x), rep)
            tx = torch.from_numpy(x)
            t_torch = median_time(lambda: chain_torch(tx), rep)
            rows.append(row(f"10-op elementwise chain, {n // (1 << 20)}M float32", t_dev, t_np,
                            "NumPy", 3.0))
            rows.append(row(f"10-op elementwise chain, {n // (1 << 20)}M float32", t_dev, t_torch,
                            "eager torch", 1.0))
            # row softmax and RMS norm, 4096x4096
            m = 1024 if quick else 4096
            a = rng.standard_normal((m, m)).astype(np.float32)
            w = rng.standard_normal(m).astype(np.float32)
            ta, tw = torch.from_numpy(a), torch.from_numpy(w)
            dev = Device(softmax, a, cache_dir=cache, name="softmax")
            dev()
            np.testing.assert_allclose(dev.result(), softmax(a), rtol=1e-4, atol=1e-7)
            t_dev = median_time(dev, rep)
            rows.append(row(f"row softmax {m}x{m} float32", t_dev,
                            median_time(lambda: softmax(a), rep), "NumPy", 2.0))
            rows.append(row(f"row softmax {m}x{m} float32", t_dev,
                            median_time(lambda: torch.softmax(ta, -1), rep), "eager torch"))
            dev = Device(rms_norm, a, w, cache_dir=cache, name="rms_norm")
            dev()
            np.testing.assert_allclose(dev.result(), rms_norm(a, w), rtol=1e-4, atol=1e-5)
            t_dev = median_time(dev, rep)
            rows.append(row(f"RMS norm {m}x{m} float32", t_dev,
                            median_time(lambda: rms_norm(a, w), rep), "NumPy", 2.0))
            rows.append(row(f"RMS norm {m}x{m} float32", t_dev, median_time(
                lambda: ta * torch.rsqrt(ta.pow(2).mean(-1, keepdim=True) + 1e-6) * tw, rep),
                "eager torch"))
            # fp32 matmul
            for size in ([512] if quick else [1024, 2048]):
                p = rng.standard_normal((size, size)).astype(np.float32)
                q = rng.standard_normal((size, size)).astype(np.float32)
                dev = Device(lambda p, q: p @ q, p, q, cache_dir=cache, name=f"matmul{size}")
                dev()
                np.testing.assert_allclose(dev.result(), p @ q, rtol=1e-3, atol=1e-3)
                tp, tq = torch.from_numpy(p), torch.from_numpy(q)
                t_dev = median_time(dev, rep)
                t_mm = median_time(lambda: torch.mm(tp, tq), rep)
                rows.append(row(f"matmul {size}^3 float32", t_dev, t_mm, "torch.mm", 0.8,
                                note=f"{2 * size ** 3 / t_dev / 1e9:.0f} GFLOP/s ours, "
                                     f"{2 * size ** 3 / t_mm / 1e9:.0f} torch"))
                rows.append(row(f"matmul {size}^3 float32", t_dev,
                                median_time(lambda: p @ q, rep), "NumPy"))
        if only in (None, "conv"):
            # convolutions of a CNN's layers (bias and ReLU fused into the kernel),
            # against torch's own CPU convolution with the same threads
            from nkipy.core import ops as nkops
            nb = 1 if quick else 4
            for label, c_in, c_out, hw, stride, groups in (
                    ("3x3 64->64, 56x56", 64, 64, 56, 1, 1),
                    ("3x3 stride 2 64->128, 56x56", 64, 128, 56, 2, 1),
                    ("3x3 depthwise 128, 28x28", 128, 128, 28, 1, 128),
                    ("1x1 128->256, 28x28", 128, 256, 28, 1, 1)):
                k = 1 if label.startswith("1x1") else 3
                xi = rng.standard_normal((nb, c_in, hw, hw)).astype(np.float32)
                wi = (rng.standard_normal((c_out, c_in // groups, k, k)) * 0.1).astype(np.float32)
                bi = rng.standard_normal(c_out).astype(np.float32)

                def conv(x, w, b, stride=stride, groups=groups, pad=k // 2):
                    y = nkops.conv2d(x, w, b, stride=stride, padding=pad, groups=groups)
                    return np.maximum(y, np.zeros((), np.float32))

                dev = Device(conv, xi, wi, bi, cache_dir=cache,
                             name=f"conv_{c_in}_{c_out}_{stride}_{groups}")
                dev()
                tx, tw, tb = (torch.from_numpy(v) for v in (xi, wi, bi))

                def conv_torch(tx=tx, tw=tw, tb=tb, stride=stride, groups=groups, pad=k // 2):
                    return torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride, pad, 1, groups))

                np.testing.assert_allclose(dev.result(), conv_torch().numpy(), rtol=1e-3, atol=1e-3)
                rows.append(row(f"conv2d {label}, batch {nb}, bias+ReLU", median_time(dev, rep),
                                median_time(conv_torch, rep), "torch conv2d+relu", 1.0))
        if only in (None, "other"):
            # compile times
            from nkipy.compiler.build import compile_graph
            from nkipy.core.trace import trace
            from nkipy.runtime import device_kernel
            s1, s2 = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
            colds, loads = [], []
            for i in range(3 if quick else 5):
                d = tempfile.mkdtemp(prefix="nkipy_cold_", dir=cache)
                t = time.perf_counter()
                compile_graph(trace(twenty_ops, s1, s2, name="twenty_ops"), cache_dir=d)
                colds.append(time.perf_counter() - t)
                device_kernel._LOADED.clear()
                t = time.perf_counter()
                k = device_kernel.DeviceKernel.compile_and_load(twenty_ops, s1, s2, name="twenty_ops",
                                                                build_dir=d)
                loads.append(time.perf_counter() - t)
                assert k.compiled.cache_hit
            cold, load = statistics.median(colds), statistics.median(loads)
            rows.append({"benchmark": "cold compile of a 20-op kernel (trace + C + cc)",
                         "ours_ms": cold * 1e3, "baseline": "target 1000 ms", "baseline_ms": 1000.0,
                         "ratio": 1.0 / cold, "target": 1.0, "met": cold < 1.0, "note": ""})
            rows.append({"benchmark": "cached load of that kernel (trace + cache hit + load)",
                         "ours_ms": load * 1e3, "baseline": "target 20 ms", "baseline_ms": 20.0,
                         "ratio": 0.020 / load, "target": 1.0, "met": load < 0.020, "note": ""})
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    import spike
    gemm = None
    try:
        from spike import _spike
        gemm = getattr(_spike, "gemm_provider", lambda: None)()
    except Exception:  # pragma: no cover
        pass
    return {"host": {"machine": platform.machine(), "cpus": threads,
                     "python": platform.python_version(), "numpy": np.__version__,
                     "torch": torch.__version__, "gemm_provider": gemm},
            "threads": threads, "quick": quick, "rows": rows}


def write(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "nkipy.json").write_text(json.dumps(result, indent=1))
    lines = ["# nkipy compiled kernels", "",
             f"Host: {result['host']['cpus']} CPUs, NumPy {result['host']['numpy']}, "
             f"torch {result['host']['torch']}, GEMM provider "
             f"{result['host']['gemm_provider'] or 'n/a'}; {result['threads']} threads for the "
             "runtime and torch. Medians; ratio = baseline time / our time (higher is better). "
             "Reproduce with `make bench`.", "",
             "| benchmark | ours (ms) | baseline | baseline (ms) | ratio | target | met |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in result["rows"]:
        target = "" if r["target"] is None else f"{r['target']:g}x"
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        note = f" ({r['note']})" if r["note"] else ""
        lines.append(f"| {r['benchmark']}{note} | {r['ours_ms']:.2f} | {r['baseline']} | "
                     f"{r['baseline_ms']:.2f} | {r['ratio']:.2f}x | {target} | {met} |")
    (out / "nkipy.md").write_text("\n".join(lines) + "\n")
    render_png(result, out / "nkipy.png")


def render_png(result: dict, path: Path) -> bool:
    """The ratios as bars on a log axis (they span 1x to about 70x), coloured by
    baseline."""
    plt = charts.pyplot()
    if plt is None:
        return False
    rows = [r for r in result["rows"] if "compile" not in r["benchmark"]
            and "load" not in r["benchmark"]]
    palette = ("#3b7dd8", "#e0873a", "#55a868", "#8172b3", "#c44e52")
    baselines = list(dict.fromkeys(r["baseline"] for r in rows))
    color = {b: palette[i % len(palette)] for i, b in enumerate(baselines)}
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4))
    ax.barh(range(len(rows)), [r["ratio"] for r in rows],
            color=[color[r["baseline"]] for r in rows])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r["benchmark"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    charts.ratio_axis(ax, [r["ratio"] for r in rows])
    ax.set_xlabel("speed-up over the baseline (above 1x: nkipy is faster)")
    ax.set_title("nkipy kernels on the CPU device")
    charts.color_legend(ax, [(f"vs {b}", color[b]) for b in baselines], loc="best")
    fig.tight_layout()
    charts.save(fig, path)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    ap.add_argument("--only", choices=("conv", "other"),
                    help="run only the convolution rows, or only the others")
    ap.add_argument("--replot", action="store_true",
                    help="draw nkipy.png again from nkipy.json; measure nothing")
    args = ap.parse_args()
    if args.replot:
        return 0 if render_png(charts.load_result(Path(args.out), "nkipy.json"),
                               Path(args.out) / "nkipy.png") else 1
    result = run(args.quick, args.only)
    write(result, Path(args.out))
    print((Path(args.out) / "nkipy.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
