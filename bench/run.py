"""`make bench`: the runtime benchmarks of the NKIPy stack, with their targets.

Runs the C benchmarks (build/bench_nkrt, from bench/bench_nkrt.c) and the
Python ones (bench/bench_spike.py) in one go, with the same worker-thread
count for both, and writes

    docs/benchmarks/runtime.json   every figure, the host, the settings
    docs/benchmarks/runtime.md     the table: benchmark, ours, baseline,
                                   ratio, target, met?
    docs/benchmarks/runtime.png    the same as a picture (when matplotlib
                                   is installed; `make bench` installs it)

All figures are medians over repeated batches. The host is shared, so each
section also measures how much CPU other processes used while it ran; a
section that ran beside more than --max-other-load CPUs of foreign work is
measured again (up to --attempts times) and the quietest attempt is kept.

    python bench/run.py --c-bench build/bench_nkrt [--quick] [--out docs/benchmarks]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_spike  # noqa: E402  (after the path tweak above)
import charts  # noqa: E402

# ---------------------------------------------------------------------------
# Measuring the rest of the host
# ---------------------------------------------------------------------------


def _busy_seconds() -> float:
    """CPU seconds the whole host has spent busy since boot (from /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return 0.0
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    busy = sum(values[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    """CPU seconds used by this process and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def other_load(seconds: float) -> float:
    """CPUs kept busy by other processes over the next `seconds` (we sleep meanwhile)."""
    b0, o0 = _busy_seconds(), _own_seconds()
    time.sleep(seconds)
    return max(0.0, (_busy_seconds() - b0) - (_own_seconds() - o0)) / seconds


def wait_for_quiet(max_other: float, max_wait: float, label: str) -> float:
    """Waits (up to max_wait seconds) until other processes use at most max_other CPUs."""
    deadline = time.monotonic() + max_wait
    load = other_load(0.5)
    said = False
    while load > max_other and time.monotonic() < deadline:
        if not said:
            print(f"  {label}: waiting for the host to go quiet (other processes use "
                  f"{load:.2f} CPUs)", flush=True)
            said = True
        load = other_load(1.0)
    return load


def measured(fn: Callable[[], Any], attempts: int, max_other: float,
             label: str, max_wait: float = 60.0,
             host_ok: Optional[Callable[[Any], bool]] = None) -> Tuple[Any, Dict[str, float]]:
    """Runs fn, retrying while other processes kept more than max_other CPUs busy
    (or while host_ok(result), a check of the host's own figures, is False).

    Before each attempt waits up to max_wait seconds for the host to go quiet.
    Returns fn's result from the best attempt (host_ok first, then the least
    foreign load) and that attempt's figures.
    """
    best: Optional[Tuple[Any, Dict[str, float]]] = None

    def rank(info: Dict[str, float]) -> Tuple[bool, float]:
        return (not info["host_ok"], info["other_load_cpus"])

    for attempt in range(1, attempts + 1):
        wait_for_quiet(max_other, max_wait, label)
        b0, o0, t0 = _busy_seconds(), _own_seconds(), time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t0
        other = max(0.0, (_busy_seconds() - b0) - (_own_seconds() - o0)) / max(wall, 1e-9)
        good = host_ok(result) if host_ok else True
        info = {"attempt": attempt, "wall_s": round(wall, 3), "other_load_cpus": round(other, 3),
                "host_ok": good}
        if best is None or rank(info) < rank(best[1]):
            best = (result, info)
        if other <= max_other and good:
            break
        if not good and attempt < attempts:
            print(f"  {label}: the host itself did not scale to two threads meanwhile; "
                  "measuring again", flush=True)
            continue
        if attempt < attempts:
            print(f"  {label}: other processes used {other:.2f} CPUs meanwhile; measuring "
                  "again", flush=True)
    assert best is not None
    return best


# ---------------------------------------------------------------------------
# Running the two halves
# ---------------------------------------------------------------------------


def run_c_bench(path: Path, neff_dir: Path, workers: int, quick: bool) -> Dict[str, Any]:
    cmd = [str(path), "--json", "--neff-dir", str(neff_dir)]
    if quick:
        cmd += ["--repeats", "5", "--iters", "2000", "--spin-reps", "50"]
    env = dict(os.environ, NKRT_NUM_WORKERS=str(workers))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bench/run.py: {' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{proc.stderr}")
    return json.loads(proc.stdout)


def host_info(workers: int) -> Dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        if commit and dirty:
            commit += "+local changes"
    except OSError:
        commit = ""
    import numpy

    return {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "cpu": model,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "commit": commit,
        "num_workers": workers,
    }


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


def _us(ns: float) -> str:
    return f"{ns / 1000:.2f} µs" if ns >= 1000 else f"{ns:.0f} ns"


def build_rows(c: Dict[str, Any], py: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The table rows: what was measured against what, and whether it met its target."""
    rows: List[Dict[str, Any]] = []
    sync = c["exec_sync_ns"]["median"]
    direct = c["kernel_direct_ns"]["median"]
    rows.append({
        "id": "a.sync", "benchmark": "C: nkrt_execute round trip, noop.neff",
        "ours": _us(sync), "baseline": f"kernel called directly: {_us(direct)}",
        "ratio": f"{sync / direct:.0f}x", "target": "< 5 µs", "met": sync < 5000,
        "value_ns": sync,
    })
    asy = c["exec_async_ns"]
    rows.append({
        "id": "a.async", "benchmark": "C: nkrt_execute_async + nkrt_event_wait, noop.neff",
        "ours": f"{_us(asy['median'])} (min {_us(asy['min'])}, max {_us(asy['max'])})",
        "baseline": f"nkrt_execute: {_us(sync)}", "ratio": f"{asy['median'] / sync:.0f}x",
        "target": "none (reported)", "met": None, "value_ns": asy["median"],
    })
    ex = py["execute"]
    for key, name in (("spike_execute", "Python: Spike.execute (NrtTensor dicts)"),
                      ("spikemodel_call", "Python: SpikeModel.__call__, preallocated outputs")):
        v = ex[key]["median"]
        rows.append({
            "id": f"b.{key}", "benchmark": name, "ours": f"{_us(v)} (+{_us(v - sync)})",
            "baseline": f"C nkrt_execute: {_us(sync)}", "ratio": f"{v / sync:.1f}x",
            "target": "Python adds < 5 µs", "met": (v - sync) < 5000, "value_ns": v,
            "added_ns": v - sync,
        })
    cp = py["copies"]
    base = cp["numpy_copyto"]
    mib = cp["bytes"] >> 20
    for key, name, bkey, bname in (
        ("write_from_numpy", f"SpikeTensor.write_from_numpy, {mib} MiB", "numpy_copyto",
         "np.copyto"),
        ("tensor_read_to_pybuffer", f"tensor_read_to_pybuffer into a preallocated array, {mib} MiB",
         "numpy_copyto", "np.copyto"),
        ("numpy_method", f"SpikeTensor.numpy() (allocates its result), {mib} MiB",
         "numpy_ndarray_copy", "ndarray.copy() (allocates)"),
    ):
        ours, b = cp[key], cp[bkey]
        ratio = b["median"] / ours["median"]
        rows.append({
            "id": f"c.{key}", "benchmark": name, "ours": f"{ours['gb_per_s']:.2f} GB/s",
            "baseline": f"{bname}: {b['gb_per_s']:.2f} GB/s", "ratio": f"{ratio:.2f}",
            "target": ">= 0.8", "met": ratio >= 0.8, "value": ratio,
        })
    numpy_vs_copyto = base["median"] / cp["numpy_method"]["median"]
    tc = py["two_cores"]
    r = tc["ratio"]["median"]
    rows.append({
        "id": "d.two_cores", "benchmark": "2 cores vs 1: spin.neff, one Python thread per core",
        "ours": f"{tc['two_cores_per_s']['median']:.0f} exec/s",
        "baseline": f"1 core: {tc['one_core_per_s']['median']:.0f} exec/s",
        "ratio": f"{r:.2f}x (host alone: {tc['host_two_thread_ratio']['median']:.2f}x)",
        "target": ">= 1.7x", "met": r >= 1.7, "value": r,
        "host_ratio": tc["host_two_thread_ratio"]["median"],
    })
    cr = c["spin"]["ratio"]
    rows.append({
        "id": "d.two_cores_c", "benchmark": "2 cores vs 1 from C (bench_nkrt, for reference)",
        "ours": f"{c['spin']['two_cores_per_s']:.0f} exec/s",
        "baseline": f"1 core: {c['spin']['one_core_per_s']:.0f} exec/s",
        "ratio": f"{cr:.2f}x (host alone: {c['spin']['host_two_thread_ratio']:.2f}x)",
        "target": ">= 1.7x", "met": cr >= 1.7, "value": cr,
        "host_ratio": c["spin"]["host_two_thread_ratio"],
    })
    next(r for r in rows if r["id"] == "c.numpy_method")["numpy_vs_copyto"] = numpy_vs_copyto
    return rows


SECTION_OF = {"a": "C", "b": "execute", "c": "copies", "d": "two_cores"}
#: Two-thread scaling the host alone must show for a two-core figure to count.
HOST_SCALING = 1.8


def mark_contended(rows: List[Dict[str, Any]], sections: Dict[str, Any],
                   max_other: float) -> None:
    """Flags rows whose section ran beside more than max_other CPUs of other work."""
    for r in rows:
        sec = "C" if r["id"] == "d.two_cores_c" else SECTION_OF[r["id"][0]]
        load = sections[sec]["other_load_cpus"]
        if load > max_other:
            r["host_busy_cpus"] = load


def _met_cell(r: Dict[str, Any]) -> str:
    m = r["met"]
    text = "—" if m is None else ("yes" if m else "**no**")
    if "host_busy_cpus" in r:
        text += f" (host busy: {r['host_busy_cpus']:.1f} CPUs of other work)"
    if r.get("host_ratio", HOST_SCALING) < HOST_SCALING:
        text += f" (the host alone scaled only {r['host_ratio']:.2f}x meanwhile)"
    return text


def render_markdown(rows: List[Dict[str, Any]], c: Dict[str, Any], py: Dict[str, Any],
                    host: Dict[str, Any], sections: Dict[str, Any], png: Optional[str]) -> str:
    ex, cp, tc = py["execute"], py["copies"], py["two_cores"]
    sync = c["exec_sync_ns"]["median"]
    lines = [
        "# Runtime benchmarks",
        "",
        "Written by `make bench` (bench/run.py); do not edit by hand. Medians over repeated "
        "batches, ours and the baseline measured in the same run with the same worker "
        "threads.",
        "",
        f"Host: {host['cpu']}, {host['cpus']} CPUs; Python {host['python']}, NumPy "
        f"{host['numpy']}; {host['num_workers']} nkrt workers; commit {host['commit'] or '?'}; "
        f"{host['date']}.",
        "",
        "| benchmark | ours | baseline | ratio | target | met? |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['benchmark']} | {r['ours']} | {r['baseline']} | {r['ratio']} | "
                     f"{r['target']} | {_met_cell(r)} |")
    lines += ["", "## Notes", ""]
    lines.append(
        f"- **a.** {c['repeats']} batches of {c['iters']} calls each. The sync path runs the "
        "kernel inline on the calling thread when the core's queue is idle (two uncontended "
        "mutex round trips, a name lookup per tensor, the kernel call); the direct call is the "
        "same noop kernel called through its function pointer.")
    asy = c["exec_async_ns"]
    lines.append(
        f"- **a. async** (median {_us(asy['median'])}, min {_us(asy['min'])}, max "
        f"{_us(asy['max'])}): submit hands the work to the core's queue thread and the caller "
        "waits on the event. Both sides poll (yielding the CPU) for up to 20 µs before sleeping "
        "on a condition variable, so a hand-off that arrives meanwhile costs about a microsecond "
        "instead of a futex wake-up, which on this KVM guest can take 15-30 µs when the other "
        "virtual CPU has gone idle.")
    added = ex["spikemodel_call"]["median"] - sync
    lines.append(
        f"- **b.** Spike.execute adds {_us(ex['spike_execute']['median'] - sync)} to the C "
        f"figure (argument parsing, two dict walks, two tensor sets built and freed, the "
        f"read lock, releasing the GIL). SpikeModel.__call__ adds {_us(added)}: a well-formed "
        "call (plain dicts matching the model) takes a fast path that compares names, shapes, "
        "dtypes and cores without building any message; anything else goes through the full "
        "validation, whose errors say what was expected."
        f" With outputs=None (allocating them each call) it takes "
        f"{_us(ex['spikemodel_call_alloc']['median'])}. Spike.benchmark, which times each "
        f"nkrt_execute in C, reports {_us(ex['spike_benchmark_in_c_ns']['median'])} per call.")
    nvc = next(r for r in rows if r["id"] == "c.numpy_method")["numpy_vs_copyto"]
    lines.append(
        f"- **c.** {cp['repeats']} alternating repeats per copy, pages touched beforehand. "
        "Host-to-device and device-to-host are one memcpy between the NumPy buffer and the "
        "arena (GIL released), so they run at memcpy speed like np.copyto. "
        f"SpikeTensor.numpy() allocates a fresh {cp['bytes'] >> 20} MiB array per call and pays "
        f"its page faults: it reaches {nvc:.2f} of np.copyto into a preallocated array, and is "
        "compared in the table with NumPy's own allocating copy, which pays the same faults. "
        "Read into a preallocated array (tensor_read_to_pybuffer) when that matters.")
    lines.append(
        f"- **d.** spin.neff with n={tc['spin_iters']} (about {tc['exec_ms_one_core']:.2f} ms "
        f"per execution, single-threaded, no parallel_for), {tc['reps']} executions per thread, "
        f"{tc['repeats']} alternating repeats; each thread calls SpikeModel.__call__, which "
        "releases the GIL while the kernel runs. Results checked against NumPy "
        f"(max abs error {tc['max_abs_err_vs_numpy']:.1e}). *Host alone* is the control: the "
        "same kernel called on plain threads without the runtime (from Python through ctypes, "
        "which also drops the GIL; from C on pthreads), interleaved with the runtime runs. It "
        "shows what the host itself delivered at the time: when something else holds a CPU "
        "(another process, or a noisy neighbour of this virtual machine), both fall to about "
        "1.0, and the section is measured again.")
    lines.append("- Other processes' CPU use during each section (the host is shared): "
                 + ", ".join(f"{k} {v['other_load_cpus']:.2f} CPUs (attempt {v['attempt']})"
                             for k, v in sections.items()) + ".")
    if png:
        lines += ["", f"![runtime benchmarks]({png})"]
    lines.append("")
    return "\n".join(lines)


#: Bar colours by outcome, shared by both panels and named in their legends.
_OUTCOME = (("target met", "tab:green"), ("target missed", "tab:red"), ("no target", "tab:gray"))


def _outcome_color(met: Any) -> str:
    return dict(_OUTCOME)["no target" if met is None else ("target met" if met else "target missed")]


def render_png(rows: List[Dict[str, Any]], path: Path) -> bool:
    plt = charts.pyplot()
    if plt is None:
        return False
    lat = [r for r in rows if r["id"].startswith(("a.", "b."))]
    thr = [r for r in rows if r["id"].startswith(("c.", "d."))]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    labels = [r["benchmark"].replace(", noop.neff", "").replace("Python: ", "Py: ")
              for r in lat]
    values = [r["value_ns"] / 1000 for r in lat]
    ax1.barh(range(len(lat)), values, color=[_outcome_color(r["met"]) for r in lat])
    ax1.set_yticks(range(len(lat)), labels, fontsize=7)
    ax1.invert_yaxis()
    charts.ratio_axis(ax1, values, unit="", extra=(5.0,), log_above=1.0)
    ax1.axvline(5.0, color="black", linestyle="--", linewidth=1, label="5 µs target")
    ax1.set_xlabel("execute round trip, µs (log scale; lower is better)")
    ax1.set_title("Execute latency (noop NEFF)")
    used = {_outcome_color(r["met"]) for r in lat}
    handles = [h for h in _OUTCOME if h[1] in used]
    charts.color_legend(ax1, handles + [("5 µs target (dashed)", "black")],
                        loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    short = {"c.write_from_numpy": "write_from_numpy (64 MiB)",
             "c.tensor_read_to_pybuffer": "tensor_read_to_pybuffer (64 MiB)",
             "c.numpy_method": "SpikeTensor.numpy() (64 MiB)",
             "d.two_cores": "2 cores vs 1, Python threads",
             "d.two_cores_c": "2 cores vs 1, C threads"}
    labels2 = [short.get(r["id"], r["id"]) for r in thr]
    values2 = [r["value"] for r in thr]
    targets = [0.8 if r["id"].startswith("c.") else 1.7 for r in thr]
    ax2.barh(range(len(thr)), values2, color=[_outcome_color(r["met"]) for r in thr])
    for i, t in enumerate(targets):
        ax2.plot([t, t], [i - 0.4, i + 0.4], color="black", linewidth=2)
        if "host_ratio" in thr[i]:
            h = thr[i]["host_ratio"]
            ax2.plot([h, h], [i - 0.4, i + 0.4], color="tab:gray", linewidth=2, linestyle=":")
    ax2.set_yticks(range(len(thr)), labels2, fontsize=7)
    ax2.invert_yaxis()
    ax2.set_xlim(0, max(values2 + targets) * 1.3)
    ax2.set_xlabel("ratio to baseline (higher is better)")
    ax2.set_title("64 MiB copies vs NumPy; 2 cores vs 1")
    used2 = {_outcome_color(r["met"]) for r in thr}
    charts.color_legend(ax2, [h for h in _OUTCOME if h[1] in used2]
                        + [("target (black line)", "black"),
                           ("the host alone (dotted)", "tab:gray")],
                        loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    fig.tight_layout()
    charts.save(fig, path)
    return True


# ---------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="Runs the runtime benchmarks and writes "
                                "docs/benchmarks/runtime.{json,md,png}.")
    p.add_argument("--c-bench", default=str(REPO / "build" / "bench_nkrt"),
                   help="the C benchmark binary (make build/bench_nkrt)")
    p.add_argument("--neff-dir", default=str(REPO / "build" / "neff"))
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="nkrt worker threads for both the C and the Python runs")
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    p.add_argument("--attempts", type=int, default=4)
    p.add_argument("--max-wait", type=float, default=60.0,
                   help="seconds to wait for a quiet host before each attempt")
    p.add_argument("--max-other-load", type=float, default=0.25,
                   help="CPUs of foreign work tolerated before a section is measured again")
    p.add_argument("--replot", action="store_true",
                   help="draw runtime.png again from runtime.json; measure nothing")
    args = p.parse_args(argv)
    if args.replot:
        rows = charts.load_result(Path(args.out), "runtime.json")["rows"]
        return 0 if render_png(rows, Path(args.out) / "runtime.png") else 1

    neff_dir = Path(args.neff_dir)
    for name in ("noop", "spin"):
        if not (neff_dir / f"{name}.neff").is_file():
            raise SystemExit(f"bench/run.py: {neff_dir / name}.neff is missing; run "
                             "`make bench` (it builds the test NEFFs)")
    c_bench = Path(args.c_bench)
    if not c_bench.is_file():
        raise SystemExit(f"bench/run.py: {c_bench} is missing; run `make bench`")

    import spike

    spike.configure(visible_cores=[0, 1], core_memory_bytes=512 << 20,
                    num_workers=args.workers)
    host = host_info(args.workers)
    print(f"benchmarking on {host['cpu']} ({host['cpus']} CPUs, {args.workers} workers)",
          flush=True)
    sections: Dict[str, Any] = {}

    print("C: execute round trips, two cores ...", flush=True)
    c, sections["C"] = measured(lambda: run_c_bench(c_bench, neff_dir, args.workers, args.quick),
                                args.attempts, args.max_other_load, "C benchmarks",
                                args.max_wait,
                                lambda r: r["spin"]["host_two_thread_ratio"] >= HOST_SCALING)
    print("Python: execute round trips ...", flush=True)
    ex, sections["execute"] = measured(
        lambda: bench_spike.bench_execute(neff_dir, repeats=7 if args.quick else 21,
                                          iters=2000 if args.quick else 20000),
        args.attempts, args.max_other_load, "Python execute", args.max_wait)
    print("Python: 64 MiB copies ...", flush=True)
    cp, sections["copies"] = measured(
        lambda: bench_spike.bench_copies(64 << 20, repeats=5 if args.quick else 21),
        args.attempts, args.max_other_load, "copies", args.max_wait)
    print("Python: two cores ...", flush=True)
    tc, sections["two_cores"] = measured(
        lambda: bench_spike.bench_two_cores(neff_dir, spin_iters=2000,
                                            reps=50 if args.quick else 200,
                                            repeats=3 if args.quick else 7),
        args.attempts, args.max_other_load, "two cores", args.max_wait,
        lambda r: r["host_two_thread_ratio"]["median"] >= HOST_SCALING)
    py = {"num_workers": spike.get_spike_singleton().num_workers, "execute": ex, "copies": cp,
          "two_cores": tc}

    rows = build_rows(c, py)
    mark_contended(rows, sections, args.max_other_load)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = "runtime.png" if render_png(rows, out / "runtime.png") else None
    md = render_markdown(rows, c, py, host, sections, png)
    (out / "runtime.md").write_text(md)
    record = {"host": host, "sections": sections, "c": c, "python": py,
              "rows": [{k: v for k, v in r.items()} for r in rows]}
    (out / "runtime.json").write_text(json.dumps(record, indent=1) + "\n")

    print()
    print("| benchmark | ours | baseline | ratio | target | met? |")
    for r in rows:
        print(f"| {r['benchmark']} | {r['ours']} | {r['baseline']} | {r['ratio']} | "
              f"{r['target']} | {_met_cell(r)} |")
    print(f"\nwrote {out / 'runtime.md'}, {out / 'runtime.json'}"
          + (f", {out / png}" if png else " (no PNG: matplotlib is not installed)"))
    missed = [r["id"] for r in rows if r["met"] is False]
    if missed:
        print(f"targets missed: {', '.join(missed)} (see the notes in runtime.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
