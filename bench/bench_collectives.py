"""Collectives: algorithm bandwidth of all_reduce, all_gather and reduce_scatter.

For 4 KiB to 64 MiB, 2 and 4 ranks (processes on this host), in one run:

- *runtime*: the runtime's shared-memory communicator as compiled graphs use it,
  called directly (``spike._spike._comm_collective``, the same
  ``nkrt_runtime_collective`` a kernel's ``env->lib->collective`` reaches) on
  ``nkipy`` tensors;
- *nkipy pg*: the eager ``"nkipy"`` process group (``dist.all_reduce`` ...) on
  ``nkipy`` tensors;
- *gloo*: a gloo group on CPU tensors;
- *memcpy*: ``torch.Tensor.copy_`` of the same bytes between two CPU buffers
  (on rank 0 while the others wait).

Size S is the bytes of the all_reduce tensor, of the all_gather output and of the
reduce_scatter input; algorithm bandwidth = S / time per call. Every method runs
in the same processes with the same threads. Writes collectives.{json,md,png}.

    python bench/bench_collectives.py [--quick] [--out docs/benchmarks]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

KIB, MIB = 1024, 1024 * 1024
SIZES = [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB]
OPS = ("all_reduce", "all_gather", "reduce_scatter")
METHODS = ("runtime", "nkipy_pg", "gloo", "memcpy")
LABELS = {"runtime": "runtime communicator", "nkipy_pg": "eager nkipy pg", "gloo": "gloo",
          "memcpy": "memcpy"}


def _iters(size: int, quick: bool) -> int:
    """Calls per timed batch: many at small sizes, few at large ones."""
    n = max(2, min(200, (32 * MIB) // size))
    return max(2, n // 4) if quick else n


# ---------------------------------------------------------------------------
# One rank (a child process)
# ---------------------------------------------------------------------------


def worker(out_path: str, quick: bool) -> None:
    import torch
    import torch.distributed as dist

    import torch_to_nkipy  # noqa: F401  (registers the "nkipy" backend)
    from torch_to_nkipy import distributed as nd

    dist.init_process_group("nkipy")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    pg = dist.distributed_c10d._get_default_group()
    comm = getattr(pg, "_comm", None)
    has_runtime = comm is not None and hasattr(nd, "_ALL_REDUCE")

    def runtime_call(op: str, src: Any, dst: Any) -> None:
        if op == "all_reduce":
            comm.run(nd._ALL_REDUCE, src.dtype, 0, src, dst, src.numel())
        elif op == "all_gather":
            comm.run(nd._ALL_GATHER, src.dtype, 0, src, dst, src.numel())
        elif not (comm.has(nd._REDUCE_SCATTER) and
                  comm.run(nd._REDUCE_SCATTER, src.dtype, 0, src, dst, dst.numel())):
            raise NotImplementedError    # this runtime has no reduce_scatter kind

    results: Dict[str, Any] = {}
    for size in SIZES:
        numel = size // 4
        iters = _iters(size, quick)
        for op in OPS:
            shape_in = numel // world if op == "all_gather" else numel
            shape_out = numel // world if op == "reduce_scatter" else numel
            bufs = {"memcpy": (torch.ones(numel), torch.empty(numel))}
            for dev in ("cpu", "nkipy"):
                src = torch.ones(shape_in, device=dev)
                dst = torch.empty(shape_out, device=dev)
                bufs[dev] = (src, dst)

            def call(method: str) -> None:
                if method == "memcpy":
                    if rank == 0:
                        bufs["memcpy"][1].copy_(bufs["memcpy"][0])
                    return
                dev = "cpu" if method == "gloo" else "nkipy"
                src, dst = bufs[dev]
                group = gloo if method == "gloo" else None
                if method == "runtime":
                    runtime_call(op, src, dst if op != "all_reduce" else src)
                elif op == "all_reduce":
                    dist.all_reduce(src, group=group)
                elif op == "all_gather":
                    dist.all_gather_into_tensor(dst, src, group=group)
                else:
                    dist.reduce_scatter_tensor(dst, src, group=group)

            for method in METHODS:
                if method == "runtime" and not has_runtime:
                    continue
                if method == "memcpy" and op != "all_reduce":
                    continue
                try:
                    call(method)                                  # warm-up
                except NotImplementedError:
                    continue
                best = float("inf")
                for _ in range(2 if quick or size >= 16 * MIB else 3):
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        call(method)
                    t = (time.perf_counter() - t0) / iters
                    best = min(best, t)
                # the slowest rank's time
                tt = torch.tensor([best], dtype=torch.float64)
                dist.all_reduce(tt, op=dist.ReduceOp.MAX, group=gloo)
                results.setdefault(op, {}).setdefault(str(size), {})[method] = {
                    "s": tt.item(), "iters": iters, "bytes": size}
    if rank == 0:
        Path(out_path).write_text(json.dumps({"world": world, "results": results,
                                              "torch_threads": torch.get_num_threads()}))
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def run_world(world: int, quick: bool) -> Dict[str, Any]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        procs = []
        for r in range(world):
            env = {k: v for k, v in os.environ.items()
                   if k not in ("NKRT_CC_ID", "NEURON_RT_VISIBLE_CORES")}
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                       LOCAL_RANK=str(r), WORLD_SIZE=str(world), SPIKE_TORCH_FALLBACK_WARN="0",
                       PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
            cmd = [sys.executable, "-W", "ignore", __file__, "--worker", out] + \
                (["--quick"] if quick else [])
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait(timeout=900) for p in procs]
        if any(codes):
            raise SystemExit(f"bench_collectives: a rank of world {world} failed: {codes}")
        return json.loads(Path(out).read_text())


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------


def _fmt_size(b: int) -> str:
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def _gbs(cell: Optional[Dict[str, Any]]) -> Optional[float]:
    return None if not cell else cell["bytes"] / cell["s"] / 1e9


def targets(worlds: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The issue's targets, per world size."""
    out = []
    for w in worlds:
        res, n = w["results"], w["world"]
        worst_pg = None
        for op in OPS:
            for size in SIZES:
                c = res[op][str(size)]
                if "nkipy_pg" in c and "gloo" in c:
                    x = c["gloo"]["s"] / c["nkipy_pg"]["s"]
                    if worst_pg is None or x < worst_pg[0]:
                        worst_pg = (x, op, size)
        if worst_pg:
            out.append({"target": f"{n} ranks: eager nkipy pg >= gloo at every size and op",
                        "figure": f"worst {worst_pg[0]:.2f}x ({worst_pg[1]}, "
                                  f"{_fmt_size(worst_pg[2])})", "met": worst_pg[0] >= 1.0})
        c = res["all_reduce"][str(4 * KIB)]
        if "nkipy_pg" in c:
            out.append({"target": f"{n} ranks: 4 KiB all_reduce latency <= gloo's",
                        "figure": f"{c['nkipy_pg']['s'] * 1e6:.0f} µs vs "
                                  f"{c['gloo']['s'] * 1e6:.0f} µs",
                        "met": c["nkipy_pg"]["s"] <= c["gloo"]["s"]})
        worst = None
        for size in SIZES:
            c = res["all_reduce"][str(size)]
            if size >= MIB and "runtime" in c:
                x = c["memcpy"]["s"] / c["runtime"]["s"]
                worst = x if worst is None else min(worst, x)
        if worst is not None:
            out.append({"target": f"{n} ranks: compiled all_reduce >= 0.5x memcpy at >= 1 MiB",
                        "figure": f"worst {worst:.2f}x", "met": worst >= 0.5})
    return out


