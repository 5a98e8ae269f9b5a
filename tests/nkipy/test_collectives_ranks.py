"""Collectives compiled into kernels and run by several processes, one rank each,
through the runtime's communicator (docs/runtime.md): every multi-rank collective
case of op_cases.py, with data that differs per rank, against NumPy."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

from op_cases import ALL_CASES, graph_inputs, tolerance
from nkipy.core.ir import COLLECTIVES
from nkipy.core.trace import trace

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

WORKER = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path[:0] = [{root!r}, {here!r}]
    from op_cases import ALL_CASES, graph_inputs
    from nkipy.core.trace import trace
    from nkipy.runtime import DeviceKernel
    from spike import SpikeTensor

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ids = set(sys.argv[1].split(","))
    out = {{}}
    for case in ALL_CASES:
        if case.id not in ids:
            continue
        graph = trace(case.fn, *case.args, **case.kwargs)
        arrays = [(a + rank).astype(a.dtype) for a in graph_inputs(case)]
        kernel = DeviceKernel.from_graph(graph, build_dir=sys.argv[2], cc_enabled=True,
                                         rank_id=rank, world_size=world)
        res = kernel(inputs={{v.name: SpikeTensor.from_numpy(np.ascontiguousarray(a))
                              for v, a in zip(kernel.graph.inputs, arrays)}})
        out[case.id] = res[kernel.graph.output_names[0]].numpy()
    np.savez(sys.argv[3], **out)
""")


def _ranks(case) -> int:
    graph = trace(case.fn, *case.args, **case.kwargs)
    node = next(n for n in graph.nodes if n.op in COLLECTIVES)
    return max(len(g) for g in node.attrs["replica_groups"])


def _world(case) -> int:
    graph = trace(case.fn, *case.args, **case.kwargs)
    node = next(n for n in graph.nodes if n.op in COLLECTIVES)
    return sum(len(g) for g in node.attrs["replica_groups"])


CASES = [c for c in ALL_CASES if c.id.startswith("collective-") and "error" not in c.id
         and _ranks(c) > 1]


def expected(case, rank: int, world: int) -> np.ndarray:
    """What rank `rank` must get, from every rank's input (base + rank)."""
    graph = trace(case.fn, *case.args, **case.kwargs)
    node = next(n for n in graph.nodes if n.op in COLLECTIVES)
    base = graph_inputs(case)[0]
    xs = [(base + r).astype(base.dtype) for r in range(world)]
    group = next(g for g in node.attrs["replica_groups"] if rank in g)
    me = group.index(rank)
    members = [xs[r] for r in group]
    reduce = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
              "minimum": np.minimum}[node.attrs.get("reduce_op", "add")]
    if node.op in ("all_reduce", "reduce_scatter"):
        acc = members[0].copy()
        for m in members[1:]:
            acc = reduce(acc, m).astype(base.dtype)
        if node.op == "all_reduce":
            return acc
        ax = node.attrs["axis"]
        return np.split(acc, len(group), axis=ax)[me]
    if node.op == "all_gather":
        return np.concatenate(members, axis=node.attrs["axis"])
    sa, ca = node.attrs["split_axis"], node.attrs["concat_axis"]
    return np.concatenate([np.split(m, len(group), axis=sa)[me] for m in members], axis=ca)


def run_world(world: int, cases, tmp_path: Path) -> list[dict]:
    """Runs the cases in `world` processes; returns each rank's outputs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK")}
    env.update(WORLD_SIZE=str(world), NKRT_CC_ID=f"test-{uuid.uuid4().hex[:12]}",
               NKRT_NUM_WORKERS="1", NKRT_CC_TIMEOUT="120", PYTHONPATH=str(ROOT))
    ids = ",".join(c.id for c in cases)
    procs = []
    for r in range(world):
        out = tmp_path / f"rank{r}.npz"
        cmd = [sys.executable, "-c", WORKER.format(root=str(ROOT), here=str(HERE)), ids,
               str(tmp_path / f"cache{r}"), str(out)]
        procs.append(subprocess.Popen(cmd, env={**env, "RANK": str(r)}, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    done = [p.communicate(timeout=600) for p in procs]
    for r, (p, (_, err)) in enumerate(zip(procs, done)):
        assert p.returncode == 0, f"rank {r}:\n{err[-3000:]}"
    return [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_across_processes(world, tmp_path):
    cases = [c for c in CASES if _world(c) == world]
    assert cases
    outs = run_world(world, cases, tmp_path)
    for case in cases:
        for r in range(world):
            got, want = outs[r][case.id], expected(case, r, world)
            rtol, atol = tolerance(case, want.dtype)
            assert got.shape == want.shape and got.dtype == want.dtype, (case.id, r)
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                       err_msg=f"{case.id} rank {r}")



LOOP_WORKER = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path[:0] = [{root!r}, {here!r}]
    from op_cases import ALL_CASES, graph_inputs
    from nkipy.core.trace import trace
    from nkipy.runtime import DeviceKernel
    from spike import SpikeTensor

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    case = next(c for c in ALL_CASES if c.id == sys.argv[1])
    graph = trace(case.fn, *case.args, **case.kwargs)
    kernel = DeviceKernel.from_graph(graph, build_dir=sys.argv[2], cc_enabled=True,
                                     rank_id=rank, world_size=world)
    inputs = {{v.name: SpikeTensor.from_numpy(np.ascontiguousarray(a))
              for v, a in zip(kernel.graph.inputs, graph_inputs(case))}}
    for i in range(10 ** 9):
        kernel(inputs=inputs)
        if i == 3:
            print("ready", flush=True)
""")


def test_rank_killed_mid_collective(tmp_path):
    """A rank killed while the others run collectives: they fail within seconds,
    naming it (not after NKRT_CC_TIMEOUT), and nothing is left in /dev/shm."""
    import signal
    import time

    case_id, world = "collective-all_reduce-add-ranks2-groups1", 2
    cc_id = f"test-{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK")}
    env.update(WORLD_SIZE=str(world), NKRT_CC_ID=cc_id, NKRT_NUM_WORKERS="1",
               NKRT_CC_TIMEOUT="300", PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c",
                               LOOP_WORKER.format(root=str(ROOT), here=str(HERE)), case_id,
                               str(tmp_path / f"cache{r}")], env={**env, "RANK": str(r)},
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for r in range(world)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()[-3000:]
        victim = procs[1]
        victim.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        _, err = procs[0].communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    print(f"rank 0 failed {took:.2f} s after rank 1 was killed")
    assert procs[0].returncode != 0
    assert f"rank 1 (pid {victim.pid}) died (it exited or was killed)" in err, err[-3000:]
    assert took < 30, took
    assert not os.path.exists(f"/dev/shm/nkrt-cc-{cc_id}")
