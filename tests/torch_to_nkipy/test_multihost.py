"""Collectives inside compiled graphs across two simulated hosts, under torchrun.

Each "host" is a torchrun agent with two ranks in its own mount and UTS
namespaces (``unshare --mount --uts``): a private tmpfs on /dev/shm and its own
hostname, here the SAME hostname on both, so only the /dev/shm token files tell
the hosts apart. The network namespace stays shared: the static rendezvous
meets at 127.0.0.1. Within a host the ranks meet in shared memory; between the
hosts over the gloo group torch_to_nkipy sets up (docs/distributed.md).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTNAME = "nkipy-sim"        # both hosts: told apart by their /dev/shm only


def _namespaces_unavailable() -> str:
    """Why the hosts cannot be simulated here ("" when they can)."""
    if sys.platform != "linux":
        return "needs Linux namespaces"
    probe = ("mount -t tmpfs -o mode=1777,size=64m tmpfs /dev/shm && hostname probe-host "
             "&& test \"$(hostname)\" = probe-host && test -z \"$(ls -A /dev/shm)\"")
    try:
        r = subprocess.run(["unshare", "--mount", "--uts", "sh", "-c", probe],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run unshare: {e}"
    if r.returncode != 0:
        return (f"cannot make mount+UTS namespaces with a private /dev/shm (root or "
                f"CAP_SYS_ADMIN needed): {r.stderr.strip()[:300]}")
    return ""


_WHY = _namespaces_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(_WHY), reason=_WHY)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_hosts(script: str, tmp_path, timeout_s: float = 60, wait_s: float = 420,
              extra_env: dict | None = None):
    """Runs `script` as 2 hosts x 2 ranks; returns each host's (returncode,
    output, what its /dev/shm held when its torchrun exited)."""
    path = tmp_path / "worker.py"
    path.write_text(script)
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK", "RANK", "WORLD_SIZE",
                        "NKRT_CC_ID", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=ROOT, GLOO_SOCKET_IFNAME="lo", NKRT_CC_TIMEOUT=str(timeout_s),
               SPIKE_TORCH_FALLBACK_WARN="0", OMP_NUM_THREADS="1", RESULTS=str(tmp_path),
               PYTHONWARNINGS="ignore", **(extra_env or {}))
    procs = []
    for node in range(2):
        left = tmp_path / f"shm_left_{node}"
        cmd = (f"mount -t tmpfs -o mode=1777,size=512m tmpfs /dev/shm && "
               f"hostname {HOSTNAME} && "
               f"{sys.executable} -m torch.distributed.run --nnodes=2 --node_rank={node} "
               f"--nproc_per_node=2 --master_addr=127.0.0.1 --master_port={port} "
               f"--monitor_interval=1 {path}; rc=$?; ls -A /dev/shm > {left}; exit $rc")
        procs.append(subprocess.Popen(["unshare", "--mount", "--uts", "sh", "-c", cmd],
                                      env=env, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=wait_s)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [(p.returncode, out, (tmp_path / f"shm_left_{n}").read_text().split()
             if (tmp_path / f"shm_left_{n}").exists() else None)
            for n, (p, out) in enumerate(zip(procs, outs))]


def results(tmp_path):
    return {int(p.name.split("_")[1]): p.read_text() for p in tmp_path.glob("result_*")}


def _report(hosts) -> str:
    return "\n".join(f"--- host {n} (rc {rc}):\n{out[-4000:]}" for n, (rc, out, _) in
                     enumerate(hosts))


def assert_all_ranks(hosts, tmp_path, result: str = "OK") -> str:
    """Both hosts exited 0, every rank wrote `result`, and neither host's /dev/shm
    keeps anything; returns the hosts' report."""
    report = _report(hosts)
    assert [rc for rc, _, _ in hosts] == [0, 0], report
    assert results(tmp_path) == {r: result for r in range(4)}, report
    for n, (_, _, left) in enumerate(hosts):
        assert left == [], f"host {n}'s /dev/shm holds {left}"
    return report


COLLECTIVES = textwrap.dedent("""
    import os, torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch_to_nkipy import init_nkipy_backend, get_nkipy_backend_config, hosts

    dist.init_process_group("gloo")
    init_nkipy_backend(nkipy_cache=os.path.join(os.environ["RESULTS"], "cache"))
    r, n = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    cfg = get_nkipy_backend_config()
    assert (cfg.rank, cfg.local_rank, cfg.visible_core, cfg.device_core) == (r, local, local, 0), cfg
    assert hosts.current_hosts().host_of == (0, 0, 2, 2), hosts.current_hosts()
    world = dist.group.WORLD

    def f(x):
        return (funcol.all_reduce(x, "sum", world) + 0,
                funcol.all_reduce(x, "max", world) + 0,
                funcol.all_gather_tensor(x, 0, world) + 0,
                funcol.reduce_scatter_tensor(x, "sum", 0, world) + 0,
                funcol.all_to_all_single(x, None, None, world) + 0)

    def inputs(rank, dtype):
        return ((torch.arange(16).reshape(8, 2) * (rank + 1) - 3 * rank) % 11).to(dtype)

    for dtype in (torch.float32, torch.int32):
        xs = [inputs(q, dtype) for q in range(n)]         # every rank's, for the reference
        want = (sum(xs), torch.stack(xs).amax(0), torch.cat(xs),
                sum(xs).chunk(n)[r], torch.cat([x.chunk(n)[r] for x in xs]))
        with torch.no_grad():
            got = torch.compile(f, backend="nkipy", fullgraph=True)(xs[r])
        for name, g, w in zip(("all_reduce sum", "all_reduce max", "all_gather",
                               "reduce_scatter", "all_to_all"), got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), (name, dtype, g, w)
        torch._dynamo.reset()
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(os.environ["RESULTS"], f"result_{r}"), "w").write("OK")
""")


