"""DTensor tensor parallelism under torch.compile(backend="nkipy"): models sharded
with parallelize_module over an "nkipy" device mesh compile (AOTAutograd desugars
DTensor into local tensors and _c10d_functional collectives) and match eager."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.fx

from torch_to_nkipy.backend import _ObjectInputs, compile_fx_graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def _env(**extra: str) -> dict:
    """A fresh process's environment: this checkout importable, no rank or core
    selection left behind, a communicator name agreed by the ranks themselves."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NEURON_RT_VISIBLE_CORES", "LOCAL_RANK", "RANK", "WORLD_SIZE",
                        "LOCAL_WORLD_SIZE", "NKRT_CC_ID", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=ROOT, NKRT_CC_TIMEOUT="120", SPIKE_TORCH_FALLBACK_WARN="0", **extra)
    return env


class _Mesh:
    """An object input (what a DTensor's DeviceMesh is to the graph)."""


def _graph(returns_object: bool, reads_object: bool = False) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    mesh = g.placeholder("mesh")
    y = g.call_function(torch.ops.aten.add.Tensor, (x, 1.0))
    if reads_object:
        g.call_function(id, (mesh,))
    g.output((y, mesh) if returns_object else (y,))
    return torch.fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.parametrize("returns_object", [False, True], ids=["unused", "returned"])
def test_object_inputs_leave_the_graph(backend, returns_object):
    """An object input no node computes with (a DTensor's device mesh) is removed
    from the graph; one the graph returns (a training forward saving it for the
    backward) comes back at its place among the results."""
    mesh, x = _Mesh(), torch.arange(4.0)
    run = compile_fx_graph(_graph(returns_object), example_inputs=[x, mesh])
    assert run._boxed_call
    res = run([x, mesh])
    assert torch.equal(res[0], x + 1)
    assert len(res) == (2 if returns_object else 1)
    if returns_object:
        assert res[1] is mesh


def test_object_inputs_strip_keeps_read_objects():
    """An object a node reads stays an input (that node runs eagerly); plain
    inputs (tensors, numbers) are never removed."""
    gm = _graph(returns_object=False, reads_object=True)
    assert _ObjectInputs.strip(gm, [torch.ones(1), _Mesh()]) is None
    assert len([n for n in gm.graph.nodes if n.op == "placeholder"]) == 2
    gm = _graph(returns_object=False)
    assert _ObjectInputs.strip(gm, [torch.ones(1), 3]) is None
    objects = _ObjectInputs.strip(gm, [torch.ones(1), _Mesh()])
    assert objects is not None and objects.kept == [0] and objects.passthrough == []


_TP_SCRIPT = textwrap.dedent("""
    import sys
    import torch, torch.nn as nn, torch.nn.functional as F
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    import torch_to_nkipy
    from torch_to_nkipy import init_nkipy_backend

    dist.init_process_group("nkipy")
    init_nkipy_backend(nkipy_cache=sys.argv[1])
    r, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("nkipy", (n,))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

        def forward(self, x):
            return self.down(F.gelu(self.up(x)))

    class Attention(nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.hd = d // heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (p(x).view(b, t, -1, self.hd).transpose(1, 2)
                       for p in (self.q, self.k, self.v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, t, -1))

    class Embedded(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.mlp = nn.Embedding(64, 16), MLP()

        def forward(self, ids):
            return self.mlp(self.tok(ids))

    MLP_PLAN = {"up": ColwiseParallel(), "down": RowwiseParallel()}

    def twin(cls, plan):
        torch.manual_seed(0)
        ref = cls()
        tp = cls()
        tp.load_state_dict(ref.state_dict())
        return ref, parallelize_module(tp.to("nkipy"), mesh, plan)

    def check(name, ref, tp, x, eager_tp=True):
        torch._dynamo.reset()
        with torch.no_grad():
            want = ref(x)
            # eager_tp=False: the sharded model is not run eagerly (the eager process
            # group does not serve functional all_gather yet); compared with the
            # unsharded model only
            eager = tp(x).cpu() if eager_tp else want
            got = torch.compile(tp, backend="nkipy", fullgraph=True)(x)
        assert got.device.type == "nkipy", (name, got.device)
        got = got.cpu()
        assert torch.allclose(eager, want, atol=1e-5), (name, (eager - want).abs().max())
        assert torch.allclose(got, eager, atol=1e-5, rtol=1e-5), (name, (got - eager).abs().max())

    torch.manual_seed(1)
    check("mlp", *twin(MLP, MLP_PLAN), torch.randn(4, 16))
    check("attention", *twin(Attention, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                         "v": ColwiseParallel(), "o": RowwiseParallel()}),
          torch.randn(2, 8, 32))
    check("embedding", *twin(Embedded, {"tok": RowwiseParallel(input_layouts=Replicate()),
                                        "mlp.up": ColwiseParallel(),
                                        "mlp.down": RowwiseParallel()}),
          torch.randint(0, 64, (2, 8)))
    # a column-wise layer with a replicated output: an all_gather in the kernel
    check("gathered", *twin(MLP, {"up": ColwiseParallel(output_layouts=Replicate())}),
          torch.randn(4, 16), eager_tp=False)

    # a training step: the forward and backward graphs compiled, each rank's
    # gradient shards equal to the slices of the unsharded model's gradients
    torch._dynamo.reset()
    ref, tp = twin(MLP, MLP_PLAN)
    x = torch.randn(4, 16)
    ref(x).square().sum().backward()
    torch.compile(tp, backend="nkipy")(x).square().sum().backward()
    for (name, p), (_, q) in zip(ref.named_parameters(), tp.named_parameters()):
        pl = q.grad.placements[0]
        want = torch.chunk(p.grad, n, pl.dim)[r] if pl.is_shard() else p.grad
        got = q.grad.to_local().cpu()
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (name, (got - want).abs().max())
    dist.barrier()
    dist.destroy_process_group()
    print("OK", r)
""")


