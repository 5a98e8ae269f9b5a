"""torch.compile(backend="nkipy") end to end: configuration, models, mutation,
partitioning, training, dynamic shapes and the on-disk cache."""
from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_to_nkipy
from torch_to_nkipy import (get_nkipy_backend_config, init_nkipy_backend,
                            is_nkipy_backend_initialized, reset_nkipy_backend)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- configuration ----------------------------------------------------------------

def test_config_lifecycle(tmp_path, monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    reset_nkipy_backend()
    assert not is_nkipy_backend_initialized()
    assert get_nkipy_backend_config() is None      # as the original: None before init
    init_nkipy_backend(nkipy_cache=str(tmp_path / "c"), additional_compiler_args="-O2",
                       pipelined=False, keep_outputs_on_device=True)
    try:
        assert is_nkipy_backend_initialized()
        cfg = get_nkipy_backend_config()
        assert (cfg.rank, cfg.world_size, cfg.core_offset) == (0, 1, 0)
        assert cfg.nkipy_cache == os.path.join(str(tmp_path / "c"), "rank_0")
        assert os.path.isdir(cfg.nkipy_cache)
        assert cfg.additional_compiler_args == "-O2"
        assert (cfg.pipelined, cfg.keep_outputs_on_device, cfg.pad_on_device) == (False, True, True)
        assert (cfg.input_layout, cfg.output_layout) == ("auto", "unpad")
        assert "NKIPyBackendConfig(nkipy_cache=" in repr(cfg) and "rank=0" in repr(cfg)
        with pytest.raises(Exception):
            cfg.rank = 3  # frozen
        with pytest.raises(RuntimeError, match="has already been initialized"):
            init_nkipy_backend(nkipy_cache=str(tmp_path / "c"))
    finally:
        reset_nkipy_backend()
    assert not is_nkipy_backend_initialized()


def test_rank_from_environment(tmp_path, monkeypatch):
    reset_nkipy_backend()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    init_nkipy_backend(nkipy_cache=str(tmp_path), core_offset=0)
    try:
        cfg = get_nkipy_backend_config()
        assert (cfg.rank, cfg.world_size) == (3, 4)
        assert cfg.nkipy_cache.endswith("rank_3")
    finally:
        reset_nkipy_backend()
    monkeypatch.setenv("LOCAL_RANK", "1")   # RANK is the rank, LOCAL_RANK the core
    init_nkipy_backend(nkipy_cache=str(tmp_path), rank=0, world_size=1)   # explicit wins
    assert get_nkipy_backend_config().rank == 0
    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=str(tmp_path))
    cfg = get_nkipy_backend_config()
    assert (cfg.rank, cfg.local_rank, cfg.visible_core) == (3, 1, 1)
    reset_nkipy_backend()
    monkeypatch.delenv("RANK")              # LOCAL_RANK alone: the rank too (one host)
    monkeypatch.setenv("WORLD_SIZE", "2")
    init_nkipy_backend(nkipy_cache=str(tmp_path))
    assert get_nkipy_backend_config().rank == 1
    reset_nkipy_backend()


def test_bad_config_values(tmp_path):
    reset_nkipy_backend()
    with pytest.raises(ValueError, match="input_layout"):
        init_nkipy_backend(nkipy_cache=str(tmp_path), input_layout="weird")
    with pytest.raises(ValueError, match="output_layout"):
        init_nkipy_backend(nkipy_cache=str(tmp_path), output_layout="weird")
    assert not is_nkipy_backend_initialized()


def test_compile_without_init_raises():
    reset_nkipy_backend()
    torch._dynamo.reset()
    f = torch.compile(lambda x: x + 1, backend="nkipy")
    with pytest.raises(Exception, match="init_nkipy_backend"):
        f(torch.ones(2))


def test_exports():
    for name in ("init_nkipy_backend", "is_nkipy_backend_initialized", "reset_nkipy_backend",
                 "get_nkipy_backend_config", "AtenOpRegistry"):
        assert hasattr(torch_to_nkipy, name)
    from torch._dynamo.backends.registry import list_backends
    assert "nkipy" in list_backends(exclude_tags=())


# ---- models ----------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.fc1 = nn.Linear(d, h, bias=False)
        self.fc2 = nn.Linear(h, d)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 5e-3),
                                       (torch.bfloat16, 3e-2)])
