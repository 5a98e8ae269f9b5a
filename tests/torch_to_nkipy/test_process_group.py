"""The eager process group "nkipy": collectives of the whole world on the runtime's
communicator (bit-equal to gloo's where gloo's order is the same), point to point
asynchronous (rings where every rank sends first), integer AVG as eager refuses it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _run_ranks(script: str, world: int) -> None:
    """Runs `script` as `world` ranks (torchrun's environment, no NKRT_CC_ID: the
    process group agrees on one); each must exit 0 after printing 'OK <rank>'."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items()
               if k not in ("NEURON_RT_VISIBLE_CORES", "NKRT_CC_ID")}
        env.update(PYTHONPATH=ROOT, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(world), NKRT_CC_TIMEOUT="120",
                   SPIKE_TORCH_FALLBACK_WARN="0")
        procs.append(subprocess.Popen([sys.executable, "-W", "ignore", "-c", script], env=env,
                                      text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    report = "\n".join(f"rank {r}: {out[-1500:]}{err[-3000:]}" for r, (out, err) in enumerate(outs))
    for rank, (p, (out, _)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"OK {rank}" in out, report


_COMPARE = textwrap.dedent("""
    import os, torch
    import torch.distributed as dist
    import torch_to_nkipy

    dist.init_process_group("nkipy")
    r, n = dist.get_rank(), dist.get_world_size()
    ref = dist.new_group(backend="gloo")
    pg = dist.distributed_c10d._get_default_group()
    assert pg._comm is not None
    ids = [None] * n
    dist.all_gather_object(ids, os.environ["NKRT_CC_ID"])
    assert len(set(ids)) == 1 and ids[0].startswith("job-"), ids
    INTEGRAL = {INTEGRAL}
    DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
              torch.int32, torch.int64, torch.float64, torch.bool]
    OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN,
           dist.ReduceOp.AVG]
    g = torch.Generator().manual_seed(r)

    def data(dt, numel):
        if dt == torch.bool:
            return torch.rand(numel, generator=g) > 0.5
        if dt.is_floating_point and not INTEGRAL:
            return torch.randn(numel, generator=g).to(dt)
        lo = 0 if dt == torch.uint8 else -3
        return torch.randint(lo, 4, (numel,), generator=g).to(dt)

    def same(fn_a, fn_b, what):
        ea = eb = None
        try:
            a = fn_a()
        except RuntimeError as e:
            ea = str(e)
        try:
            b = fn_b()
        except RuntimeError as e:
            eb = str(e)
        assert ea == eb, (what, ea, eb)
        if ea is None:
            assert torch.equal(a.cpu(), b), (what, a, b)

    for dev in ("cpu", "nkipy"):
        for dt in DTYPES:
            # past one communicator slot (4 MiB) at the largest
            for numel in ({SIZES}):
                numel -= numel % n
                x = data(dt, numel)
                for op in OPS:
                    def ar(t, group=None):
                        dist.all_reduce(t, op=op, group=group)
                        return t
                    same(lambda: ar(x.clone().to(dev)), lambda: ar(x.clone(), ref), ("all_reduce", dev, dt, op))
                    if dt == torch.bool:
                        continue
                    def rs(t, group=None):
                        out = torch.empty(numel // n, dtype=dt, device=t.device)
                        dist.reduce_scatter_tensor(out, t, op=op, group=group)
                        return out
                    same(lambda: rs(x.clone().to(dev)), lambda: rs(x.clone(), ref), ("reduce_scatter", dev, dt, op))
                def ag(t, group=None):
                    out = torch.empty(numel * n, dtype=dt, device=t.device)
                    dist.all_gather_into_tensor(out, t, group=group)
                    return out
                same(lambda: ag(x.clone().to(dev)), lambda: ag(x, ref), ("all_gather", dev, dt))
                def ag_list(t, group=None):
                    outs = [torch.empty(numel, dtype=dt, device=t.device) for _ in range(n)]
                    dist.all_gather(outs, t, group=group)
                    return torch.cat(outs)
                same(lambda: ag_list(x.clone().to(dev)), lambda: ag_list(x, ref), ("all_gather list", dev, dt))
                for root in range(n):
                    def bc(t, group=None):
                        dist.broadcast(t, src=root, group=group)
                        return t
                    same(lambda: bc(x.clone().to(dev)), lambda: bc(x.clone(), ref), ("broadcast", dev, dt))
                def a2a(t, group=None):
                    out = torch.empty_like(t)
                    dist.all_to_all_single(out, t, group=group)
                    return out
                same(lambda: a2a(x.clone().to(dev)), lambda: a2a(x, ref), ("all_to_all", dev, dt))
                if dt != torch.bool:
                    def red(t, group=None):
                        dist.reduce(t, dst=n - 1, group=group)
                        return t if r == n - 1 else torch.zeros(0)
                    same(lambda: red(x.clone().to(dev)), lambda: red(x.clone(), ref), ("reduce", dev, dt))

    # the runtime has the broadcast and reduce_scatter kinds (no fallback taken)
    assert not pg._comm._missing, pg._comm._missing
    # the whole world's collectives never touch gloo
    gloo, pg._gloo = pg._gloo, None
    for dev in ("cpu", "nkipy"):
        t = torch.ones(8, device=dev)
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        big = torch.empty(8 * n, device=dev)
        dist.all_gather_into_tensor(big, t)
        dist.reduce_scatter_tensor(t, big)
        dist.all_to_all_single(big.clone(), big)
        assert t.cpu().tolist() == [float(n * n)] * 8, t
    pg._gloo = gloo
    {EXTRA}
    dist.destroy_process_group()
    print("OK", r)
""")


@pytest.mark.slow
def test_collectives_equal_gloo_two_ranks():
    """Every collective and dtype (random data: two ranks add in one order), on CPU and
    nkipy tensors, sizes below and past one communicator slot; integer AVG raises
    eager's error; the communicator name is agreed through the store."""
    extra = textwrap.dedent("""
        for dt in (torch.int32, torch.int64):
            try:
                dist.all_reduce(torch.ones(2, dtype=dt), op=dist.ReduceOp.AVG)
                raise AssertionError("integer AVG ran")
            except RuntimeError as e:
                assert "can't be cast to the desired output type" in str(e), e
    """)
    _run_ranks(_COMPARE.replace("{INTEGRAL}", "False").replace("{SIZES}", "6, 1048576 + 6")
               .replace("{EXTRA}", extra), 2)


@pytest.mark.slow
def test_collectives_equal_gloo_four_ranks():
    """Four ranks (integer-valued data: sums in any order are exact), and a subgroup
    smaller than the world (gloo)."""
    extra = textwrap.dedent("""
        sub = dist.new_group([0, 1], backend="nkipy")
        if r < 2:
            t = torch.full((3,), float(r + 1), device="nkipy")
            dist.all_reduce(t, group=sub)
            assert t.cpu().tolist() == [3.0] * 3, t
    """)
    _run_ranks(_COMPARE.replace("{INTEGRAL}", "True").replace("{SIZES}", "8,")
               .replace("{EXTRA}", extra), 4)


_RING = textwrap.dedent("""
    import time, torch
    import torch.distributed as dist
    import torch_to_nkipy

    dist.init_process_group("nkipy")
    r, n = dist.get_rank(), dist.get_world_size()
    nxt, prv = (r + 1) % n, (r - 1) % n
    for dev in ("cpu", "nkipy"):
        # every rank sends first, then receives
        got = torch.zeros(300000, device=dev)
        ws = dist.isend(torch.full((300000,), float(r), device=dev), nxt)
        wr = dist.irecv(got, prv)
        assert ws.wait() and wr.wait()
        assert torch.equal(got.cpu(), torch.full((300000,), float(prv)))
        assert ws.is_completed() and wr.is_completed() and wr.is_success()
        # batch_isend_irecv, send listed first on every rank
        got2 = torch.zeros(5, dtype=torch.int64, device=dev)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.arange(5, device=dev) + r, nxt),
                                        dist.P2POp(dist.irecv, got2, prv)])
        for w in works:
            w.wait()
        assert torch.equal(got2.cpu(), torch.arange(5) + prv)
        # a receive's future completes with the data written back
        got3 = torch.zeros(3, device=dev)
        wr = dist.irecv(got3, prv)
        fut = wr.get_future()
        dist.isend(torch.full((3,), 7.0 + r, device=dev), nxt).wait()
        fut.wait()
        assert wr.wait() and wr.is_completed() and got3.cpu().tolist() == [7.0 + prv] * 3, got3
        # polling is_completed: a receive is written back once it says so
        got5 = torch.zeros(4, device=dev)
        wr = dist.irecv(got5, prv)
        ws = dist.isend(torch.full((4,), 3.0 + r, device=dev), nxt)
        while not wr.is_completed():
            time.sleep(0.001)
        assert got5.cpu().tolist() == [3.0 + prv] * 4 and wr.exception() is None, got5
        ws.wait()
        # blocking send/recv of nkipy and CPU tensors
        if r == 0:
            dist.send(torch.tensor([5.0], device=dev), dst=1)
        elif r == 1:
            got4 = torch.zeros(1, device=dev)
            dist.recv(got4, src=0)
            assert got4.item() == 5.0
    dist.barrier()
    dist.destroy_process_group()
    print("OK", r)
""")


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_point_to_point_ring_every_rank_sends_first(world):
    _run_ranks(_RING, world)


def test_comm_collective_refuses_bad_arguments():
    """The binding checks what it can before reaching the runtime."""
    import spike
    from spike import _spike

    spike.get_spike_singleton()
    with pytest.raises(ValueError, match="rank 2 of world size 2"):
        _spike._comm_collective(0, 1, 0, 2, 2, 1, 1, 1)
    with pytest.raises(ValueError, match="the world size must be 2 .. 1024"):
        _spike._comm_collective(0, 1, 0, 0, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="count -1 < 0"):
        _spike._comm_collective(0, 1, 0, 0, 2, 1, 1, -1)
    with pytest.raises(ValueError, match="a NULL buffer address"):
        _spike._comm_collective(0, 1, 0, 0, 2, 0, 0, 4)


def test_integer_avg_error_is_eagers():
    import torch
    from torch_to_nkipy.distributed import _integer_avg_error

    with pytest.raises(RuntimeError) as eager:
        torch.ones(2, dtype=torch.int64).div_(2)
    assert str(_integer_avg_error(torch.int64)) == str(eager.value)


_COMPILED = textwrap.dedent("""
    import tempfile, torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch_to_nkipy import init_nkipy_backend

    dist.init_process_group("nkipy")
    init_nkipy_backend(nkipy_cache=tempfile.mkdtemp())
    r, n = dist.get_rank(), dist.get_world_size()
    world = dist.group.WORLD
    ref = dist.new_group(backend="gloo")
    with torch.no_grad():
        for dev in ("cpu", "nkipy"):
            for root in range(n):
                x = torch.randn(3, 2) * (r + 1)
                got = torch.compile(lambda t: funcol.broadcast(t, root, world) + 0,
                                    backend="nkipy", fullgraph=True)(x.to(dev))
                want = x.clone()
                dist.broadcast(want, src=root, group=ref)
                assert torch.equal(got.cpu(), want), (got, want)
                torch._dynamo.reset()
            # uneven splits: rank i sends i + j + 1 rows to rank j (rows: the same on all ranks)
            rows = sum(range(1, n + 1)) + n * (n - 1) // 2
            ins = [r + j + 1 for j in range(n)]
            ins[-1] += rows - sum(ins)
            all_ins = [[i + j + 1 for j in range(n)] for i in range(n)]
            for i in range(n):
                all_ins[i][-1] += rows - sum(all_ins[i])
            outs = [all_ins[j][r] for j in range(n)]
            x = torch.arange(rows * 2.0).reshape(rows, 2) + 100 * r
            got = torch.compile(lambda t: funcol.all_to_all_single(t, outs, ins, world) + 0,
                                backend="nkipy", fullgraph=True)(x.to(dev))
            want = torch.empty(sum(outs), 2)
            dist.all_to_all_single(want, x, outs, ins, group=ref)
            assert torch.equal(got.cpu(), want), (got, want)
            torch._dynamo.reset()
        for fn in (lambda t: funcol.all_reduce(t, "avg", world) + 0,
                   lambda t: funcol.reduce_scatter_tensor(t, "avg", 0, world) + 0):
            with_eager = None
            try:
                dist.all_reduce(torch.ones(2 * n, dtype=torch.int32), op=dist.ReduceOp.AVG,
                                group=ref)
            except RuntimeError as e:
                with_eager = str(e)
            try:
                torch.compile(fn, backend="nkipy", fullgraph=True)(
                    torch.ones(2 * n, dtype=torch.int32))
                raise AssertionError("integer avg ran")
            except RuntimeError as e:
                assert with_eager and with_eager in str(e), (with_eager, e)
            torch._dynamo.reset()
    dist.barrier()
    dist.destroy_process_group()
    print("OK", r)
""")


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_compiled_broadcast_uneven_all_to_all_and_integer_avg(world):
    """funcol.broadcast and all_to_all_single with unequal splits inside compiled graphs
    equal eager gloo's; integer avg raises eager's error."""
    _run_ranks(_COMPILED, world)


def test_comm_collective_without_a_runtime():
    """After spike.reset() the binding has no runtime to run on (a fresh process:
    the reset must not disturb this one's)."""
    script = textwrap.dedent("""
        import spike
        from spike import _spike
        spike.get_spike_singleton()
        spike.reset()
        try:
            _spike._comm_collective(0, 1, 0, 0, 2, 1, 1, 1)
        except _spike.SpikeError as e:
            assert "no live runtime for a collective" in str(e), e
            print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


def test_compiled_collective_lowerings_refuse_bad_arguments(backend):
    """The lowerings check split sizes and the broadcast root (one rank: the job's world)."""
    import numpy as np
    from torch_to_nkipy.lowering import collectives as aten_numpy

    with pytest.raises(ValueError, match=r"split sizes \[1, 2\] / \[1, 2\] for 1 ranks"):
        aten_numpy.all_to_all_single(np.zeros((3, 2), np.float32), [1, 2], [1, 2], "0")
    with pytest.raises(ValueError, match=r"broadcast from rank 1, not in its group \[0\]"):
        aten_numpy.broadcast(np.zeros((3, 2), np.float32), 1, "0")


def test_communicator_name_agreed_in_the_store(monkeypatch):
    """The first draw in the group's store wins; anything else there is refused."""
    import torch.distributed as dist
    from torch_to_nkipy.config import _communicator_id

    monkeypatch.setenv("NKRT_CC_ID", "")      # restored (or removed) afterwards
    monkeypatch.delenv("NKRT_CC_ID")
    store = dist.HashStore()
    first = _communicator_id(2, store)
    monkeypatch.delenv("NKRT_CC_ID")
    assert first.startswith("job-") and len(first) == 36 and _communicator_id(2, store) == first
    monkeypatch.delenv("NKRT_CC_ID")
    bad = dist.HashStore()
    bad.set("nkipy/cc_id", "guessable")
    with pytest.raises(RuntimeError, match="the process group's store holds 'guessable' under "
                                           "'nkipy/cc_id', not a communicator name"):
        _communicator_id(2, bad)


_FUNCOL_EAGER = textwrap.dedent("""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import torch_to_nkipy

    dist.init_process_group("nkipy")
    r, n = dist.get_rank(), dist.get_world_size()
    world = dist.group.WORLD
    xs = [torch.arange(8.0) * (q + 1) - q for q in range(n)]
    total = sum(xs)
    for dev in ("cpu", "nkipy"):
        x = xs[r].to(dev)
        got = {
            "all_reduce": funcol.all_reduce(x, "sum", world),
            "all_gather_tensor": funcol.all_gather_tensor(x, 0, world),
            "reduce_scatter_tensor": funcol.reduce_scatter_tensor(x, "sum", 0, world),
            "all_reduce_coalesced": funcol.all_reduce_coalesced([x, 2 * x], "max", world)[1],
            "all_gather_into_tensor_coalesced":
                funcol.all_gather_into_tensor_coalesced([x], world)[0],
            "reduce_scatter_tensor_coalesced":
                funcol.reduce_scatter_tensor_coalesced([x], "sum", [0], world)[0],
        }
        want = {
            "all_reduce": total, "all_gather_tensor": torch.cat(xs),
            "reduce_scatter_tensor": total.chunk(n)[r],
            "all_reduce_coalesced": torch.stack(xs).amax(0) * 2,
            "all_gather_into_tensor_coalesced": torch.cat(xs),
            "reduce_scatter_tensor_coalesced": total.chunk(n)[r],
        }
        for name, g in got.items():
            g = funcol.wait_tensor(g) if isinstance(g, torch.Tensor) else g
            assert g.device.type == dev and torch.equal(g.cpu(), want[name]), (name, dev, g)
    # DTensor's eager Shard -> Replicate goes through the functional all_gather
    mesh = init_device_mesh("nkipy", (n,))
    full = torch.arange(4.0 * n).reshape(n, 4)
    d = distribute_tensor(full.to("nkipy"), mesh, [Shard(0)])
    assert torch.equal(d.full_tensor().cpu(), full), d.full_tensor()
    dist.destroy_process_group()
    print("OK", r)
""")


def test_eager_functional_collectives_and_dtensor_gather():
    """Eager functional collectives (what DTensor calls) on the "nkipy" group, on CPU and
    nkipy tensors: all_reduce, all_gather, reduce_scatter and their coalesced forms
    give the exact results; a Shard(0) DTensor's full_tensor() gathers it."""
    _run_ranks(_FUNCOL_EAGER, 2)
