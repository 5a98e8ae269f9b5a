"""8-bit floats in kernels (docs/nkipy.md#float8): float8_e4m3fn, float8_e5m2 and
NKI's float8_e4m3 as kernel inputs, outputs and constants, converted with
astype by the C code of nkipy_prelude.h and moved without changing a bit.
Every comparison here is of bits: all 256 codes up to float32, a dense sweep of
float32 bit patterns (ties, subnormals, overflow, infinities, NaN payloads)
down, against ml_dtypes (NumPy's semantics) and, inside torch_semantics,
against PyTorch's CPU casts."""
from __future__ import annotations

import numpy as np
import pytest

from nkipy.core.dtypes import torch_semantics
from nkipy.core.interp import run_graph
from nkipy.core.trace import trace
from op_cases import run_kernel

ml_dtypes = pytest.importorskip("ml_dtypes")

FORMATS = [np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2),
           np.dtype(ml_dtypes.float8_e4m3)]
CODES = np.arange(256, dtype=np.uint8)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("float8_cache")


def _sweep() -> np.ndarray:
    """float32 values, as bits: every 4099th pattern, random patterns, and for
    each format every code's value, the midpoints between neighbouring codes
    (ties) and one float32 ulp either side of them."""
    rng = np.random.default_rng(8)
    parts = [np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32),
             rng.integers(0, 2 ** 32, 50_000, dtype=np.uint64).astype(np.uint32),
             np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                       0x7FA00000, 0xFFFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF,
                       0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0, 0x80000000], np.uint32)]
    with np.errstate(all="ignore"):
        for f8 in FORMATS:
            v = CODES.view(f8).astype(np.float32)
            v = np.unique(v[np.isfinite(v)])
            mids = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
            beyond = np.float32(v[-1]) + (v[-1] - v[-2]) / 2 * np.arange(1, 4, dtype=np.float32)
            for w in (v, mids, beyond, -mids, -beyond):
                w = w.astype(np.float32)
                parts += [w.view(np.uint32), np.nextafter(w, np.float32(np.inf)).view(np.uint32),
                          np.nextafter(w, np.float32(-np.inf)).view(np.uint32)]
    return np.unique(np.concatenate(parts))


SWEEP = _sweep()


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.mark.parametrize("f8", FORMATS, ids=lambda d: d.name)
def test_every_code_converts_to_float32_as_ml_dtypes(f8, cache) -> None:
    x = CODES.view(f8)
    _, (got,) = run_kernel(lambda x: x.astype(np.float32), x, cache_dir=cache)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(_bits(got), _bits(x.astype(np.float32)))


@pytest.mark.parametrize("f8", FORMATS, ids=lambda d: d.name)
def test_float32_sweep_rounds_to_float8_as_ml_dtypes(f8, cache) -> None:
    y = SWEEP.view(np.float32)
    _, (got,) = run_kernel(lambda y: y.astype(f8), y, cache_dir=cache)
    assert got.dtype == f8
    with np.errstate(all="ignore"):
        ref = y.astype(f8)
    bad = _bits(got) != _bits(ref)
    assert not bad.any(), [(hex(int(u)), int(g), int(r)) for u, g, r in
                           zip(SWEEP[bad][:8], _bits(got)[bad][:8], _bits(ref)[bad][:8])]


def test_known_roundings() -> None:
    """The rules the sweep checks, spelled out (ml_dtypes' own values)."""
    e4m3fn, e5m2, e4m3 = FORMATS
    with np.errstate(all="ignore"):
        v = np.array([464, 465, np.inf, 2 ** -10, 1.5 * 2 ** -10], np.float32)
        # E4M3FN: 464 is the tie of 448 and 480 (not a number) -> even 448; past it NaN
        assert _bits(v.astype(e4m3fn)).tolist() == [0x7E, 0x7F, 0x7F, 0x00, 0x01]
        v = np.array([61440, np.inf, np.nan, 2 ** -17, 1.5 * 2 ** -16], np.float32)
        assert _bits(v.astype(e5m2)).tolist() == [0x7C, 0x7C, 0x7E, 0x00, 0x02]
        assert _bits(np.array([248, np.nan], np.float32).astype(e4m3)).tolist() == [0x78, 0x7C]


@pytest.mark.parametrize("f8", FORMATS, ids=lambda d: d.name)
def test_moving_float8_keeps_every_bit(f8, cache) -> None:
    """Views, copies, concatenation, where, take and padding move codes through
    float compute; NaN payloads (E5M2's 0x7D, 0x7F) come back unchanged."""
    x = CODES.view(f8)
    mask = (CODES % 3 == 0)

    def move(x, mask):
        y = np.concatenate([x[::-1], x], axis=0).reshape(2, 256).T.copy()
        z = np.where(mask, x, x[::-1])
        return y, z, np.take(x, np.array([255, 0, 127, 125])), np.pad(x[:4], (1, 2))

    _, got = run_kernel(move, x, mask, cache_dir=cache)
    for g, r in zip(got, move(x, mask)):
        assert g.dtype == f8
        np.testing.assert_array_equal(_bits(g), _bits(r))