def test_mlp(backend, dtype, tol):
    torch.manual_seed(0)
    m = MLP().to(dtype)
    c = torch.compile(m, backend="nkipy", fullgraph=True, dynamic=False)
    x = torch.randn(4, 16).to(dtype)
    with torch.no_grad():
        got, want = c(x), m(x)
        again = c(x)
    assert got.dtype == dtype and got.device.type == "cpu"
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(again, got)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_cross_matches_the_cpu_bit_for_bit(backend, dtype):
    """linalg_cross stays undecomposed (KEEP_UNDECOMPOSED): half operands round
    each product as PyTorch's CPU kernel does, equal where the products cancel."""
    torch.manual_seed(0)
    a, b = (torch.randn(6, 3, 5) * 40).to(dtype), (torch.randn(6, 3, 5) * 40).to(dtype)
    b[:, :, 0] = a[:, :, 0] * 3
    c = torch.compile(lambda x, y: torch.linalg.cross(x, y, dim=1), backend="nkipy",
                      fullgraph=True, dynamic=False)
    assert torch.equal(c(a, b), torch.linalg.cross(a, b, dim=1))


def test_cache_layout(backend):
    m = MLP(8, 8)
    c = torch.compile(m, backend="nkipy")
    with torch.no_grad():
        c(torch.randn(2, 8))
    root = get_nkipy_backend_config().nkipy_cache
    kdirs = [d for d in os.listdir(root) if d.startswith("kernel_")]
    assert kdirs
    found = False
    for d in kdirs:
        files = set(os.listdir(os.path.join(root, d)))
        assert {"nkipy_func.py", "fx_vs_nkipy.txt", "fx_graph.py", "io_specs.json"} <= files
        specs = json.load(open(os.path.join(root, d, "io_specs.json")))
        assert os.path.exists(specs["neff"]) and specs["neff"].startswith(os.path.join(root, d))
        src = open(os.path.join(root, d, "nkipy_func.py")).read()
        found |= "aten.addmm(" in src
    assert found


def test_generated_source_runs_with_numpy(backend):
    import numpy as np

    m = MLP(8, 8)
    c = torch.compile(m, backend="nkipy")
    x = torch.randn(2, 8)
    with torch.no_grad():
        c(x)
    root = get_nkipy_backend_config().nkipy_cache
    for d in os.listdir(root):
        p = os.path.join(root, d, "nkipy_func.py")
        specs_path = os.path.join(root, d, "io_specs.json")
        if not os.path.exists(specs_path):
            continue
        ins = json.load(open(specs_path))["inputs"]
        if [i["shape"] for i in ins] == [[8, 8], [2, 8], [8, 8], [8]] and \
                all(i["dtype"] == "float32" for i in ins):
            fn = torch_to_nkipy.load_func_from_file(p)
            # placeholders: fc1.weight, x, fc2.weight, fc2.bias (AOT order)
            params = [m.fc1.weight, x, m.fc2.weight, m.fc2.bias]
            out = fn(*[t.detach().numpy() for t in params])[0]
            np.testing.assert_allclose(out, m(x).detach().numpy(), rtol=1e-5, atol=1e-5)
            return
    pytest.fail("no generated source with addmm found")


