"""torch.compile(backend="nkipy") of graphs with 8-bit float casts
(docs/torch_to_nkipy.md#float8): the fp8 quantize / dequantize pattern and data
movement on float8 compile into kernels (no CPU partition) whose results equal
eager CPU PyTorch bit for bit, E4M3FN's saturation at +-448 and NaN 0x7F
included; every other op on float8 runs in a CPU partition, so it computes or
refuses exactly as eager does."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import spiky

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.itemsize])


def _values() -> torch.Tensor:
    """float32: every 65537th bit pattern, each code's value of both formats,
    the ties between neighbouring codes and one ulp either side."""
    u = [np.arange(0, 2 ** 32, 65537, dtype=np.uint64).astype(np.uint32)]
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for f8 in FLOAT8:
        v = codes.view(f8).float().numpy()
        v = np.unique(v[np.isfinite(v)])
        mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
        for w in (v, mids, -mids):
            u += [w.view(np.uint32), np.nextafter(w, np.float32(np.inf)).view(np.uint32),
                  np.nextafter(w, np.float32(-np.inf)).view(np.uint32)]
    u += [np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x447A0000,
                    0xC9742400], np.uint32)]          # inf, NaNs, 1000, -1e6
    return torch.from_numpy(np.unique(np.concatenate(u)).view(np.int32)).view(torch.float32)


def _no_cpu_partition() -> None:
    """Every graph compiled since spiky.reset_stats() was lowered whole (counted:
    the backend's warning is logged once per op and process, so an earlier test
    of the same worker may have had it)."""
    st = spiky.get_stats()
    assert st.graphs_compiled > 0 and st.graphs_partitioned == 0, st.cpu_partition_ops


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
@pytest.mark.parametrize("where", ["cpu", "nkipy"])
def test_quantize_dequantize_compiles_and_equals_eager(backend, f8, where):
    def qdq(x, scale):
        q = (x / scale).to(f8)
        return q, q.to(torch.float32) * scale

    x = _values()
    scale = torch.tensor(0.5)
    want = qdq(x, scale)
    torch._dynamo.reset()
    spiky.reset_stats()
    got = torch.compile(qdq, backend="nkipy")(x.to(where), scale.to(where))
    _no_cpu_partition()
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(_bits(g), _bits(w))


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
def test_float8_data_movement_and_conversions_compile(backend, f8):
    other = FLOAT8[1] if f8 == FLOAT8[0] else FLOAT8[0]

    def fn(x, m):
        y = x.to(f8)
        z = torch.cat([y.t(), y.t()[:1]])
        return (z.contiguous(), torch.where(m, y, y[1:2].expand(y.shape)),
                y.to(other), y.to(torch.float16), y.to(torch.bfloat16), y.to(torch.int32),
                x.double().to(f8), y[:, 1].unsqueeze(0).clone())

    x = (torch.randn(16, 8) * 200).clamp(-2e4, 2e4)
    x[0, :5] = torch.tensor([float("inf"), float("nan"), -1e9, 464.0, -float("nan")])
    m = torch.rand(16, 8) > 0.5
    want = fn(x, m)
    torch._dynamo.reset()
    spiky.reset_stats()
    got = torch.compile(fn, backend="nkipy")(x.to("nkipy"), m.to("nkipy"))
    _no_cpu_partition()
    for g, w in zip(got, want):     # (NaN to bfloat16 is 0x7FC0; to int32 INT_MIN, as eager)
        assert g.dtype == w.dtype and torch.equal(_bits(g), _bits(w))


def test_other_float8_ops_run_on_the_cpu_as_eager(backend):
    """An op PyTorch's CPU does not compute on float8 fails compiled as eager
    (its own NotImplementedError), one it computes gives its bits."""
    from torch_to_nkipy.lowering import is_supported_node

    def bad(x):
        y = x.to(torch.float8_e4m3fn)
        return y + y

    x = torch.randn(8)
    with pytest.raises(NotImplementedError) as eager:
        bad(x)
    torch._dynamo.reset()
    with pytest.raises(Exception) as compiled:
        torch.compile(bad, backend="nkipy")(x.to("nkipy"))
    assert str(eager.value).splitlines()[0] in str(compiled.value)

    def ok(x):
        y = x.to(torch.float8_e5m2)
        return (y == y), y.abs()

    torch._dynamo.reset()
    spiky.reset_stats()
    got = torch.compile(ok, backend="nkipy")(x.to("nkipy"))
    for g, w in zip(got, ok(x)):
        assert torch.equal(_bits(g), _bits(w))
    # in a CPU partition (counted: the warning is logged once per process, so an
    # earlier test of the same worker may have had it)
    assert "aten.abs.default" in spiky.get_stats().cpu_partition_ops

    gm = torch.fx.symbolic_trace(lambda y: y)     # a graph node without float8 meta
    assert all(is_supported_node(n) for n in gm.graph.nodes)