def test_collectives_across_two_hosts(tmp_path):
    """2 hosts x 2 ranks: every collective in a compiled graph gives eager's
    result (float32 and int32); the second host's ranks 2 and 3 use cores 0
    and 1 (LOCAL_RANK); nothing is left in either host's /dev/shm."""
    hosts = run_hosts(COLLECTIVES, tmp_path)
    assert_all_ranks(hosts, tmp_path)


KILLED = textwrap.dedent("""
    import os, signal, threading, time, torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch_to_nkipy import init_nkipy_backend

    dist.init_process_group("gloo")
    init_nkipy_backend(nkipy_cache=os.path.join(os.environ["RESULTS"], "cache"))
    r = dist.get_rank()
    out = os.path.join(os.environ["RESULTS"], f"result_{r}")
    world = dist.group.WORLD
    f = torch.compile(lambda x: funcol.all_reduce(x, "sum", world) + 0, backend="nkipy",
                      fullgraph=True)
    x = torch.ones(1 << 18)                     # 1 MiB: chunks cross the hosts
    with torch.no_grad():
        f(x)
        dist.barrier()
        if r == 2:                              # the second host's lead dies mid-collective
            def die():
                time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGKILL)
            threading.Thread(target=die).start()
        t0 = time.monotonic()
        try:
            for _ in range(100000):
                f(x)
        except Exception as e:  # noqa: BLE001
            open(out, "w").write(f"{time.monotonic() - t0:.2f} {type(e).__name__}: {e}")
            os._exit(1)
    open(out, "w").write("no error")
""")


def test_peer_killed_across_hosts(tmp_path):
    """The second host's lead (rank 2) is killed while the ranks loop on an
    all_reduce: the first host's ranks raise within the engine's timeout
    (NKRT_CC_TIMEOUT=60 s, gloo's and the runtime's; it takes well under a second
    here: gloo sees the connection close), naming rank 2, and neither host's
    /dev/shm keeps anything."""
    hosts = run_hosts(KILLED, tmp_path, timeout_s=60)
    got = results(tmp_path)
    report = _report(hosts) + f"\nresults: {got}"
    assert all(rc != 0 for rc, _, _ in hosts), report
    for r in (0, 1):
        assert r in got and "rank 2" in got[r], report
        assert float(got[r].split()[0]) < 60, report
    for n, (_, _, left) in enumerate(hosts):
        assert left == [], f"host {n}'s /dev/shm holds {left}\n{report}"


NKIPY_GROUP = textwrap.dedent("""
    import os, torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch_to_nkipy
    from torch_to_nkipy import init_nkipy_backend, get_nkipy_backend_config, hosts

    dist.init_process_group("nkipy")          # sets the hosts up as it is made
    assert hosts.current_hosts().host_of == (0, 0, 2, 2), hosts.current_hosts()
    init_nkipy_backend(rank=dist.get_rank(), world_size=dist.get_world_size(),
                       nkipy_cache=os.path.join(os.environ["RESULTS"], "cache"))
    r = dist.get_rank()
    cfg = get_nkipy_backend_config()
    assert (cfg.rank, cfg.visible_core) == (r, r % 2), cfg
    world = dist.group.WORLD

    def f(x):
        return funcol.all_reduce(x, "sum", world) + 0, funcol.all_gather_tensor(x, 0, world) + 0

    xs = [torch.arange(6.0) * (q + 1) for q in range(4)]
    with torch.no_grad():
        s, g = torch.compile(f, backend="nkipy", fullgraph=True)(xs[r].to("nkipy"))
    assert torch.equal(s.cpu(), sum(xs)) and torch.equal(g.cpu(), torch.cat(xs)), (s, g)
    dist.barrier()
    dist.destroy_process_group()
    open(os.path.join(os.environ["RESULTS"], f"result_{r}"), "w").write("OK")
""")


def test_nkipy_process_group_across_two_hosts(tmp_path):
    """init_process_group("nkipy") detects the hosts and hands them to the runtime
    (init_nkipy_backend then finds them done); compiled collectives on nkipy
    tensors cross the hosts."""
    hosts = run_hosts(NKIPY_GROUP, tmp_path)
    assert_all_ranks(hosts, tmp_path)


LLAMA_TP = textwrap.dedent("""
    import os, runpy, sys
    os.environ["NKIPY_EXAMPLE_CACHE"] = os.path.join(os.environ["RESULTS"], "cache")
    sys.argv = ["llama_tp.py"]
    try:
        runpy.run_path(os.path.join(os.environ["ROOT"], "examples", "torch_to_nkipy",
                                    "llama_tp.py"), run_name="__main__")
    except SystemExit as e:
        code = e.code or 0
    else:
        code = 0
    rank = os.environ["RANK"]
    open(os.path.join(os.environ["RESULTS"], f"result_{rank}"), "w").write(f"exit {code}")
    sys.exit(code)
""")


def test_llama_tensor_parallel_across_two_hosts(tmp_path):
    """examples/torch_to_nkipy/llama_tp.py over 2 hosts x 2 ranks: the DTensor-sharded
    Llama, compiled, generates the greedy tokens of single-process eager (rank 0
    compares and every rank exits with its verdict)."""
    hosts = run_hosts(LLAMA_TP, tmp_path, extra_env={"ROOT": ROOT})
    report = assert_all_ranks(hosts, tmp_path, "exit 0")
    assert "4 ranks, tensor parallel" in hosts[0][1], report