class TinyLlama(nn.Module):
    """RMSNorm, rotary embeddings, causal attention with a static KV cache, SwiGLU."""

    def __init__(self, vocab=32, d=16, heads=2, max_len=8):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.emb = nn.Embedding(vocab, d)
        self.norm_w = nn.Parameter(torch.rand(d) + 0.5)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, 2 * d, bias=False)
        self.up = nn.Linear(d, 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)
        self.lm = nn.Linear(d, vocab, bias=False)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, self.hd))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, self.hd))
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        self.register_buffer("inv_freq", inv)

    def rms(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_w

    def rope(self, x, pos):
        f = pos[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def forward(self, ids, pos):
        b, s = ids.shape
        h = self.emb(ids)
        q, k, v = self.qkv(self.rms(h)).view(b, s, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        q, k = self.rope(q, pos), self.rope(k, pos)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        L = self.k_cache.shape[2]
        mask = torch.arange(L, device=pos.device)[None, :] <= pos[:, None]
        att = (q @ self.k_cache.transpose(-1, -2)) / (self.hd ** 0.5)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ self.v_cache).transpose(1, 2).reshape(b, s, -1)
        h = h + self.o(y)
        h = h + self.down(F.silu(self.gate(h)) * self.up(h))
        return self.lm(self.rms(h))


def test_tiny_llama_static_kv_cache(backend):
    torch.manual_seed(0)
    m = TinyLlama()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="nkipy", fullgraph=True)
    ids = torch.tensor([[3, 7, 1]])
    with torch.no_grad():
        pos = torch.arange(3)
        got, want = c(ids, pos), ref(ids, pos)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(m.k_cache, ref.k_cache, rtol=1e-5, atol=1e-5)
        tok = got[:, -1].argmax(-1, keepdim=True)
        assert torch.equal(tok, want[:, -1].argmax(-1, keepdim=True))
        for step in range(3, 6):   # greedy decode, one token at a time
            p = torch.tensor([step])
            lg, lw = c(tok, p), ref(tok, p)
            torch.testing.assert_close(lg, lw, rtol=1e-4, atol=1e-4)
            tok = lg[:, -1].argmax(-1, keepdim=True)
        torch.testing.assert_close(m.v_cache, ref.v_cache, rtol=1e-5, atol=1e-5)


# ---- semantics -------------------------------------------------------------------------

def test_input_and_buffer_mutation(backend):
    def f(x, acc):
        acc.add_(x)
        x.mul_(2)
        return x + acc

    c = torch.compile(f, backend="nkipy")
    x, acc = torch.randn(5), torch.ones(5)
    x2, acc2 = x.clone(), acc.clone()
    with torch.no_grad():
        out = c(x, acc)
    want = f(x2, acc2)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(x, x2)
    torch.testing.assert_close(acc, acc2)

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(3))

        def forward(self, x):
            self.n += 1
            return x * self.n

    m = Counter()
    cm = torch.compile(m, backend="nkipy")
    with torch.no_grad():
        cm(torch.ones(3))
        out = cm(torch.ones(3))
    assert torch.equal(m.n, torch.full((3,), 2.0)) and torch.equal(out, torch.full((3,), 2.0))


def test_integer_and_bool_outputs(backend):
    def f(x):
        return x.argmax(-1), x > 0, (x * 3).to(torch.int64)

    c = torch.compile(f, backend="nkipy")
    x = torch.randn(3, 4) * 4
    got, want = c(x), f(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_partitioned_graph_runs_unsupported_ops_on_cpu(backend, caplog):
    def f(x):
        y = torch.sin(x) * 2 + 1
        z = torch.special.bessel_j0(y)     # no registry entry: runs on the CPU
        return (z.exp() * y).sum(-1), y

    c = torch.compile(f, backend="nkipy", fullgraph=True)
    x = torch.randn(3, 4)
    with caplog.at_level(logging.WARNING, logger="torch_to_nkipy"):
        got = c(x)
        got2 = c(x + 1)
    want, want2 = f(x), f(x + 1)
    for g, w in zip(got + got2, want + want2):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    msgs = [r.getMessage() for r in caplog.records if "bessel_j0" in r.getMessage()]
    assert len(msgs) <= 1  # logged once per process (possibly by an earlier test)


def test_cpu_fallback_warning_names_only_aten_ops(backend, caplog):
    """A CPU op with a tuple result (eigvals' complex pair through
    linalg_eig) is unpacked by getitem nodes; the warning and the statistics
    name the ATen op, never _operator.getitem."""
    from spiky.stats import get_stats

    def f(x):
        return torch.linalg.eigvals(x * 2).abs() + 1

    _LOGGED = __import__("torch_to_nkipy.backend", fromlist=["_LOGGED_UNSUPPORTED"])._LOGGED_UNSUPPORTED
    _LOGGED.clear()
    x = torch.randn(4, 4, dtype=torch.float64)
    with caplog.at_level(logging.WARNING, logger="torch_to_nkipy"):
        got = torch.compile(f, backend="nkipy")(x)
    torch.testing.assert_close(got, f(x))
    msgs = [r.getMessage() for r in caplog.records if "is not supported" in r.getMessage()]
    assert msgs and all("aten." in m for m in msgs), msgs
    assert not any("getitem" in m for m in msgs), msgs
    assert not any("getitem" in name for name in get_stats().cpu_partition_ops)


def test_fullgraph_graph_break_raises(backend):
    def f(x):
        y = x * 2
        print("side effect")   # a graph break
        return y + 1

    with pytest.raises(Exception):
        torch.compile(f, backend="nkipy", fullgraph=True)(torch.ones(2))
    torch._dynamo.reset()
    out = torch.compile(f, backend="nkipy")(torch.ones(2))   # graph break: two graphs
    assert torch.equal(out, torch.full((2,), 3.0))


def test_training_sgd_matches_eager(backend):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="nkipy")
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05)
    for _ in range(3):
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        loss = F.cross_entropy(c(x), y)
        loss_r = F.cross_entropy(ref(x), y)
        for o, l in ((opt, loss), (opt_r, loss_r)):
            o.zero_grad()
            l.backward()
            o.step()
        torch.testing.assert_close(loss, loss_r, rtol=1e-5, atol=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)


