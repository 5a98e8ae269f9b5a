#!/usr/bin/env python3
"""torch.compile(backend="nkipy") against eager PyTorch and torch.compile(backend="inductor").

One process, the same threads for everyone (torch's intra-op pool and the nkrt
worker pool both use every CPU). For each model:

- eager: the model and its inputs on the CPU, uncompiled;
- nkipy: compiled with backend="nkipy", weights and inputs on the ``nkipy``
  PyTorch device (``model.to("nkipy")``, ``x.to("nkipy")``), as users run it;
- nkipy, CPU tensors: the same backend called with the CPU model and inputs
  (every call copies inputs and weights to the device and the outputs back);
- inductor: compiled with backend="inductor", on the CPU.

Per-call times are medians over rounds; in each round every variant runs a batch
of calls, in rotating order, so drift and other processes' load hit all alike.
Cold compile is the first call of each compiled model, with a fresh nkipy cache
directory and a fresh inductor cache (TORCHINDUCTOR_CACHE_DIR set to a new
temporary directory before torch is imported); each backend first compiles one
trivial graph, so that one-time imports and set-up are counted there rather than
in the first model. Every compiled result is checked against eager.

Models: (a) MLP, 4 x (Linear(1024, 1024) + GELU), batch 64; (b) a BERT-base encoder
layer (nn.TransformerEncoderLayer(768, 12, 3072), sequence 128, eval); (c) the prefill
and (d) one decode step with a static KV cache of the Llama of
examples/torch_to_nkipy/hf_llama_inference.py (its build_model()); (e) Linear(8, 8),
batch 2: per-call overhead of a tiny graph.

Writes docs/benchmarks/torch_compile.json and torch_compile.md (and
torch_compile.png when matplotlib is installed). Not a test.

    python bench/bench_torch_compile.py [--quick] [--models mlp,bert,...] [--out DIR]
"""
from __future__ import annotations

import os
import tempfile

# Every variant runs with the process's defaults (torch's OpenMP threads spin a
# little after each parallel region, the nkrt pool polls 100 us): forcing
# OMP_WAIT_POLICY=PASSIVE would slow eager's many small ops (MLP 2.39 -> 3.37 ms
# measured) and flatter us. Instead each timed batch starts after a pause in
# which the previous variant's idle threads stop spinning (SETTLE_S).
SETTLE_S = 0.02
# A fresh inductor cache: cold compiles are cold. Must precede importing torch.
_INDUCTOR_CACHE = tempfile.mkdtemp(prefix="bench_inductor_cache_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE
# HF generate-style bookkeeping is not timed here, but keep fallback warnings quiet.
os.environ.setdefault("SPIKE_TORCH_FALLBACK_WARN", "0")

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Tuple  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "examples" / "torch_to_nkipy"))

import charts  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import spiky  # noqa: E402

VARIANTS = ("eager", "nkipy", "nkipy_cpu", "inductor")
#: The backend the "inductor" variant compiles with (bench/bench_models.py's smoke
#: test swaps in Dynamo's "eager" backend, which compiles nothing).
INDUCTOR_BACKEND = "inductor"
LABELS = {"eager": "eager (CPU)", "nkipy": "nkipy, nkipy tensors",
          "nkipy_cpu": "nkipy, CPU tensors", "inductor": "inductor (CPU)"}


# ---------------------------------------------------------------------------
# The models. Each case gives the function to compile, its CPU arguments, how
# to move them to the nkipy device, and (for stateful calls) a reset run before
# every timed batch.
# ---------------------------------------------------------------------------


def run_module(m, *args):
    return m(*args)


def llama_prefill(m, ids):
    return m(ids).logits


def llama_decode(m, tok, cache):
    return m(input_ids=tok, past_key_values=cache).logits


class Case:
    key = ""
    label = ""
    in_geomean = True
    fn: Callable[..., Any] = staticmethod(run_module)

    def args(self, device: str) -> Tuple[Any, ...]:
        """Arguments for one variant (model first), on ``device``; fresh state."""
        raise NotImplementedError

    def reset(self, args: Tuple[Any, ...]) -> None:
        """Restores state mutated by calls (before each timed batch)."""

    max_batch = 100000