def run_hosts(quick: bool, max_wait: float) -> Dict[str, Any]:
    """all_reduce across 2 simulated hosts x 2 ranks against gloo (bench_hosts.py), or
    why it could not run."""
    import bench_hosts  # bench/bench_hosts.py
    from run import wait_for_quiet  # bench/run.py

    why = bench_hosts.namespaces_unavailable()
    if why:
        return {"skipped": why}
    wait_for_quiet(0.25, max_wait, "simulated hosts")
    print("2 simulated hosts x 2 ranks ...", flush=True)
    return {"rows": bench_hosts.run([1, 16] if quick else [1, 4, 16, 64], 5 if quick else 10)}


def hosts_targets(hosts: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = hosts.get("rows") or []
    if not rows:
        return []
    worst = min(rows, key=lambda r: r["gloo_s"] / r["hosts_s"])
    x = worst["gloo_s"] / worst["hosts_s"]
    return [{"target": "2 simulated hosts x 2 ranks: all_reduce >= 0.8x gloo at >= 1 MiB",
             "figure": f"worst {x:.2f}x ({_fmt_size(worst['bytes'])})", "met": x >= 0.8}]


def render_md(result: Dict[str, Any], png: Optional[str]) -> str:
    h = result["host"]
    lines = [
        "# Collectives: runtime communicator, eager nkipy process group, gloo, memcpy",
        "",
        "Written by `make bench` (bench/bench_collectives.py); do not edit by hand.",
        "",
        f"Host: {h.get('cpu')}, {h.get('cpus')} CPUs; Python {h.get('python')}, torch "
        f"{h.get('torch')}; commit {h.get('commit') or '?'}; {h.get('date')}.",
        "",
        "Algorithm bandwidth in GB/s (size / time per call; size = the all_reduce tensor, the "
        "all_gather output, the reduce_scatter input), the slowest rank's best batch. "
        "*runtime*: the runtime's shared-memory communicator called directly as compiled "
        "graphs' kernels call it, on nkipy tensors; *nkipy pg*: eager `dist.*` on the "
        "`\"nkipy\"` process group, nkipy tensors; *gloo*: a gloo group, CPU tensors; "
        "*memcpy*: `copy_` of the same bytes between two CPU buffers on one rank.",
        "",
    ]
    for w in result["worlds"]:
        n = w["world"]
        for op in OPS:
            lines += [f"## {op}, {n} ranks", "",
                      "| size | runtime | nkipy pg | gloo | memcpy | pg / gloo | "
                      "runtime / memcpy |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for size in SIZES:
                c = w["results"][op][str(size)]
                g = {m: _gbs(c.get(m)) for m in METHODS}
                if op != "all_reduce":
                    g["memcpy"] = _gbs(w["results"]["all_reduce"][str(size)].get("memcpy"))
                cell = (lambda v: "" if v is None else f"{v:.3g}")
                ratio = (lambda a, b: "" if a is None or b is None else f"{a / b:.2f}x")
                lines.append(f"| {_fmt_size(size)} | {cell(g['runtime'])} | "
                             f"{cell(g['nkipy_pg'])} | {cell(g['gloo'])} | {cell(g['memcpy'])} | "
                             f"{ratio(g['nkipy_pg'], g['gloo'])} | "
                             f"{ratio(g['runtime'], g['memcpy'])} |")
            lines.append("")
    hosts = result.get("hosts") or {}
    lines += ["## Simulated hosts", "",
              "all_reduce sum, float32, 2 hosts x 2 ranks (bench/bench_hosts.py: each host in "
              "its own mount and UTS namespaces with a private /dev/shm, loopback between "
              "them). *hosts*: `funcol.all_reduce` in a `torch.compile(backend=\"nkipy\")` "
              "graph on CPU tensors (shared memory within each host, the runtime's gloo "
              "transport between them); *gloo*: `dist.all_reduce` in place over all 4 ranks. "
              "Milliseconds, rank 0's best call.", ""]
    if hosts.get("skipped"):
        lines += [f"Not measured: {hosts['skipped']}", ""]
    else:
        lines += ["| size | hosts (ms) | gloo (ms) | gloo / hosts |", "| --- | ---: | ---: | ---: |"]
        for row in hosts.get("rows", []):
            lines.append(f"| {_fmt_size(row['bytes'])} | {row['hosts_s'] * 1e3:.2f} | "
                         f"{row['gloo_s'] * 1e3:.2f} | {row['gloo_s'] / row['hosts_s']:.2f}x |")
        lines.append("")
    lines += ["## Targets (issue 12)", "", "| target | figure | met? |", "| --- | --- | --- |"]
    for t in result["targets"]:
        lines.append(f"| {t['target']} | {t['figure']} | {'yes' if t['met'] else '**no**'} |")
    lines += ["", f"Total run {result['total_s']:.0f} s; {'quick' if result['quick'] else 'full'} "
              "run. Iterations per batch: 200 at small sizes down to 2 at 64 MiB."]
    if png:
        lines += ["", f"![all_reduce bandwidth]({png})"]
    return "\n".join(lines) + "\n"


def render_png(result: Dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    worlds = result["worlds"]
    fig, axes = plt.subplots(1, len(worlds), figsize=(6 * len(worlds), 4), squeeze=False)
    for ax, w in zip(axes[0], worlds):
        for m in METHODS:
            xs, ys = [], []
            for size in SIZES:
                v = _gbs(w["results"]["all_reduce"][str(size)].get(m))
                if v is not None:
                    xs.append(size)
                    ys.append(v)
            if xs:
                ax.plot(xs, ys, marker="o", label=LABELS[m])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes")
        ax.set_ylabel("GB/s")
        ax.set_title(f"all_reduce, {w['world']} ranks")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--worlds", default="2,4", help="comma-separated world sizes")
    ap.add_argument("--max-wait", type=float, default=20.0,
                    help="seconds to wait for a quiet host before each world size")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    ap.add_argument("--worker", metavar="RESULT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.quick)
        return 0
    import torch

    from run import host_info, wait_for_quiet  # bench/run.py

    t0 = time.perf_counter()
    worlds = []
    for n in [int(v) for v in args.worlds.split(",") if v]:
        wait_for_quiet(0.25, args.max_wait, f"{n} ranks")
        print(f"{n} ranks ...", flush=True)
        worlds.append(run_world(n, args.quick))
    hosts = run_hosts(args.quick, args.max_wait)
    host = host_info(0)
    host.update(torch=torch.__version__, torch_threads=worlds[0]["torch_threads"])
    result = {"host": host, "quick": args.quick, "worlds": worlds, "hosts": hosts,
              "targets": targets(worlds) + hosts_targets(hosts),
              "total_s": round(time.perf_counter() - t0, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = "collectives.png" if render_png(result, out / "collectives.png") else None
    (out / "collectives.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "collectives.md").write_text(render_md(result, png))
    print((out / "collectives.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