class MixedNet(nn.Module):
    """Embedding, multi-head attention, LayerNorm, Conv1d, BatchNorm (training: its
    functional form and convolution_backward run on the CPU), GELU."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.ln = nn.LayerNorm(16)
        self.conv = nn.Conv1d(16, 16, 3, padding=1)
        self.bn = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 5)

    def forward(self, ids):
        h = self.emb(ids)
        a, _ = self.attn(h, h, h, need_weights=False)
        h = self.ln(h + a)
        h = F.gelu(self.bn(self.conv(h.transpose(1, 2)))).transpose(1, 2)
        return self.head(h.mean(1))


def test_training_mixed_model_partitioned(backend):
    torch.manual_seed(0)
    m = MixedNet()
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="nkipy")
    ids, y = torch.randint(0, 20, (3, 7)), torch.randint(0, 5, (3,))
    loss = F.cross_entropy(c(ids), y)
    loss.backward()
    loss_r = F.cross_entropy(ref(ids), y)
    loss_r.backward()
    torch.testing.assert_close(loss, loss_r, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    for p, q in zip(m.buffers(), ref.buffers()):   # BatchNorm running stats
        torch.testing.assert_close(p, q)
    m.eval()
    ref.eval()
    with torch.no_grad():
        torch.testing.assert_close(c(ids), ref(ids), rtol=1e-5, atol=1e-5)


def test_dynamic_shapes_unsafe_to_pad_recompile_per_shape(backend, caplog):
    """A graph that reduces over its dynamic size is compiled for each exact size
    (buckets and padding: tests/spiky)."""
    torch.manual_seed(0)
    m = MLP(8, 8)
    f = lambda x: m(x).softmax(0)  # noqa: E731
    c = torch.compile(f, backend="nkipy", dynamic=True)
    with caplog.at_level(logging.INFO, logger="torch_to_nkipy"), torch.no_grad():
        for n in (2, 3, 5, 3):
            x = torch.randn(n, 8)
            torch.testing.assert_close(c(x), f(x), rtol=1e-5, atol=1e-5)
    msgs = [r.getMessage() for r in caplog.records]
    assert any("not padding the dynamic size" in m for m in msgs)
    assert sum("compiling forward graph for new input shapes" in m for m in msgs) == 2


def test_dynamic_training(backend):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    ref = copy.deepcopy(m)
    c = torch.compile(m, backend="nkipy", dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 4)
        c(x).sum().backward()
        ref(x).sum().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)


# ---- cache reuse across processes ------------------------------------------------------

_CHILD = textwrap.dedent("""
    import sys, torch, torch.nn as nn
    sys.path.insert(0, {root!r})
    from torch_to_nkipy import init_nkipy_backend
    from torch_to_nkipy.kernel import STATS
    init_nkipy_backend(nkipy_cache={cache!r})
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    c = torch.compile(m, backend="nkipy")
    with torch.no_grad():
        x = torch.randn(3, 8)
        assert torch.allclose(c(x), m(x), atol=1e-5)
    print("STATS", STATS["kernels"], STATS["compiled"], STATS["cache_hits"])
