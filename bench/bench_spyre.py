"""Benchmarks of the PyTorch device "spyre" (torch_spyre) against CPU eager,
in one process (a process of its own: its PrivateUse1 device is spyre).

* eager ops on small tensors (16 and 4096 float16 elements: add, mul by a
  scalar, where, sum, softmax) against CPU eager: a call from the C++ call
  cache, where the kernel reads and writes stick-tiled storage;
* eager ops on 256 x 1024 float16 data (add, exp, sum(-1), softmax(-1), mm
  with 1024 x 256) against CPU eager;
* ``torch.compile`` (no backend=, the device compiler) of softmax over dim 0
  of 512 x 1024 float16 (the seed's example) against CPU eager of the same.

Medians; ratio = CPU time / spyre time (higher is better for spyre); no
targets: the tiling around each op is known to cost (docs/spyre.md). Writes
docs/benchmarks/spyre.json and .md.

    python bench/bench_spyre.py [--quick] [--out docs/benchmarks]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # as bench_spike_torch.py

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spike_torch import median_time, per_call  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

SMALL_OPS = [("add", lambda t, u: t + u), ("mul by scalar", lambda t, u: t * 0.5),
             ("where", lambda t, u: torch.where(t > 0, t, u)), ("sum", lambda t, u: t.sum()),
             ("softmax", lambda t, u: t.softmax(-1))]


def run(quick: bool = False) -> list[dict]:
    import torch_spyre  # noqa: F401  (registers the device)

    warnings.filterwarnings("ignore")
    rows = []

    def add(name, base, ours):
        rows.append({"benchmark": name, "baseline": "CPU eager", "baseline_us": base * 1e6,
                     "ours_us": ours * 1e6, "ratio": base / ours})

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for size in (16, 4096):
            t, u = torch.randn(size, generator=g).half(), torch.randn(size, generator=g).half()
            dt, du = t.to("spyre"), u.to("spyre")
            for name, fn in SMALL_OPS:
                calls, runs = (200, 5) if quick else (2000, 15)
                add(f"eager {name} {size} float16", per_call(lambda: fn(t, u), calls, runs),
                    per_call(lambda: fn(dt, du), calls, runs))
        a = torch.randn(256, 1024, generator=g).half()
        w = torch.randn(1024, 256, generator=g).half()
        da, dw = a.to("spyre"), w.to("spyre")
        m = 5 if quick else 31
        for name, fn in [("add", lambda t: t + t), ("exp", torch.exp),
                         ("sum(-1)", lambda t: t.sum(-1)), ("softmax(-1)", lambda t: t.softmax(-1))]:
            add(f"eager {name} 256x1024 float16", median_time(lambda: fn(a), m),
                median_time(lambda: fn(da), m))
        add("eager mm 256x1024 @ 1024x256 float16", median_time(lambda: a @ w, m),
            median_time(lambda: da @ dw, m))
        x = torch.rand(512, 1024, generator=g).half()
        dx = x.to("spyre")
        f = torch.compile(lambda v: torch.softmax(v, dim=0))
        add("torch.compile softmax(dim=0) 512x1024 float16",
            median_time(lambda: torch.softmax(x, dim=0), m), median_time(lambda: f(dx), m))
    return rows


def write(rows: list[dict], out: Path, quick: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "spyre.json").write_text(json.dumps(
        {"torch": torch.__version__, "threads": torch.get_num_threads(), "quick": quick,
         "rows": rows}, indent=1))
    lines = ["# torch_spyre: the spyre device", "",
             f"torch {torch.__version__}, {torch.get_num_threads()} threads. Medians; "
             "ratio = CPU eager time / spyre time (higher is better). Reproduce with "
             "`make bench` (or `python bench/bench_spyre.py`).", "",
             "| benchmark | baseline | baseline (us) | spyre (us) | ratio |",
             "| --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['benchmark']} | {r['baseline']} | {r['baseline_us']:.1f} | "
                     f"{r['ours_us']:.1f} | {r['ratio']:.2f}x |")
    lines += ["", "Every spyre kernel reads and writes 128-byte stick-tiled storage: around "
              "the op it untiles its inputs into host order and tiles its results, copies the "
              "compiler cannot yet fold into the op's loop (docs/spyre.md)."]
    (out / "spyre.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    args = ap.parse_args()
    write(run(args.quick), Path(args.out), args.quick)
    print((Path(args.out) / "spyre.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
