"""Benchmarks of the PyTorch device "nkipy" against CPU eager, in one process.

* ``.to("nkipy")`` and ``.cpu()`` of 64 MiB against a CPU ``clone`` of the
  same tensor (target: at least 0.8 of it), and from pinned memory with
  ``non_blocking=True`` (then ``synchronize()``) and from pageable memory into an
  existing device tensor against the same clone; a 64 MiB non_blocking copy
  beside four 512^3 matmuls against a blocking one (no targets: figures),
* ``torch.empty(1024, device="nkipy")`` served from the caching allocator
  against CPU ``torch.empty`` (target: within 2x),
* eager ops on small tensors (16 and 4096 float32 elements: add, mul by a
  scalar, where, argmax, cat, index_select, sum, softmax) against CPU eager
  (target: at most 1.2x its time, i.e. ratio >= 0.83),
* eager ops on 256x256 data against CPU eager (target: ratio >= 1.0),
* eager training steps (forward, backward, AdamW) of a GPT-2 (2 layers, 256
  wide, batch 4x64, transformers' GPT2LMHeadModel) and a ResNet-18 (batch 8,
  64x64) against the same steps on CPU eager (target: ratio >= 1.0), after
  warm-up steps that build the kernels.

Medians of repeated runs; ratio = baseline time / nkipy time (higher is
better for nkipy). Writes docs/benchmarks/spike_torch.json and .md.

    python bench/bench_spike_torch.py [--quick] [--out docs/benchmarks]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

# torch's OpenMP threads busy-wait after each parallel region by default, on
# the same two CPUs the runtime's worker pool then needs; interleaved timings
# would charge that to us. Passive waiting leaves torch's own timings as they
# are (measured: torch.mm 1024^3 6.2 ms either way) and makes the comparison fair.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from typing import Callable

import torch

REPO = Path(__file__).resolve().parents[1]


def median_time(fn: Callable[[], object], runs: int) -> float:
    time.sleep(0.3)  # let other libraries' idle threads (OpenMP) stop spinning first
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def per_call(fn: Callable[[], object], calls: int, runs: int) -> float:
    """Median over ``runs`` of the mean time of ``calls`` back-to-back calls
    (a small op takes about a microsecond: one call is too short to time)."""
    time.sleep(0.3)
    for _ in range(calls):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls)
    return statistics.median(times)


SMALL_OPS = [("add", lambda t, u, i: t + u), ("mul by scalar", lambda t, u, i: t * 0.5),
             ("where", lambda t, u, i: torch.where(t > 0, t, u)),
             ("argmax", lambda t, u, i: t.argmax()), ("cat", lambda t, u, i: torch.cat([t, u])),
             ("index_select", lambda t, u, i: torch.index_select(t, 0, i)),
             ("sum", lambda t, u, i: t.sum()), ("softmax", lambda t, u, i: t.softmax(-1))]


def run(quick: bool = False) -> list[dict]:
    import spike_torch  # noqa: F401  (registers the device)

    warnings.filterwarnings("ignore", message="nkipy: operator")
    rows = []

    def add(name, base, ours, target=None, baseline="CPU", note=""):
        ratio = base / ours
        rows.append({"benchmark": name, "baseline": baseline, "baseline_us": base * 1e6,
                     "ours_us": ours * 1e6, "ratio": ratio, "target": target,
                     "met": None if target is None else ratio >= target, "note": note})

    n = 5 if quick else 21
    x = torch.randn(16 << 20)  # 64 MiB
    d = x.to("nkipy")
    clone = median_time(lambda: x.clone(), n)
    add(".to('nkipy') of 64 MiB", clone, median_time(lambda: x.to("nkipy"), n), 0.8,
        "CPU clone")
    add(".cpu() of 64 MiB", clone, median_time(lambda: d.cpu(), n), 0.8, "CPU clone")
    # pinned host memory: a non_blocking copy is queued on the core (one runtime
    # worker copies it) and synchronize() waits for it; the pageable copy is
    # synchronous, split over threads
    pin = x.pin_memory()
    add("pinned non_blocking copy of 64 MiB + synchronize", clone,
        median_time(lambda: (d.copy_(pin, non_blocking=True), torch.nkipy.synchronize()), n),
        None, "CPU clone")
    add("pageable copy_ into nkipy of 64 MiB", clone, median_time(lambda: d.copy_(x), n),
        None, "CPU clone")
    w = torch.randn(512, 512, device="nkipy")

    def overlap(non_blocking):
        d.copy_(pin, non_blocking=non_blocking)
        for _ in range(4):
            w @ w
        torch.nkipy.synchronize()
    add("64 MiB copy beside 4 matmuls 512^3: non_blocking vs blocking",
        median_time(lambda: overlap(False), n), median_time(lambda: overlap(True), n), None,
        "blocking copy", "whether the queued copy overlaps device work on this host")
    del d, pin
    k = 200 if quick else 5000
    add("torch.empty(1024) from the cache", median_time(lambda: torch.empty(1024), k),
        median_time(lambda: torch.empty(1024, device="nkipy"), k), 0.5, "CPU torch.empty",
        "target: within 2x, i.e. ratio >= 0.5")
    with torch.no_grad():
        for size in (16, 4096):
            t, u = torch.randn(size), torch.randn(size)
            i = torch.randint(0, size, (size // 2,))
            dt, du, di = t.to("nkipy"), u.to("nkipy"), i.to("nkipy")
            for name, fn in SMALL_OPS:
                calls, runs = (200, 5) if quick else (2000, 15)
                add(f"eager {name} {size} float32",
                    per_call(lambda: fn(t, u, i), calls, runs),
                    per_call(lambda: fn(dt, du, di), calls, runs), 0.83, "CPU eager",
                    "target: at most 1.2x CPU eager's time")
    a = torch.randn(256, 256)
    da = a.to("nkipy")
    ln = torch.nn.LayerNorm(256)
    dln = torch.nn.LayerNorm(256).to("nkipy")
    ops = [("add", lambda t: t + t), ("mul by scalar", lambda t: t * 0.5), ("exp", torch.exp),
           ("tanh", torch.tanh), ("sum(-1)", lambda t: t.sum(-1)), ("mean", lambda t: t.mean()),
           ("mm", lambda t: t @ t), ("softmax(-1)", lambda t: t.softmax(-1)),
           ("layer_norm", None)]
    m = 10 if quick else 51
    with torch.no_grad():
        for name, fn in ops:
            if fn is None:
                add(f"eager {name} 256x256 float32", median_time(lambda: ln(a), m),
                    median_time(lambda: dln(da), m), 1.0, "CPU eager")
                continue
            add(f"eager {name} 256x256 float32", median_time(lambda: fn(a), m),
                median_time(lambda: fn(da), m), 1.0, "CPU eager")
    for name, make, batch in TRAINING:
        steps = 3 if quick else 11
        base = training_step_time(make, batch, "cpu", steps)
        add(f"eager training step, {name}", base,
            training_step_time(make, batch, "nkipy", steps), 1.0, "CPU eager",
            "forward, backward, AdamW")
    return rows


def _gpt2() -> tuple:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=64)
    model = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 1000, (4, 64))
    return model, (lambda m, x: m(input_ids=x, labels=x).loss), ids


def _resnet18() -> tuple:
    sys.path.insert(0, str(REPO / "bench"))
    from cnn_models import resnet18

    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    return resnet18(num_classes=10), (lambda m, xy: torch.nn.functional.cross_entropy(
        m(xy[0]), xy[1])), (x, y)


#: (name, builder of (model, loss of (model, batch), batch), batch description)
TRAINING = [("GPT-2 2x256, batch 4x64", _gpt2, "4x64"),
            ("ResNet-18, batch 8x64x64", _resnet18, "8x3x64x64")]


def training_step_time(make: Callable[[], tuple], batch: str, device: str, steps: int) -> float:
    """Median time of an eager training step (zero_grad, forward, backward,
    AdamW step, the loss read back) of ``make()``'s model on ``device``, after
    three warm-up steps (the device builds its kernels in the first)."""
    torch.manual_seed(0)
    model, loss_of, data = make()
    model = model.to(device)
    data = tuple(t.to(device) for t in data) if isinstance(data, tuple) else data.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        loss = loss_of(model, data)
        loss.backward()
        opt.step()
        loss.item()

    for _ in range(3):
        step()
    return median_time(step, steps)


def write(rows: list[dict], out: Path, quick: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "spike_torch.json").write_text(json.dumps(
        {"torch": torch.__version__, "threads": torch.get_num_threads(), "quick": quick,
         "rows": rows}, indent=1))
    lines = ["# spike_torch: the nkipy device", "",
             f"torch {torch.__version__}, {torch.get_num_threads()} threads. Medians; "
             "ratio = baseline time / nkipy time (higher is better). Reproduce with "
             "`make bench`.", "",
             "| benchmark | baseline | baseline (us) | nkipy (us) | ratio | target | met |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        target = "" if r["target"] is None else f"{r['target']:g}x"
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        note = f" ({r['note']})" if r["note"] else ""
        lines.append(f"| {r['benchmark']}{note} | {r['baseline']} | {r['baseline_us']:.1f} | "
                     f"{r['ours_us']:.1f} | {r['ratio']:.2f}x | {target} | {met} |")
    lines += ["", "An eager call whose kernel is loaded runs from the C++ call cache "
              "(spike_torch/csrc/eager.cpp): PyTorch's dispatcher, a key built from the "
              "arguments, output allocation from the caching allocator and the kernel launch, "
              "with no Python; see docs/spike_torch.md."]
    (out / "spike_torch.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    args = ap.parse_args()
    rows = run(args.quick)
    write(rows, Path(args.out), args.quick)
    print((Path(args.out) / "spike_torch.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