""")


def test_second_process_compiles_nothing(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(root=ROOT, cache=str(tmp_path / "cache")))
    env = dict(os.environ)
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(var, None)
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stdout.splitlines() if l.startswith("STATS")][-1]
        runs.append(tuple(int(v) for v in line.split()[1:]))
    (k1, c1, h1), (k2, c2, h2) = runs
    assert k1 >= 1 and c1 == k1
    assert k2 == k1 and c2 == 0 and h2 == k2


def test_per_function_options(backend):
    f = torch.compile(lambda x: x * 2, backend="nkipy",
                      options={"pipelined": False, "keep_outputs_on_device": False,
                               "output_layout": "unpad", "buckets": [32, 64]})
    assert torch.equal(f(torch.ones(2)), torch.full((2,), 2.0))
    torch._dynamo.reset()
    g = torch.compile(lambda x: x * 3, backend="nkipy", options={"no_such_option": 1})
    with pytest.raises(Exception, match="unknown nkipy backend option"):
        g(torch.ones(2))
    torch._dynamo.reset()
    h = torch.compile(lambda x: x * 4, backend="nkipy", options={"buckets": []})
    with pytest.raises(Exception, match="buckets"):
        h(torch.ones(2))


# ---- tensors on the nkipy device (spike_torch) -------------------------------------------

def _spike_torch():
    try:
        import spike_torch  # noqa: F401
        torch.empty(1, device="nkipy")
        return True
    except Exception:  # pragma: no cover - spike_torch not built
        return False


def test_nkipy_device_tensors_zero_copy(backend):
    if not _spike_torch():   # checked here, not at collection: importing it starts the runtime
        pytest.skip("spike_torch (the nkipy device) is not available")
    torch.manual_seed(0)
    m = TinyLlama()
    ref = copy.deepcopy(m)
    md = m.to("nkipy")
    c = torch.compile(md, backend="nkipy", fullgraph=True)
    ids, pos = torch.tensor([[3, 7, 1]]), torch.arange(3)
    with torch.no_grad():
        got = c(ids.to("nkipy"), pos.to("nkipy"))
        want = ref(ids, pos)
    assert got.device.type == "nkipy"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(md.k_cache.cpu(), ref.k_cache, rtol=1e-5, atol=1e-5)

    def f(x, acc):
        acc.add_(x)
        return x * 2

    cf = torch.compile(f, backend="nkipy")
    x, acc = torch.randn(6).to("nkipy"), torch.zeros(6).to("nkipy")
    ptr = acc.data_ptr()
    out = cf(x, acc)
    assert out.device.type == "nkipy" and acc.data_ptr() == ptr
    torch.testing.assert_close(acc.cpu(), x.cpu())
    torch.testing.assert_close(out.cpu(), x.cpu() * 2)


def test_communicator_id(monkeypatch, caplog):
    """The name the ranks' runtimes meet under for collectives ($NKRT_CC_ID): kept
    when set; never derived from torchrun's environment (anyone could guess it)."""
    from torch_to_nkipy.config import _communicator_id

    for k in ("NKRT_CC_ID", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    assert _communicator_id(1) is None
    assert _communicator_id(2) is None and "NKRT_CC_ID" not in os.environ  # nothing to go by
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    with caplog.at_level("WARNING", logger="torch_to_nkipy"):
        assert _communicator_id(2) is None and "NKRT_CC_ID" not in os.environ
    assert "neither torch.distributed nor torchrun's store" in caplog.text
    assert "set NKRT_CC_ID to a name private to the job" in caplog.text
    monkeypatch.setenv("NKRT_CC_ID", "mine")
    assert _communicator_id(4) == "mine"


def test_communicator_id_through_torchrun_store(monkeypatch):
    """Without torch.distributed, under torchrun: a random name agreed through the
    agent's store, the same for every rank, another for another job."""
    from datetime import timedelta

    import torch.distributed as dist
    from torch_to_nkipy.config import _communicator_id

    def agree(store, rank):
        monkeypatch.delenv("NKRT_CC_ID", raising=False)
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("MASTER_PORT", str(store.port))
        return _communicator_id(2)

    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    job = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30),
                        wait_for_workers=False)
    names = [agree(job, r) for r in (1, 0)]
    assert names[0] == names[1] and names[0].startswith("job-") and len(names[0]) == 36
    assert os.environ["NKRT_CC_ID"] == names[0]
    other = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30),
                          wait_for_workers=False)
    assert agree(other, 0) != names[0]
    # a value that no rank drew is refused
    other.set("nkipy/cc_id/none/1", "guessable")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    with pytest.raises(RuntimeError, match="not a communicator name drawn by a rank"):
        agree(other, 0)


