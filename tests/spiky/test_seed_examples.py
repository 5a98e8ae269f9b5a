"""The usage examples of the spiky seed README, run as written (cache in a temp dir)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import pytest

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def child_env(**extra: str) -> dict:
    """The environment of a fresh process: this repo importable, no core selection
    left behind by earlier tests (spike.configure sets NEURON_RT_VISIBLE_CORES)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=ROOT, **extra)
    return env


def run_ranks(script: str, world: int = 2, **extra: str) -> None:
    """Runs `script` as `world` ranks with torchrun's environment (a fresh
    communicator name is agreed through torch.distributed); each rank must
    exit 0 after printing 'OK <rank>'."""
    procs = []
    port = free_port()
    for rank in range(world):
        env = child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                        LOCAL_RANK=str(rank), WORLD_SIZE=str(world), NKRT_CC_TIMEOUT="120",
                        **extra)
        env.pop("NKRT_CC_ID", None)
        procs.append(subprocess.Popen([sys.executable, "-W", "ignore::FutureWarning", "-c",
                                       script], env=env, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=300) for p in procs]
    report = "\n".join(f"rank {r}: {err[-2000:]}" for r, (_, err) in enumerate(outs))
    for rank, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"OK {rank}" in out, report


def test_quickstart(nkipy_cache):
    from spiky.torch import init_nkipy_backend, reset_nkipy_backend

    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=nkipy_cache)
    try:
        torch.manual_seed(0)
        model = nn.Linear(32, 64, bias=False)
        compiled = torch.compile(model, backend="nkipy")
        x = torch.randn(1, 32)
        with torch.no_grad():
            out = compiled(x)
            torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    finally:
        reset_nkipy_backend()
        torch._dynamo.reset()


