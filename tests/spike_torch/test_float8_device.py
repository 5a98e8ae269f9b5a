"""torch.float8_e4m3fn and torch.float8_e5m2 on the nkipy device
(docs/spike_torch.md#float8): held in device memory, copied and printed as on the
CPU, converted to and from every other dtype bit for bit as the CPU converts
(E4M3FN saturates at +-448, NaN 0x7F), moved by device kernels (cat, where) and
every other op as eager CPU PyTorch does it: computed where the CPU computes it
(eq, abs, mm), refused with the CPU's own error where it does not (add, sum, lt)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from spike_torch import dtypes

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2]
CODES = torch.arange(256, dtype=torch.int32).to(torch.uint8)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.itemsize])


def _assert_same(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert torch.equal(_bits(got), _bits(ref))


def _sweep() -> torch.Tensor:
    """float32 values: every 4099th bit pattern, random ones, and for both formats
    each code's value, the ties between neighbours and one ulp either side."""
    rng = np.random.default_rng(3)
    u = [np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32),
         rng.integers(0, 2 ** 32, 20_000, dtype=np.uint64).astype(np.uint32)]
    for f8 in FLOAT8:
        v = CODES.view(f8).float().numpy()
        v = np.unique(v[np.isfinite(v)])
        mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
        for w in (v, mids, -mids, np.float32(2) * v[-1:]):
            w = w.astype(np.float32)
            u += [w.view(np.uint32), np.nextafter(w, np.float32(np.inf)).view(np.uint32),
                  np.nextafter(w, np.float32(-np.inf)).view(np.uint32)]
    return torch.from_numpy(np.unique(np.concatenate(u)).view(np.int32)).view(torch.float32)


def test_float8_is_in_the_one_dtype_table():
    import ml_dtypes

    assert dtypes.dtype_name(torch.float8_e4m3fn) == "float8_e4m3fn"
    assert dtypes.numpy_dtype(torch.float8_e5m2) == np.dtype(ml_dtypes.float8_e5m2)
    assert dtypes.torch_dtype(np.dtype(ml_dtypes.float8_e4m3fn)) is torch.float8_e4m3fn
    assert dtypes.runtime_code(torch.float8_e4m3fn) == 14
    assert dtypes.runtime_code(torch.float8_e5m2) == 15
    t = CODES.view(torch.float8_e5m2)
    a = dtypes.torch_to_numpy(t)
    assert a.dtype == np.dtype(ml_dtypes.float8_e5m2)
    assert np.array_equal(a.view(np.uint8), CODES.numpy())
    _assert_same(dtypes.numpy_to_torch(a), t)


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
def test_storage_copies_and_printing(f8):
    x = CODES.view(f8)
    d = x.to("nkipy")
    assert d.device.type == "nkipy" and d.dtype == f8
    _assert_same(d.cpu(), x)                                  # every code, NaNs included
    e = torch.empty(5, 3, dtype=f8, device="nkipy")
    assert e.dtype == f8 and e.device.type == "nkipy"
    e.copy_(x[:15].reshape(5, 3))
    _assert_same(e.cpu(), x[:15].reshape(5, 3))
    y = x[:8].reshape(2, 4)
    one_line = lambda t: " ".join(repr(t).split())  # noqa: E731
    assert one_line(y.to("nkipy")) == one_line(y).replace(f"dtype={f8}",
                                                          f"device='nkipy:0', dtype={f8}")
    assert str(y.to("nkipy").tolist()) == str(y.tolist())


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
def test_casts_on_the_device_are_the_cpus_bit_for_bit(f8):
    x = CODES.view(f8)
    d = x.to("nkipy")
    other = FLOAT8[1] if f8 == FLOAT8[0] else FLOAT8[0]
    for dst in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                torch.int64, torch.uint8, torch.bool, other):
        src = x if dst.is_floating_point or dst == torch.bool else x[x.float().isfinite()]
        _assert_same(src.to("nkipy").to(dst), src.to(dst))
    y = _sweep()
    _assert_same(y.to("nkipy").to(f8), y.to(f8))             # ties, overflow, NaN, subnormals
    for src in (y.double(), y.half(), y.bfloat16(), torch.arange(-70000, 70000, 13),
                torch.tensor([True, False])):
        _assert_same(src.to("nkipy").to(f8), src.to(f8))
    out = torch.empty(y.shape, dtype=f8, device="nkipy")
    out.copy_(y.to("nkipy"))
    _assert_same(out, y.to(f8))
    _assert_same(d.float(), x.float())


@pytest.mark.parametrize("f8", FLOAT8, ids=str)
def test_ops_are_the_cpus(f8):
    """Data movement runs on the device (kernels for cat and where); the ops the
    CPU computes on float8 give its bits; the ones it refuses, its error."""
    x = CODES.view(f8)
    mask = torch.arange(256) % 3 == 0
    cases = {
        "clone": lambda t: t.clone(), "cat": lambda t: torch.cat([t, t[:7]]),
        "where": lambda t: torch.where(mask.to(t.device), t, t[torch.arange(255, -1, -1)
                                                              .to(t.device)]),
        "t": lambda t: t.reshape(16, 16).t().contiguous(), "slice": lambda t: t[1::3].contiguous(),
        "stack": lambda t: torch.stack([t, t], 1), "fill": lambda t: t.clone().fill_(3.3),
        "zero": lambda t: t.clone().zero_(), "index": lambda t: t[torch.tensor([3, 1, 255])
                                                                  .to(t.device)],
        "eq": lambda t: t == t, "ne": lambda t: t != 0, "abs": lambda t: t.abs(),
        "isnan": lambda t: t.isnan(), "full": lambda t: torch.full((3,), 300.0, dtype=f8,
                                                                  device=t.device),
        "mm": lambda t: t[:16].reshape(4, 4) @ t[16:32].reshape(4, 4),
    }
    for name, fn in cases.items():
        _assert_same(fn(x.to("nkipy")), fn(x))
    import spike_torch

    d = x.to("nkipy")
    before = spike_torch.op_stats()
    torch.cat([d, d[:5]])
    torch.where(mask.to("nkipy"), d, d)
    after = spike_torch.op_stats()
    assert after["device_calls"] - before["device_calls"] == 2    # kernels, not the CPU
    assert after["cpu_fallback_calls"] == before["cpu_fallback_calls"]
    for name, fn in {"add": lambda t: t + t, "sum": lambda t: t.sum(), "lt": lambda t: t < t,
                     "mul_f32": lambda t: t * torch.ones(256, device=t.device),
                     "neg": lambda t: -t,
                     # a Python scalar is checked: "cannot be converted ... without overflow"
                     "fill": lambda t: t.clone().fill_(1e6)}.items():
        with pytest.raises((NotImplementedError, RuntimeError)) as cpu:
            fn(x)
        with pytest.raises(type(cpu.value)) as dev:
            fn(x.to("nkipy"))
        assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0], name