def test_collective_reduce_ops_refused_by_name():
    from torch_to_nkipy.lowering.collectives import _reduce_op

    assert _reduce_op("SUM") == "sum" and _reduce_op("avg") == "avg"
    with pytest.raises(NotImplementedError, match="reduce_op 'band' is not supported "
                                                  r"\(supported: sum, avg, product, max, min\)"):
        _reduce_op("band")


def test_nkipy_device_native_call(backend, monkeypatch):
    """Calls on nkipy tensors take the one native call (spike_torch kernel_calls):
    int64 arguments narrowed, an int64 counter updated in place widened back, and
    an input it was not built for (a strided view) handled by the general path."""
    if not _spike_torch():
        pytest.skip("spike_torch (the nkipy device) is not available")
    from torch_to_nkipy import executor as executor_mod
    from torch_to_nkipy import kernel as kernel_mod

    real = executor_mod.kernel_calls
    taken = []

    class Counting:
        kernel_call = staticmethod(real.kernel_call)

        @staticmethod
        def run_kernel_call(call, args):
            res = real.run_kernel_call(call, args)
            taken.append(res is not None)
            return res

    monkeypatch.setattr(executor_mod, "kernel_calls", Counting)

    def f(x, n, idx):
        n.add_(1)
        return x * n + idx

    cf = torch.compile(f, backend="nkipy")
    x = torch.arange(4.0).to("nkipy")
    n = torch.tensor([5]).to("nkipy")
    idx = torch.tensor([1, 2, 3, 4]).to("nkipy")
    for step in range(3):
        out = cf(x, n, idx)
        assert out.device.type == "nkipy"
        assert torch.equal(out.cpu(), torch.arange(4.0) * (6 + step) + torch.tensor([1, 2, 3, 4]))
    assert n.dtype == torch.int64 and n.item() == 8
    assert taken == [True, True, True]
    big = torch.tensor([2**40]).to("nkipy")    # int64 is computed in 64 bits
    out = cf(x, big, idx)
    assert big.item() == 2**40 + 1
    assert torch.equal(out.cpu(), torch.arange(4.0) * (2**40 + 1) + torch.tensor([1, 2, 3, 4]))

    # the kernel itself given a strided view: the native call declines, the general
    # path copies it and the result is still right
    k = next(k for k in kernel_mod._BY_HASH.values() if len(k.tensor_arg_idx) == 3
             and sorted(map(str, k.arg_dtypes.values())) == ["torch.float32", "torch.int64",
                                                             "torch.int64"])
    n_at = k.param_index[next(iter(k.aliases.values()))]    # AOT orders the mutated input first
    x_at = next(i for i, dt in k.arg_dtypes.items() if dt is torch.float32)
    args = [idx] * 3
    args[n_at] = n
    args[x_at] = torch.arange(8.0).to("nkipy")[::2]
    res = k.executor.run(tuple(args), None, kernel_mod.DEFAULT_OPTIONS, None)
    assert taken[-1] is False
    tensors = [r for r in res if isinstance(r, torch.Tensor) and r.dtype == torch.float32]
    assert any(torch.equal(r.cpu(), torch.arange(0.0, 8.0, 2.0) * 9 + torch.tensor([1, 2, 3, 4]))
               for r in tensors)