def test_dynamic_shapes(backend):
    import spiky

    torch.manual_seed(0)
    model = nn.Linear(32, 64, bias=False)
    compiled = torch.compile(model, backend="nkipy", dynamic=True)

    x = torch.randn(4, 32)
    torch._dynamo.maybe_mark_dynamic(x, 0)  # mark batch dim as dynamic

    with torch.no_grad():
        out1 = compiled(x)
        x2 = torch.randn(16, 32)
        out2 = compiled(x2)  # different size, bucket auto-selected
        torch.testing.assert_close(out1, model(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out2, model(x2), rtol=1e-5, atol=1e-5)
    stats = spiky.get_stats()
    assert stats.bucket_hits == {4: 1, 16: 1}


def test_per_function_options(backend):
    torch.manual_seed(0)
    model = nn.Linear(32, 64, bias=False)
    x = torch.randn(4, 32)
    compiled = torch.compile(model, backend="nkipy", options={
        "pipelined": True,
        "pad_on_device": True,
        "output_layout": "padded",
        "input_layout": "padded",
        "keep_outputs_on_device": True,
    })

    with torch.no_grad():
        out = compiled(x)
    assert out.device.type == "nkipy"
    torch.testing.assert_close(out.cpu(), model(x).detach(), rtol=1e-5, atol=1e-5)


def test_memory_and_stats(backend):
    import spiky

    compiled = torch.compile(nn.Linear(8, 8), backend="nkipy")
    with torch.no_grad():
        compiled(torch.randn(2, 8))
    stats = spiky.get_stats()
    print(stats.total_executions, stats.bucket_hits)
    assert stats.total_executions == 1

    mem = spiky.get_memory_stats()
    print(f"Used: {mem['used_bytes']}, Cached: {mem['cached_bytes']}")
    assert set(mem) == set(spiky.MEMORY_STAT_KEYS)

    spiky.trim_memory_pool(target_bytes=0)
    spiky.reset_stats()
    assert spiky.get_stats().total_executions == 0
    assert spiky.get_memory_stats()["cached_bytes"] == 0 or \
        spiky.get_memory_stats()["used_bytes"] > 0   # only segments with live tensors stay


def test_distributed_example_single_process(tmp_path):
    """dist.init_process_group("gloo") then init_nkipy_backend(): rank and world size
    come from torch.distributed (here a one-process group)."""
    script = textwrap.dedent(f"""
        import os, torch, torch.nn as nn
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT={free_port()!r}, RANK="0",
                          WORLD_SIZE="1")
        from spiky.torch import init_nkipy_backend, get_nkipy_backend_config

        dist.init_process_group("gloo")
        init_nkipy_backend(nkipy_cache={str(tmp_path)!r})  # rank, world_size auto-detected from dist

        model = nn.Linear(32, 64, bias=False)
        compiled = torch.compile(model, backend="nkipy", fullgraph=True)

        x = torch.randn(1, 32)
        with torch.no_grad():
            out = compiled(x)
            assert torch.allclose(out, model(x), atol=1e-5)
        cfg = get_nkipy_backend_config()
        assert (cfg.rank, cfg.world_size) == (0, 1), cfg
        assert cfg.nkipy_cache.endswith("rank_0")
        dist.destroy_process_group()
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=child_env(), timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_same_backend_from_both_packages():
    import spiky.torch
    import torch_to_nkipy

    assert spiky.torch.init_nkipy_backend is torch_to_nkipy.init_nkipy_backend
    assert spiky.torch.get_nkipy_backend_config is torch_to_nkipy.get_nkipy_backend_config


def test_two_ranks_with_gloo(tmp_path):
    """Two processes (torchrun-style env), gloo process group: each detects its
    rank, compiles into <cache>/rank_<r> and runs on core rank."""
    script = textwrap.dedent(f"""
        import os, sys, torch, torch.nn as nn
        import torch.distributed as dist
        from spiky.torch import init_nkipy_backend, get_nkipy_backend_config

        dist.init_process_group("gloo")
        init_nkipy_backend(nkipy_cache={str(tmp_path)!r})
        torch.manual_seed(0)
        model = nn.Linear(32, 64, bias=False)
        compiled = torch.compile(model, backend="nkipy", fullgraph=True)
        x = torch.randn(1, 32) + dist.get_rank()
        with torch.no_grad():
            assert torch.allclose(compiled(x), model(x), atol=1e-5)
        cfg = get_nkipy_backend_config()
        assert (cfg.rank, cfg.world_size, cfg.visible_core) == (dist.get_rank(), 2, dist.get_rank())
        assert cfg.device_core == 0      # LOCAL_RANK=r: this process sees core r as its core 0
        assert cfg.nkipy_cache.endswith(f"rank_{{dist.get_rank()}}")
        dist.barrier()
        dist.destroy_process_group()
        print("OK", cfg.rank)
    """)
    run_ranks(script)
    assert sorted(d.name for d in tmp_path.iterdir()) == ["rank_0", "rank_1"]


def test_collectives_in_compiled_graphs_two_ranks(tmp_path):
    """The seed's "use standard collective operations like dist.all_reduce() in your
    model": two ranks (gloo group), collectives inside compiled graphs run in the
    kernels through the runtime's communicator, on CPU and nkipy tensors, and
    match what gloo computes eagerly."""
    script = textwrap.dedent(f"""
        import torch
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        from spiky.torch import init_nkipy_backend

        dist.init_process_group("gloo")
        init_nkipy_backend(nkipy_cache={str(tmp_path)!r})
        r = dist.get_rank()
        world = dist.group.WORLD

        def f(x):
            y = x * 2
            dist.all_reduce(y)
            return y + 1

        def g(x):
            return (funcol.all_reduce(x, "max", world) + 0,
                    funcol.all_gather_tensor(x, 0, world) + 0,
                    funcol.reduce_scatter_tensor(x, "sum", 0, world) + 0,
                    funcol.all_reduce(x, "avg", world) + 0)

        x = torch.arange(8.0).reshape(4, 2) + 10 * r
        with torch.no_grad():
            want_f = f(x.clone())
            want_g = [t.clone() for t in g(x)]
            cf = torch.compile(f, backend="nkipy", fullgraph=True)
            assert torch.equal(cf(x), want_f)
            assert torch.equal(cf(x.to("nkipy")).cpu(), want_f)
            for got, want in zip(torch.compile(g, backend="nkipy", fullgraph=True)(x), want_g):
                assert torch.allclose(got, want), (got, want)
        dist.barrier()
        dist.destroy_process_group()
        print("OK", r)
    """)
    run_ranks(script)


def test_nkipy_process_group_two_ranks(tmp_path):
    """The seed's FAQ as written: init_process_group("nkipy"), then
    init_nkipy_backend(rank=dist.get_rank(), world_size=dist.get_world_size()).
    Eager collectives on CPU and nkipy tensors, object collectives, point to
    point, and a compiled dist.all_reduce."""
    script = textwrap.dedent(f"""
        import torch
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        import torch_to_nkipy
        from torch_to_nkipy import init_nkipy_backend

        torch.distributed.init_process_group("nkipy")
        init_nkipy_backend(rank=dist.get_rank(), world_size=dist.get_world_size(),
                           nkipy_cache={str(tmp_path)!r})
        r, n = dist.get_rank(), dist.get_world_size()
        assert dist.get_backend() == "nkipy"
        for dev in ("cpu", "nkipy"):
            t = (torch.arange(4.0) + r).to(dev)
            dist.all_reduce(t)
            assert t.device.type == dev and torch.equal(t.cpu(), 2 * torch.arange(4.0) + 1)
            t = (torch.arange(4.0) + r).to(dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            assert torch.equal(t.cpu(), torch.arange(4.0) + 1)
            outs = [torch.zeros(2, device=dev) for _ in range(n)]
            dist.all_gather(outs, torch.full((2,), float(r), device=dev))
            assert [o.cpu().tolist() for o in outs] == [[0.0, 0.0], [1.0, 1.0]]
            big = torch.zeros(2 * n, device=dev)
            dist.all_gather_into_tensor(big, torch.full((2,), float(r), device=dev))
            assert big.cpu().tolist() == [0.0, 0.0, 1.0, 1.0]
            b = torch.full((3,), float(r), device=dev)
            dist.broadcast(b, src=1)
            assert b.cpu().tolist() == [1.0, 1.0, 1.0]
            out = torch.zeros(2, device=dev)
            dist.reduce_scatter_tensor(out, (torch.arange(4.0) + r).to(dev))
            assert out.cpu().tolist() == ([1.0, 3.0] if r == 0 else [5.0, 7.0])
            a2a = torch.empty(4, device=dev)
            dist.all_to_all_single(a2a, (torch.arange(4.0) + 10 * r).to(dev))
            assert a2a.cpu().tolist() == ([0.0, 1.0, 10.0, 11.0] if r == 0 else
                                          [2.0, 3.0, 12.0, 13.0])
            if r == 0:
                dist.send(torch.tensor([5.0], device=dev), dst=1)
            else:
                got = torch.zeros(1, device=dev)
                dist.recv(got, src=0)
                assert got.item() == 5.0
            f = funcol.all_reduce(torch.ones(2, device=dev), "sum", dist.group.WORLD)
            assert f.cpu().tolist() == [2.0, 2.0]
            outs = [torch.zeros(1, device=dev) for _ in range(n)]
            dist.all_to_all(outs, [torch.full((1,), 10.0 * r + i, device=dev) for i in range(n)])
            assert [o.item() for o in outs] == [float(r), 10.0 + r]
            gathered = [torch.zeros(1, device=dev) for _ in range(n)] if r == 0 else None
            dist.gather(torch.full((1,), float(r), device=dev), gathered, dst=0)
            if r == 0:
                assert [g.item() for g in gathered] == [0.0, 1.0]
            mine = torch.zeros(1, device=dev)
            dist.scatter(mine, [torch.full((1,), 5.0 + i, device=dev) for i in range(n)]
                         if r == 0 else None, src=0)
            assert mine.item() == 5.0 + r
        box = [{{"a": 1}}] if r == 0 else [None]
        dist.broadcast_object_list(box, src=0)
        assert box == [{{"a": 1}}]
        objs = [None] * n
        dist.all_gather_object(objs, ("rank", r))
        assert objs == [("rank", 0), ("rank", 1)]
        got = [None] * n if r == 0 else None
        dist.gather_object(r * 10, got, dst=0)
        assert r != 0 or got == [0, 10]
        dist.barrier()

        def fn(x):
            y = x * 2
            dist.all_reduce(y)
            return y

        with torch.no_grad():
            got = torch.compile(fn, backend="nkipy", fullgraph=True)(
                torch.ones(3).to("nkipy") * (r + 1))
        assert got.cpu().tolist() == [6.0, 6.0, 6.0]
        dist.destroy_process_group()
        print("OK", r)
    """)
    run_ranks(script, SPIKE_TORCH_FALLBACK_WARN="0")


def test_close_then_use_again():
    """spiky.close() shuts the runtime down; the next use starts a new one."""
    script = textwrap.dedent("""
        import torch, spiky, tempfile
        from spiky.torch import init_nkipy_backend
        init_nkipy_backend(nkipy_cache=tempfile.mkdtemp())
        spiky.init(0)
        assert spiky.is_initialized()
        c = torch.compile(torch.nn.Linear(4, 4), backend="nkipy")
        with torch.no_grad():
            c(torch.randn(2, 4))
        spiky.close()
        assert not spiky.is_initialized()
        t = torch.ones(3, device="nkipy")
        assert spiky.is_initialized() and t.cpu().sum().item() == 3
        x = torch.randn(2, 4)
        with torch.no_grad():               # compiled functions reload their kernels
            assert torch.allclose(c(x), c._orig_mod(x), atol=1e-6)
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       env=child_env(), timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_set_get_reset_backend_config_as_the_original(tmp_path):
    """spiky.torch's get/set/reset_nkipy_backend_config: None before init, a
    config built as the original builds it (keywords, nkipy_cache derived)
    installs and compiles, reset returns the previous one."""
    import torch
    import torch._dynamo

    from spiky.torch import (NKIPyBackendConfig, get_nkipy_backend_config,
                             init_nkipy_backend, is_nkipy_backend_initialized,
                             reset_nkipy_backend, reset_nkipy_backend_config,
                             set_nkipy_backend_config)

    reset_nkipy_backend()
    assert get_nkipy_backend_config() is None
    assert reset_nkipy_backend_config() is None
    cfg = NKIPyBackendConfig(nkipy_cache_prefix=str(tmp_path / "c"), log_level=20, rank=0,
                             world_size=1, additional_compiler_args="")
    assert cfg.nkipy_cache == str(tmp_path / "c" / "rank_0")
    set_nkipy_backend_config(cfg)
    try:
        assert is_nkipy_backend_initialized() and get_nkipy_backend_config() is cfg
        assert os.path.isdir(cfg.nkipy_cache)
        torch._dynamo.reset()
        f = torch.compile(lambda x: x * 3 + 1, backend="nkipy")
        x = torch.arange(6, dtype=torch.float32)
        assert torch.equal(f(x), x * 3 + 1)
        assert os.listdir(cfg.nkipy_cache)          # compiled into the given cache
        with pytest.raises(RuntimeError, match="has already been initialized"):
            init_nkipy_backend(nkipy_cache=str(tmp_path / "d"))
    finally:
        torch._dynamo.reset()
        old = reset_nkipy_backend_config()
    assert old is cfg and get_nkipy_backend_config() is None


@pytest.mark.parametrize("bad, message", [
    ("not a config", "needs an NKIPyBackendConfig, not str"),
    (dict(rank=2, world_size=2), "invalid rank 2 / world_size 2"),
    (dict(rank=True), "NKIPyBackendConfig.rank must be an int"),
    (dict(pipelined=1), "NKIPyBackendConfig.pipelined must be a bool"),
    (dict(input_layout="x"), "NKIPyBackendConfig.input_layout must be one of"),
    (dict(bucket_strategy="cubic"), "NKIPyBackendConfig.bucket_strategy must be one of"),
    (dict(core_offset=-1), "core_offset must be >= 0"),
    (dict(world_size=2, local_rank=2), "local_rank must be None or an int in"),
])
def test_set_backend_config_refuses_bad_fields(tmp_path, bad, message):
    from spiky.torch import (NKIPyBackendConfig, get_nkipy_backend_config,
                             reset_nkipy_backend, set_nkipy_backend_config)

    reset_nkipy_backend()
    cfg = bad if isinstance(bad, str) else NKIPyBackendConfig(str(tmp_path), **bad)
    with pytest.raises((TypeError, ValueError), match=message):
        set_nkipy_backend_config(cfg)
    assert get_nkipy_backend_config() is None