class MLP(Case):
    key, label = "mlp", "(a) MLP 4 x 1024, batch 64"

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(*[nn.Sequential(nn.Linear(1024, 1024), nn.GELU())
                                     for _ in range(4)]).eval()
        self.x = torch.randn(64, 1024)

    def args(self, device):
        if device == "cpu":
            return (self.model, self.x)
        return (copy.deepcopy(self.model).to(device), self.x.to(device))


class BERT(Case):
    key, label = "bert", "(b) BERT-base encoder layer, seq 128"

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True, dropout=0.0,
                                                activation="gelu").eval()
        self.x = torch.randn(1, 128, 768)

    def args(self, device):
        if device == "cpu":
            return (self.model, self.x)
        return (copy.deepcopy(self.model).to(device), self.x.to(device))


class Tiny(MLP):
    key, label = "tiny", "(e) Linear(8, 8), batch 2 (per-call overhead)"
    in_geomean = False

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Linear(8, 8).eval()
        self.x = torch.randn(2, 8)


class LlamaPrefill(Case):
    key, label = "llama_prefill", "(c) Llama prefill, 16 tokens"
    fn = staticmethod(llama_prefill)

    def __init__(self):
        from hf_llama_inference import build_model

        self.model, self.prompt = build_model()

    def args(self, device):
        if device == "cpu":
            return (self.model, self.prompt)
        return (copy.deepcopy(self.model).to(device), self.prompt.to(device))


class LlamaDecode(LlamaPrefill):
    key, label = "llama_decode", "(d) Llama decode step, static KV cache"
    fn = staticmethod(llama_decode)
    CACHE_LEN = 128
    #: each call appends one position to the cache; a batch must fit in it
    max_batch = 100

    def __init__(self):
        super().__init__()
        self.tok = torch.tensor([[7]])

    def _cache(self, device):
        """A static cache holding the prompt (prefilled eagerly on the CPU), on device."""
        from transformers import StaticCache

        cache = StaticCache(config=self.model.config, max_cache_len=self.CACHE_LEN)
        with torch.no_grad():
            self.model(self.prompt, past_key_values=cache)
        if device != "cpu":
            for layer in cache.layers:
                layer.keys = layer.keys.to(device)
                layer.values = layer.values.to(device)
                layer.cumulative_length = layer.cumulative_length.to(device)
                layer.device = torch.device(device)
        return cache

    def args(self, device):
        model = self.model if device == "cpu" else copy.deepcopy(self.model).to(device)
        return (model, self.tok.to(device), self._cache(device))

    def reset(self, args):
        with torch.no_grad():
            for layer in args[2].layers:
                layer.cumulative_length.fill_(self.prompt.shape[1])


CASES = {c.key: c for c in (MLP, BERT, LlamaPrefill, LlamaDecode, Tiny)}


# ---------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------


def _busy_and_own() -> Tuple[float, float]:
    from run import _busy_seconds, _own_seconds  # bench/run.py

    return _busy_seconds(), _own_seconds()


def _max_abs_diff(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.detach().cpu().float() - ref.float()).abs().max().item()