def test_nkipy_device_weight_updates_reach_packed_gemms(backend):
    """The runtime packs GEMM weights once and reuses them (docs/gemm.md); every
    way a user changes the weights of a compiled model on the nkipy device
    between calls shows in the next result."""
    if not _spike_torch():
        pytest.skip("spike_torch (the nkipy device) is not available")
    import spike

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 32))
    md = copy.deepcopy(m).to("nkipy")
    c = torch.compile(md, backend="nkipy")
    x = torch.randn(16, 64)
    xd = x.to("nkipy")
    rt = spike.get_spike_singleton()

    def check():
        for _ in range(3):            # first sighting, packing, reuse
            with torch.no_grad():
                got = c(xd).cpu()
                want = m(x)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    check()
    before = rt.gemm_pack_stats()
    packing = before["limit_bytes"] > 0   # both providers pack weights (docs/gemm.md)
    if packing:
        assert before["hits"] >= 2 and before["packed_matrices"] >= 2
    with torch.no_grad():                              # in-place arithmetic
        for model in (m, md):
            model[0].weight.add_(0.5)
    check()
    w = torch.randn(32, 96)
    with torch.no_grad():                              # copy_ from the CPU
        m[2].weight.copy_(w)
        md[2].weight.copy_(w)
    check()
    with torch.no_grad():                              # part of it zeroed
        m[0].weight[:8].zero_()
        md[0].weight[:8].zero_()
    check()
    for model, inp in ((m, x), (md, xd)):             # an optimizer step on the device
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt.zero_grad()
        model(inp).square().sum().backward()
        opt.step()
    check()
    w = torch.randn(96, 64)                            # new memory through .data
    m[0].weight.data = w.clone()
    md[0].weight.data = w.to("nkipy")
    check()
    if packing:
        after = rt.gemm_pack_stats()
        assert after["invalidations"] >= before["invalidations"] + 4
        assert after["hits"] > before["hits"]


def test_int64_out_of_int32_range_computed_exactly(backend):
    f = torch.compile(lambda i: i + 1, backend="nkipy")
    assert torch.equal(f(torch.tensor([2**31 - 2])), torch.tensor([2**31 - 1]))
    assert torch.equal(f(torch.tensor([2**40])), torch.tensor([2**40 + 1]))