@pytest.mark.slow
def test_tensor_parallel_modules_two_ranks(tmp_path):
    """Two ranks: a Colwise+Rowwise MLP, an attention block (q/k/v column-wise,
    o row-wise), a row-wise sharded embedding and a column-wise layer gathering its
    output (all_gather) compiled equal eager within
    float32 tolerance; a compiled training step gives each rank the gradient
    slices of the unsharded model."""
    port, world, procs = _free_port(), 2, []
    for rank in range(world):
        env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, "-W", "ignore", "-c", _TP_SCRIPT,
                                       str(tmp_path)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=300) for p in procs]
    report = "\n".join(f"rank {r}: {err[-3000:]}" for r, (_, err) in enumerate(outs))
    for rank, (p, (out, _)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"OK {rank}" in out, report


@pytest.mark.slow
def test_llama_tp_example_two_ranks(tmp_path):
    """examples/torch_to_nkipy/llama_tp.py under torchrun with two ranks: the
    tensor parallel Llama compiled generates the tokens single-process eager does."""
    pytest.importorskip("transformers")
    env = _env(NKIPY_EXAMPLE_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                        f"--master_port={_free_port()}",
                        os.path.join(ROOT, "examples", "torch_to_nkipy", "llama_tp.py")],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-5000:]
    assert "tokens and logits match eager" in r.stdout, r.stdout
    assert "2 ranks, tensor parallel" in r.stdout


def _llama_tp():
    import importlib.util

    path = os.path.join(ROOT, "examples", "torch_to_nkipy", "llama_tp.py")
    spec = importlib.util.spec_from_file_location("llama_tp_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_llama_tp_refuses_an_unshardable_model():
    from types import SimpleNamespace

    ex = _llama_tp()
    cfg = SimpleNamespace(num_key_value_heads=4, intermediate_size=256)
    assert ex.unshardable(cfg, 2) is None and ex.unshardable(cfg, 4) is None
    assert ex.unshardable(cfg, 3) == ("the model's 4 key-value heads and intermediate size "
                                      "256 must divide among the 3 ranks")


def test_llama_tp_verdict_prints_both_on_mismatch():
    """A mismatch fails (the example exits 1) printing both token lists; so do
    ranks that disagree, and prefill logits off by more than the tolerance."""
    ex = _llama_tp()
    ok, lines = ex.verdict([1, 2], [1, 2], 0.0, [[1, 2], [1, 2]])
    assert ok and lines[-1] == "tokens and logits match eager"
    ok, lines = ex.verdict([1, 2], [1, 3], 0.0, [[1, 2], [1, 2]])
    assert not ok and lines[-1] == "MISMATCH against eager"
    assert "[1, 2]" in lines[0] and "[1, 3]" in lines[1]
    ok, lines = ex.verdict([1, 2], [1, 2], 0.0, [[1, 2], [5, 2]])
    assert not ok and "rank 1 generated other tokens: [5, 2]" in lines
    ok, lines = ex.verdict([1, 2], [1, 2], 10 * ex.TOL, [[1, 2]])
    assert not ok