@pytest.mark.parametrize("f8", FORMATS, ids=lambda d: d.name)
def test_conversions_to_and_from_other_dtypes(f8, cache) -> None:
    x = CODES.view(f8)
    finite = x[np.isfinite(x.astype(np.float32))]
    ints = np.arange(-600, 600, 7, dtype=np.int32)
    with np.errstate(over="ignore"):
        h = np.linspace(-70000, 70000, 999).astype(np.float16)
    b = np.linspace(-70000, 70000, 999).astype(ml_dtypes.bfloat16)
    other = FORMATS[1] if f8 != FORMATS[1] else FORMATS[0]

    def conv(finite, x, ints, h, b):
        return (finite.astype(np.int32), finite.astype(np.float16),
                finite.astype(ml_dtypes.bfloat16), x.astype(np.bool_), x.astype(other),
                ints.astype(f8), h.astype(f8), b.astype(f8), (ints > 0).astype(f8))

    _, got = run_kernel(conv, finite, x, ints, h, b, cache_dir=cache)
    with np.errstate(all="ignore"):
        ref = conv(finite, x, ints, h, b)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(_bits(g), _bits(r))


def test_float8_constants_and_input_dtype(cache) -> None:
    f8 = FORMATS[1]
    table = np.array([1.5, -0.0, np.inf, 57344], np.float32).astype(f8)
    _, (got,) = run_kernel(lambda x: np.concatenate([x, table]), CODES[:4].view(f8),
                           cache_dir=cache)
    np.testing.assert_array_equal(_bits(got), np.r_[CODES[:4], _bits(table)])


def test_arithmetic_on_float8_is_refused_with_the_way_out() -> None:
    x = np.ones(4, FORMATS[0])
    msg = (r"nkipy kernels do not compute on float8_e4m3fn \({}\): an 8-bit float is "
           r"only stored, converted and moved; convert it first \(x.astype\(np.float32\)\)")
    with pytest.raises(TypeError, match=msg.format("add")):
        trace(lambda x: x + x, x)
    with pytest.raises(TypeError, match=msg.format("lt")):
        trace(lambda x: x < x, x)
    with pytest.raises(TypeError, match=msg.format("reduce_sum")):
        trace(lambda x: np.sum(x), x)
    # mixed with float32 it is NumPy's float32 loop: the float8 operand is converted
    g = trace(lambda x, y: x * y, x, np.ones(4, np.float32))
    assert g.outputs[0].dtype == np.float32


def test_torch_semantics_casts_are_pytorchs(cache) -> None:
    """Traced as torch.compile traces (torch_semantics): E4M3FN saturates at
    +-448 (inf too) and NaN is 0x7F / 0xFF for both formats; float32 NaN from
    E4M3FN keeps its payload (0x7FF00000), from E5M2 it is quieted."""
    torch = pytest.importorskip("torch")
    y = SWEEP.view(np.float32)
    for f8, tdt in ((FORMATS[0], torch.float8_e4m3fn), (FORMATS[1], torch.float8_e5m2)):
        with torch_semantics():
            _, (down,) = run_kernel(lambda y: y.astype(f8), y, cache_dir=cache)
            _, (up,) = run_kernel(lambda x: x.astype(np.float32), CODES.view(f8), cache_dir=cache)
        ref = torch.from_numpy(y.copy()).to(tdt).view(torch.uint8).numpy()
        np.testing.assert_array_equal(_bits(down), ref)
        ref_up = torch.from_numpy(CODES.copy()).view(tdt).float().numpy()
        np.testing.assert_array_equal(_bits(up), _bits(ref_up))
        # the reference interpreter converts the same way
        with torch_semantics():
            g_down = trace(lambda y: y.astype(f8), y)
            g_up = trace(lambda x: x.astype(np.float32), CODES.view(f8))
        np.testing.assert_array_equal(_bits(run_graph(g_down, y)[0]), ref)
        np.testing.assert_array_equal(_bits(run_graph(g_up, CODES.view(f8))[0]), _bits(ref_up))
    # between the formats and to bfloat16, as torch
    x = CODES.view(FORMATS[1])
    with torch_semantics():
        _, (to_fn, to_bf) = run_kernel(lambda x: (x.astype(FORMATS[0]),
                                                  x.astype(ml_dtypes.bfloat16)), x,
                                       cache_dir=cache)
    t = torch.from_numpy(CODES.copy()).view(torch.float8_e5m2)
    np.testing.assert_array_equal(_bits(to_fn), t.to(torch.float8_e4m3fn).view(torch.uint8))
    np.testing.assert_array_equal(_bits(to_bf), t.to(torch.bfloat16).view(torch.int16).numpy()
                                  .view(np.uint16))