@pytest.mark.parametrize("name,fn,args", [
    ("no_inputs", lambda: torch.arange(5) * 2, ()),
    ("zero_dim", lambda x, s: x * s, (torch.ones(3), torch.tensor(3.0))),
    ("empty", lambda x: x[:0] + 1, (torch.ones(3, 2),)),
    ("bool_input", lambda m, x: torch.where(m, x, -x), (torch.tensor([True, False]), torch.ones(2))),
    ("identity", lambda x: x, (torch.ones(2),)),
    ("int_floordiv", lambda i: i // 2, (torch.tensor([1, 5, -3]),)),
    ("int_truediv", lambda i: i / 2, (torch.tensor([1, 5, -3]),)),
    ("constant", lambda x: x + torch.tensor([1.0, 2.0]), (torch.ones(2),)),
    ("uint8", lambda x: x + 1, (torch.tensor([1, 255], dtype=torch.uint8),)),
    ("bf16_constant", lambda x: x + torch.tensor([1.0, 2.5], dtype=torch.bfloat16),
     (torch.ones(2, dtype=torch.bfloat16),)),
    ("inplace_view", lambda x: x[0].add_(1), (torch.zeros(2, 2),)),
    ("argsort_fallback", lambda x: torch.argsort(x) + 1, (torch.tensor([3.0, 1.0, 5.0]),)),
])
def test_edge_cases(backend, name, fn, args):
    want_args = [a.clone() for a in args]
    got = torch.compile(fn, backend="nkipy")(*args)
    want = fn(*want_args)
    assert got.dtype == want.dtype and torch.equal(got, want)
    for a, b in zip(args, want_args):
        assert torch.equal(a, b)


def test_concurrent_calls_share_staging_safely(backend):
    import threading

    torch.manual_seed(0)
    m = MLP(8, 8)
    c = torch.compile(m, backend="nkipy")
    with torch.no_grad():
        c(torch.randn(4, 8))
    errors = []

    def worker(seed):
        g = torch.Generator().manual_seed(seed)
        try:
            with torch.no_grad():
                for _ in range(20):
                    x = torch.randn(4, 8, generator=g)
                    torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_nkipy_device_partitioned_graph(backend):
    if not _spike_torch():
        pytest.skip("spike_torch (the nkipy device) is not available")
    import warnings

    def f(x, w):
        h = torch.tanh(x @ w)
        h = torch.special.bessel_j0(h)     # CPU fallback between two kernels
        return torch.softmax(h * 2, dim=-1)

    x, w = torch.randn(4, 16), torch.randn(16, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(f, backend="nkipy")(x.to("nkipy"), w.to("nkipy"))
    assert got.device.type == "nkipy"
    torch.testing.assert_close(got.cpu(), f(x, w), rtol=1e-5, atol=1e-5)


def test_device_core_maps_the_visible_core(monkeypatch, nkipy_cache):
    from torch_to_nkipy.config import NKIPyBackendConfig, visible_core_ids

    def cfg(rank, world, offset=0):
        return NKIPyBackendConfig(nkipy_cache_prefix=nkipy_cache, nkipy_cache=nkipy_cache,
                                  log_level=logging.INFO, rank=rank, world_size=world,
                                  core_offset=offset)

    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    assert visible_core_ids() == list(range(32)) and cfg(3, 4).device_core == 3
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4-5,8")
    assert visible_core_ids() == [4, 5, 8]
    assert cfg(1, 2, offset=4).device_core == 1 and cfg(4, 8, offset=4).device_core == 2
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "7")
    assert cfg(0, 1).device_core == 0          # one process, one visible core
    with pytest.raises(RuntimeError, match=r"NeuronCore 1 \(rank 1 \+ core_offset 0\) is not "
                                           r"visible to this process"):
        cfg(1, 2).device_core


@pytest.mark.parametrize("kwargs, env, exc, message", [
    (dict(rank=3, world_size=2), {}, ValueError, r"invalid rank 3 / world_size 2: the rank must "
                                                 r"be in \[0, world_size\)"),
    (dict(rank=0, world_size=0), {}, ValueError, r"invalid rank 0 / world_size 0"),
    (dict(rank=0, world_size=2.5), {}, TypeError, r"world_size must be an int, not float 2.5"),
    (dict(rank="1", world_size=2), {}, TypeError, r"rank must be an int, not str '1'"),
    ({}, {"WORLD_SIZE": "abc"}, ValueError, r"environment variable WORLD_SIZE must be an "
                                            r"integer, got 'abc'"),
    ({}, {"RANK": "-1"}, ValueError, r"environment variable RANK must be >= 0, got '-1'"),
    (dict(rank=7, world_size=1), {}, ValueError, r"invalid rank 7 / world_size 1"),
    (dict(rank=7), {"WORLD_SIZE": "4"}, ValueError, r"invalid rank 7 / world_size 4"),
    ({}, {"LOCAL_RANK": "3", "WORLD_SIZE": "2"}, ValueError, r"invalid rank 3 / world_size 2"),
])
def test_bad_rank_and_world_size_refused(tmp_path, monkeypatch, kwargs, env, exc, message):
    reset_nkipy_backend()
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(exc, match=message):
        init_nkipy_backend(nkipy_cache=str(tmp_path), **kwargs)
    assert not torch_to_nkipy.is_nkipy_backend_initialized()


@pytest.mark.parametrize("kwargs, env, rank", [
    ("rank=7", {}, 7),
    ("", {"LOCAL_RANK": "3"}, 3),
    ("", {"RANK": "5"}, 5),
])
def test_rank_without_a_world_size_names_the_cache(tmp_path, kwargs, env, rank):
    """As in the original, a single process (no world size given, no process
    group, no WORLD_SIZE) may carry any rank: it names the cache directory,
    and compiled graphs run in a world of one. A fresh process (this one's
    runtime sees fewer cores than a new one does)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import os, torch, torch_to_nkipy
        torch_to_nkipy.init_nkipy_backend(nkipy_cache={str(tmp_path)!r}, {kwargs})
        cfg = torch_to_nkipy.get_nkipy_backend_config()
        assert (cfg.rank, cfg.world_size) == ({rank}, 1), cfg
        assert cfg.nkipy_cache == {str(tmp_path / f"rank_{rank}")!r}
        torch_to_nkipy.set_nkipy_backend_config(cfg)      # the same config installs again
        x = torch.arange(6.0)
        assert torch.equal(torch.compile(lambda t: t * 2 + 1, backend="nkipy")(x), x * 2 + 1)
        assert any(n.startswith("kernel_") for n in os.listdir(cfg.nkipy_cache))
        print("ok")
    """)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NEURON_RT_VISIBLE_CORES")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(clean, **env), timeout=300)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]