def bench_case(case: Case, rounds: int, batch_s: float, max_wait: float) -> Dict[str, Any]:
    from run import wait_for_quiet  # bench/run.py

    res: Dict[str, Any] = {"key": case.key, "label": case.label, "in_geomean": case.in_geomean}
    calls: Dict[str, Callable[[], Any]] = {}
    argsets: Dict[str, Tuple[Any, ...]] = {}
    with torch.no_grad():
        argsets["eager"] = case.args("cpu")
        case.reset(argsets["eager"])
        ref = case.fn(*argsets["eager"])
        calls["eager"] = lambda: case.fn(*argsets["eager"])

        cold: Dict[str, float] = {}
        diffs: Dict[str, float] = {}
        for variant, backend, device in (("nkipy", "nkipy", "nkipy"),
                                         ("inductor", INDUCTOR_BACKEND, "cpu"),
                                         ("nkipy_cpu", "nkipy", "cpu")):
            args = case.args(device)
            argsets[variant] = args
            compiled = torch.compile(case.fn, backend=backend, dynamic=False)
            case.reset(args)
            t = time.perf_counter()
            out = compiled(*args)
            spiky.flush()
            cold[variant] = time.perf_counter() - t
            if variant == "nkipy":
                assert out.device.type == "nkipy", out.device
            diffs[variant] = _max_abs_diff(out, ref)
            calls[variant] = (lambda c, a: lambda: c(*a))(compiled, args)
            print(f"  {variant:9} first call (compiles) {cold[variant]:7.2f} s, "
                  f"max |diff| vs eager {diffs[variant]:.2e}", flush=True)
        res["cold_s"] = {"nkipy": cold["nkipy"], "inductor": cold["inductor"],
                         "nkipy_cpu_first_call": cold["nkipy_cpu"]}
        res["max_abs_diff_vs_eager"] = diffs
        res["ref_max_abs"] = ref.abs().max().item()

        # warm up and size the batches: about batch_s seconds of the slowest variant
        per = {}
        for v in VARIANTS:
            case.reset(argsets[v])
            calls[v]()
            t = time.perf_counter()
            calls[v]()
            spiky.flush()
            per[v] = time.perf_counter() - t
        n = max(1, min(case.max_batch, int(batch_s / max(max(per.values()), 1e-7))))
        res["calls_per_batch"] = n
        res["rounds"] = rounds

        load = wait_for_quiet(0.25, max_wait, case.key)
        time.sleep(0.3)  # let idle worker threads go to sleep
        b0, o0 = _busy_and_own()
        w0 = time.perf_counter()
        samples: Dict[str, List[float]] = {v: [] for v in VARIANTS}
        for r in range(rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            for v in order:
                case.reset(argsets[v])
                f = calls[v]
                time.sleep(SETTLE_S)
                t = time.perf_counter()
                for _ in range(n):
                    f()
                # pipelined calls return before their kernel ends: a batch is done
                # when its last execution is (spiky.flush waits for it)
                spiky.flush()
                samples[v].append((time.perf_counter() - t) / n)
        wall = time.perf_counter() - w0
        b1, o1 = _busy_and_own()
        res["other_load_cpus"] = round(max(0.0, (b1 - b0) - (o1 - o0)) / wall, 3)
        res["other_load_before_cpus"] = round(load, 3)
    res["ms"] = {v: statistics.median(s) * 1e3 for v, s in samples.items()}
    res["ms_min"] = {v: min(s) * 1e3 for v, s in samples.items()}
    ms = res["ms"]
    res["x_eager"] = {v: ms["eager"] / ms[v] for v in VARIANTS if v != "eager"}
    res["x_inductor"] = {v: ms["inductor"] / ms[v] for v in ("nkipy", "nkipy_cpu")}
    return res


def warm_up_backends() -> Dict[str, float]:
    """Compiles one trivial graph per backend: one-time imports and set-up."""
    out = {}
    x = torch.randn(4, 4)
    for name, backend in (("nkipy", "nkipy"), ("inductor", INDUCTOR_BACKEND)):
        f = torch.compile(lambda t: torch.relu(t) * 2.0 + 1.0, backend=backend, dynamic=False)
        t = time.perf_counter()
        with torch.no_grad():
            f(x)
        out[name] = time.perf_counter() - t
    return out


def geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def targets(cases: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    models = [c for c in cases if c["in_geomean"]]
    tiny = next((c for c in cases if c["key"] == "tiny"), None)
    rows = []
    if models:
        worst = min(models, key=lambda c: c["x_eager"]["nkipy"])
        rows.append({"target": "nkipy faster than eager on every model (a-d)",
                     "figure": f"slowest: {worst['x_eager']['nkipy']:.2f}x eager "
                               f"({worst['label']})",
                     "met": all(c["x_eager"]["nkipy"] > 1.0 for c in models)})
        g = geomean([c["x_inductor"]["nkipy"] for c in models])
        rows.append({"target": "nkipy >= inductor, geometric mean over models (a-d)",
                     "figure": f"{g:.2f}x inductor", "met": g >= 1.0})
    if tiny:
        nk, ind = tiny["ms"]["nkipy"] * 1e3, tiny["ms"]["inductor"] * 1e3
        rows.append({"target": "tiny-graph per-call overhead <= inductor's (e)",
                     "figure": f"nkipy {nk:.1f} us, inductor {ind:.1f} us per call "
                               f"(nkipy, CPU tensors: {tiny['ms']['nkipy_cpu'] * 1e3:.1f} us)",
                     "met": nk <= ind})
    if cases:
        rows.append({"target": "cold compile reported (f)",
                     "figure": ", ".join(f"{c['key']} {c['cold_s']['nkipy']:.2f} s vs "
                                         f"{c['cold_s']['inductor']:.2f} s" for c in cases),
                     "met": True})
    return rows


# ---------------------------------------------------------------------------
# Writing the results
# ---------------------------------------------------------------------------


def host_info() -> Dict[str, Any]:
    """bench/run.py's host description plus the torch-side settings."""
    import spike
    from run import host_info as base_host_info  # bench/run.py

    workers = spike.get_spike_singleton().num_workers
    h = base_host_info(workers)
    try:
        import transformers
        tv = transformers.__version__
    except ImportError:
        tv = None
    h.update(torch=torch.__version__, transformers=tv, torch_threads=torch.get_num_threads(),
             nkrt_workers=workers,
             omp_wait_policy=os.environ.get("OMP_WAIT_POLICY") or "unset (default)")
    return h


def _yes(met: Optional[bool]) -> str:
    return "" if met is None else ("yes" if met else "**no**")


def render_md(result: Dict[str, Any], png: Optional[str]) -> str:
    h = result["host"]
    cases = result["cases"]
    lines = [
        "# torch.compile: nkipy against eager and inductor",
        "",
        "Written by `make bench` (bench/bench_torch_compile.py); do not edit by hand.",
        "",
        f"Host: {h['cpu']}, {h['cpus']} CPUs; Python {h['python']}, torch {h['torch']}, "
        f"transformers {h['transformers']}; {h['torch_threads']} torch threads and "
        f"{h['nkrt_workers']} nkrt workers; OMP_WAIT_POLICY={h['omp_wait_policy']}; "
        f"commit {h['commit'] or '?'}; {h['date']}.",
        "",
        "Per-call medians in ms. *nkipy* runs the compiled model with its weights and inputs "
        "on the `nkipy` device (`model.to(\"nkipy\")`, `x.to(\"nkipy\")`); *nkipy, CPU "
        "tensors* calls the same backend with the CPU model. Ratios are the other time / "
        "nkipy's time: above 1 means nkipy is faster. Cold compile: the first call of the "
        "compiled model (Dynamo, AOTAutograd, code generation, C compile, load, one run) with "
        "empty nkipy and inductor caches.",
        "",
        "| model | eager | nkipy | x eager | inductor | x inductor | nkipy, CPU tensors "
        "(x eager) | inductor x eager | cold compile nkipy / inductor (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in cases:
        ms, xe, xi = c["ms"], c["x_eager"], c["x_inductor"]
        us = c["key"] == "tiny"
        fmt = (lambda v: f"{v * 1e3:.1f} µs") if us else (lambda v: f"{v:.3f}")
        lines.append(
            f"| {c['label']} | {fmt(ms['eager'])} | {fmt(ms['nkipy'])} | {xe['nkipy']:.2f}x | "
            f"{fmt(ms['inductor'])} | {xi['nkipy']:.2f}x | {fmt(ms['nkipy_cpu'])} "
            f"({xe['nkipy_cpu']:.2f}x) | {xe['inductor']:.2f}x | "
            f"{c['cold_s']['nkipy']:.2f} / {c['cold_s']['inductor']:.2f} |")
    g = result["geomean"]
    if g:
        lines.append(f"| **geometric mean, (a)-(d)** | | | **{g['nkipy_x_eager']:.2f}x** | | "
                     f"**{g['nkipy_x_inductor']:.2f}x** | ({g['nkipy_cpu_x_eager']:.2f}x) | "
                     f"{g['inductor_x_eager']:.2f}x | |")
    lines += ["", "## Targets (issue 5)", "", "| target | figure | met? |", "| --- | --- | --- |"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {t['figure']} | {_yes(t['met'])} |")
    w = result["warm_up_s"]
    lines += [
        "",
        "## Notes",
        "",
        f"- {result['rounds']} rounds; in each, every variant runs a batch of calls (as many "
        f"as the slowest variant makes in about {result['batch_s'] * 1e3:.0f} ms; the decode "
        f"step at most {LlamaDecode.max_batch} calls, as each call appends to the KV cache, "
        "reset between batches), in rotating order. The median per-call time over rounds is reported; "
        "`torch_compile.json` has the minima too.",
        "- Every compiled result is checked against eager (max abs difference: "
        + ", ".join(f"{c['key']} nkipy {c['max_abs_diff_vs_eager']['nkipy']:.1e} / inductor "
                    f"{c['max_abs_diff_vs_eager']['inductor']:.1e}" for c in cases) + ").",
        "- All compiled with `dynamic=False`. The Llama is `build_model()` of "
        "examples/torch_to_nkipy/hf_llama_inference.py (Hugging Face LlamaForCausalLM, 2 "
        "layers, hidden 128, vocab 512, random weights); prefill is `model(prompt).logits` on "
        "16 tokens, the decode step `model(input_ids=tok, past_key_values=cache).logits` with "
        f"a `StaticCache` of {LlamaDecode.CACHE_LEN} positions holding the prompt (on the nkipy "
        "device for the nkipy variant); the cache update happens in the compiled graph.",
        f"- Before the first model each backend compiled one trivial graph (3 ops): nkipy "
        f"{w['nkipy']:.2f} s, inductor {w['inductor']:.2f} s, the one-time imports and set-up "
        "of each, kept out of the models' cold-compile figures.",
        "- Other processes' CPU use while each model was timed (the host is shared): "
        + ", ".join(f"{c['key']} {c['other_load_cpus']:.2f}" for c in cases)
        + " CPUs. Interleaving makes the ratios robust to it; absolute times are not.",
    ]
    if png:
        lines += ["", f"![torch.compile benchmarks]({png})"]
    lines.append("")
    return "\n".join(lines)


def render_png(result: Dict[str, Any], path: Path) -> bool:
    plt = charts.pyplot()
    if plt is None:
        return False
    cases = result["cases"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 0.6 * len(cases) + 2.2))
    bars = (("nkipy", "nkipy, nkipy tensors", "#3b7dd8"),
            ("nkipy_cpu", "nkipy, CPU tensors", "#9cc0ef"),
            ("inductor", "inductor", "#e0873a"))
    hgt = 0.26
    for k, (v, label, color) in enumerate(bars):
        ax1.barh([i + (k - 1) * hgt for i in range(len(cases))],
                 [c["x_eager"][v] for c in cases], height=hgt, color=color, label=label)
    ax1.axvline(1.0, color="black", linewidth=0.8)
    ax1.set_yticks(range(len(cases)), [c["label"] for c in cases], fontsize=7)
    ax1.invert_yaxis()
    charts.ratio_axis(ax1, [c["x_eager"][v] for c in cases for v, _, _ in bars])
    ax1.set_xlabel("speed-up over eager CPU PyTorch (above 1x: faster than eager)")
    ax1.set_title("per-call time vs eager")
    ax1.legend(fontsize=7, loc="best")
    cold_compile_panel(ax2, cases, hgt)
    fig.tight_layout()
    charts.save(fig, path)
    return True


def cold_compile_panel(ax: Any, cases: List[Dict[str, Any]], hgt: float) -> None:
    """The chart's right panel: each case's cold compile, nkipy beside inductor
    (also drawn by bench_models.py)."""
    for k, (v, color) in enumerate((("nkipy", "#3b7dd8"), ("inductor", "#e0873a"))):
        ax.barh([i + (k - 0.5) * hgt for i in range(len(cases))],
                [c["cold_s"][v] for c in cases], height=hgt, color=color, label=v)
    ax.set_yticks(range(len(cases)), [c["key"] for c in cases], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("cold compile, s (first call, empty caches)")
    ax.set_title("cold compile")
    ax.legend(fontsize=7, loc="best")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(CASES),
                    help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--quick", action="store_true", help="fewer, shorter rounds (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None, help="timing rounds (default 31)")
    ap.add_argument("--max-wait", type=float, default=10.0,
                    help="seconds to wait for a quiet host before timing each model")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    ap.add_argument("--replot", action="store_true",
                    help="draw torch_compile.png again from torch_compile.json; measure nothing")
    args = ap.parse_args(argv)
    if args.replot:
        return 0 if render_png(charts.load_result(Path(args.out), "torch_compile.json"),
                               Path(args.out) / "torch_compile.png") else 1
    keys = [k for k in args.models.split(",") if k]
    for k in keys:
        if k not in CASES:
            ap.error(f"unknown model {k!r} (known: {', '.join(CASES)})")
    rounds = args.rounds or (5 if args.quick else 31)
    batch_s = 0.02 if args.quick else 0.05

    torch.set_num_threads(os.cpu_count() or 1)
    import spike_torch  # noqa: F401  (the nkipy device)
    from torch_to_nkipy import init_nkipy_backend

    nkipy_cache = tempfile.mkdtemp(prefix="bench_nkipy_cache_")
    init_nkipy_backend(nkipy_cache=nkipy_cache, log_level=30)
    t_start = time.perf_counter()
    try:
        host = host_info()
        print(f"torch {torch.__version__}: {host['torch_threads']} torch threads, "
              f"{host['nkrt_workers']} nkrt workers; fresh caches {nkipy_cache}, "
              f"{_INDUCTOR_CACHE}", flush=True)
        warm = warm_up_backends()
        print(f"warm-up compiles: nkipy {warm['nkipy']:.2f} s, inductor {warm['inductor']:.2f} s",
              flush=True)
        cases = []
        for k in keys:
            print(f"{CASES[k].label} ...", flush=True)
            try:
                case = CASES[k]()
            except ImportError as exc:  # transformers missing: skip the Llama rows
                print(f"  skipped: {exc}")
                continue
            r = bench_case(case, rounds, batch_s, args.max_wait)
            ms = r["ms"]
            print(f"  eager {ms['eager']:.4f} ms, nkipy {ms['nkipy']:.4f} ms "
                  f"({r['x_eager']['nkipy']:.2f}x eager, {r['x_inductor']['nkipy']:.2f}x "
                  f"inductor), nkipy CPU tensors {ms['nkipy_cpu']:.4f} ms, inductor "
                  f"{ms['inductor']:.4f} ms", flush=True)
            cases.append(r)
            del case
            torch._dynamo.reset()
    finally:
        shutil.rmtree(nkipy_cache, ignore_errors=True)
        shutil.rmtree(_INDUCTOR_CACHE, ignore_errors=True)
    models = [c for c in cases if c["in_geomean"]]
    gm = {}
    if models:
        gm = {"nkipy_x_eager": geomean([c["x_eager"]["nkipy"] for c in models]),
              "nkipy_x_inductor": geomean([c["x_inductor"]["nkipy"] for c in models]),
              "nkipy_cpu_x_eager": geomean([c["x_eager"]["nkipy_cpu"] for c in models]),
              "inductor_x_eager": geomean([c["x_eager"]["inductor"] for c in models]),
              "models": [c["key"] for c in models]}
    result = {"host": host, "rounds": rounds, "batch_s": batch_s, "quick": args.quick,
              "warm_up_s": warm, "cases": cases, "geomean": gm, "targets": targets(cases),
              "total_s": round(time.perf_counter() - t_start, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = "torch_compile.png" if render_png(result, out / "torch_compile.png") else None
    (out / "torch_compile.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "torch_compile.md").write_text(render_md(result, png))
    print()
    print((out / "torch_compile.md").read_text())
    print(f"total {result['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
