"""Compiled all_reduce across two simulated hosts against gloo alone.

Two hosts x two ranks, as tests/torch_to_nkipy/test_multihost.py makes them:
each host a torchrun agent in its own mount and UTS namespaces (a private
/dev/shm), the network shared (loopback). Every rank times, on the same float32
CPU tensors, ``dist.all_reduce`` over the job's gloo group (the baseline: every
byte over TCP) and a ``torch.compile(backend="nkipy")`` graph holding
``funcol.all_reduce`` (shared memory within a host, the hosts' lead ranks over
the runtime's gloo group between them), and rank 0 prints the ratio
(gloo time / compiled time: above 1 is faster than gloo).

Needs root (or CAP_SYS_ADMIN) for the namespaces. ``make bench`` runs it through
bench/bench_collectives.py (its "Simulated hosts" table); alone:

    python bench/bench_hosts.py [--sizes-mib 1 4 16] [--iters 10]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = textwrap.dedent("""
    import json, os, sys, time, torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch_to_nkipy import init_nkipy_backend, hosts

    sizes, iters = [float(s) for s in sys.argv[1].split(",")], int(sys.argv[2])
    dist.init_process_group("gloo")
    init_nkipy_backend(nkipy_cache=os.path.join(os.environ["RESULTS"], "cache"))
    r = dist.get_rank()
    assert hosts.current_hosts().count == 2, hosts.current_hosts()
    world = dist.group.WORLD
    f = torch.compile(lambda x: funcol.all_reduce(x, "sum", world), backend="nkipy",
                      fullgraph=True)

    def timed(fn, x):
        fn(x)                                   # warm up (compiles, connects)
        dist.barrier()
        best = float("inf")
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(x)
            best = min(best, time.perf_counter() - t0)
        return best

    rows = []
    with torch.no_grad():
        for mib in sizes:
            x = torch.ones(int(mib * (1 << 20)) // 4)
            t_gloo = timed(dist.all_reduce, x.clone())          # in place, no copy
            t_ours = timed(f, x)
            rows.append({"bytes": x.numel() * 4, "gloo_s": t_gloo, "hosts_s": t_ours})
    dist.barrier()
    if r == 0:
        open(os.path.join(os.environ["RESULTS"], "bench.json"), "w").write(json.dumps(rows))
""")


def namespaces_unavailable() -> str:
    """Why two hosts cannot be simulated here ("" when they can)."""
    probe = "mount -t tmpfs tmpfs /dev/shm && hostname probe-host"
    try:
        r = subprocess.run(["unshare", "--mount", "--uts", "sh", "-c", probe],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run unshare: {e}"
    return "" if r.returncode == 0 else \
        f"no mount+UTS namespaces (root needed): {r.stderr.strip()[:200]}"


def run(sizes_mib, iters: int) -> list:
    """Times both on 2 simulated hosts x 2 ranks: a list of {bytes, gloo_s, hosts_s}
    (best call of `iters`, rank 0's)."""
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        script = os.path.join(tmp, "worker.py")
        with open(script, "w") as fh:
            fh.write(WORKER)
        env = {k: v for k, v in os.environ.items()
               if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK", "RANK", "WORLD_SIZE",
                            "NKRT_CC_ID")}
        env.update(PYTHONPATH=ROOT, GLOO_SOCKET_IFNAME="lo", RESULTS=tmp,
                   PYTHONWARNINGS="ignore", SPIKE_TORCH_FALLBACK_WARN="0")
        sizes = ",".join(str(m) for m in sizes_mib)
        procs = []
        for node in range(2):
            cmd = (f"mount -t tmpfs -o mode=1777 tmpfs /dev/shm && hostname bench-host && "
                   f"exec {sys.executable} -m torch.distributed.run --nnodes=2 "
                   f"--node_rank={node} --nproc_per_node=2 --master_addr=127.0.0.1 "
                   f"--master_port={port} {script} {sizes} {iters}")
            log = open(os.path.join(tmp, f"host{node}.log"), "w")
            procs.append(subprocess.Popen(["unshare", "--mount", "--uts", "sh", "-c", cmd],
                                          env=env, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        rcs = [p.wait(timeout=900) for p in procs]
        if any(rcs):
            tails = [open(os.path.join(tmp, f"host{n}.log")).read()[-3000:] for n in range(2)]
            raise RuntimeError(f"bench_hosts: the hosts exited with {rcs}:\n" +
                               "\n".join(tails))
        with open(os.path.join(tmp, "bench.json")) as fh:
            return json.load(fh)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mib", type=float, nargs="+", default=[1, 4, 16])
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    why = namespaces_unavailable()
    if why:
        print(f"bench_hosts: {why}", file=sys.stderr)
        return 1
    print("all_reduce sum, float32, 2 hosts x 2 ranks (simulated; loopback between hosts)")
    for row in run(args.sizes_mib, args.iters):
        print(f"{row['bytes'] / (1 << 20):8g} MiB  gloo {row['gloo_s'] * 1e3:9.2f} ms  "
              f"compiled {row['hosts_s'] * 1e3:9.2f} ms  "
              f"ratio {row['gloo_s'] / row['hosts_s']:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
