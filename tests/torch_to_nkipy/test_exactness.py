"""Adversarial exactness checks: results on the nkipy device, eager and
compiled, equal eager PyTorch on the CPU bit for bit for integers, on values
chosen to wrap narrow integer types or overflow them in a product."""
from __future__ import annotations

import pytest
import torch

import spike_torch  # noqa: F401  (the "nkipy" device)

pytestmark = pytest.mark.usefixtures("backend")

NARROW = [torch.int8, torch.uint8, torch.int16]


def _vals(dtype):
    return torch.tensor([127, -128, 100, -100, 5, -7]).to(dtype)


def _check(fn, x, eager=True):
    want = fn(x)
    gots = [torch.compile(fn, backend="nkipy", fullgraph=True)(x.to("nkipy"))]
    if eager:
        gots.append(fn(x.to("nkipy")))
    for got in gots:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert torch.equal(got.cpu(), want), (got.cpu(), want)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("name,fn", [
    ("abs_clamp", lambda x: x.abs().clamp(0, 3)),     # abs(int8 -128) wraps to -128
    ("add_gt", lambda x: (x + x) > 0),
    ("mul_floordiv", lambda x: (x * x) // 3),
    ("neg_eq", lambda x: (-x) == x),
    ("not_gt", lambda x: (~x) > 0),
    ("square_max", lambda x: torch.maximum(x * x, x)),
    ("square_sum", lambda x: (x * x).sum()),
    ("mul_to_float", lambda x: (x * 3).float()),
])
def test_narrow_int_intermediates_wrap(dtype, name, fn):
    """A fused int8/uint8/int16 intermediate wraps before its consumer reads it
    (it was computed in int32 and read unwrapped: abs(int8 -128).clamp(0, 3)
    gave 3 instead of 0)."""
    _check(fn, _vals(dtype), eager=False)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32,
                                   torch.bool])
@pytest.mark.parametrize("name,fn", [
    ("prod", lambda x: x.prod()),
    ("prod_dim", lambda x: x.reshape(2, 3).prod(1)),
    ("cumprod", lambda x: x.cumprod(0)),
])
def test_integer_products_accumulate_in_int64(dtype, name, fn):
    """prod/cumprod of integer and bool tensors are int64 products, as eager's
    (they were computed in the input dtype and widened after wrapping)."""
    x = torch.tensor([127, -128, 100, -100, 5, -7]) if dtype != torch.int32 else \
        torch.tensor([2**24 + 1, 2**24 + 3, -(2**24 + 5), 2**30 + 7, 123456789, -987654321])
    _check(fn, x.to(dtype))


@pytest.mark.parametrize("name,fn", [
    ("i0", torch.special.i0), ("i0e", torch.special.i0e), ("i1", torch.special.i1),
    ("i1e", torch.special.i1e), ("modified_bessel_i0", torch.special.modified_bessel_i0),
    ("modified_bessel_i1", torch.special.modified_bessel_i1),
    ("bessel_j0", torch.special.bessel_j0), ("bessel_j1", torch.special.bessel_j1),
    ("bessel_y0", lambda x: torch.special.bessel_y0(x.abs() + 0.1)),
    ("bessel_y1", lambda x: torch.special.bessel_y1(x.abs() + 0.1)),
    ("airy_ai", torch.special.airy_ai),
    ("polygamma", lambda x: torch.special.polygamma(1, x.abs() + 0.1)),
    # computed on the device in float64: the series stopped at x >= 6 (1.5e-12 off)
    ("digamma", lambda x: torch.special.digamma(x + 0.25)),
    ("digamma_large", lambda x: torch.special.digamma(x * x * 3 + 0.5)),
])
def test_float64_special_functions_are_float64_accurate(name, fn):
    """float64 special functions match eager within 1e-12 (their float32
    polynomial approximations were off by up to 1e-6 in float64)."""
    x = torch.linspace(-7.0, 7.0, 29, dtype=torch.float64)
    want = fn(x)
    for got in (fn(x.to("nkipy")),
                torch.compile(fn, backend="nkipy", fullgraph=True)(x.to("nkipy"))):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_floor_divide_matches_eager(dtype):
    """Float floor division is computed from fmod as eager's (floor(a / b)
    gave 10 for 1.0 // 0.1 in float32 where eager gives 9, and -inf instead of
    NaN for inf // -0.5)."""
    a = torch.tensor([1.0, 0.3, 7.0, -1.0, float("inf"), -float("inf"), 0.0, -0.0,
                      5.0, -5.0, float("nan"), 1e30], dtype=dtype)
    b = torch.tensor([0.1, 0.1, 0.7, 0.1, -0.5, 2.0, -3.0, 3.0, 0.0, 0.0, 1.0, 3e-9],
                     dtype=dtype)
    fn = lambda a, b: a // b  # noqa: E731
    want = fn(a, b)
    for got in (fn(a.to("nkipy"), b.to("nkipy")),
                torch.compile(fn, backend="nkipy", fullgraph=True)(a.to("nkipy"), b.to("nkipy"))):
        got = got.cpu()
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want)), (got, want)
        num = ~torch.isnan(want)
        assert torch.equal(torch.signbit(got[num]), torch.signbit(want[num]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_sign_of_nan_and_negative_zero(dtype):
    """torch.sign(nan) is 0 and sign(-0.0) is +0.0 (the device kept NaN and -0.0)."""
    x = torch.tensor([-0.0, 0.0, float("inf"), -float("inf"), float("nan"), 2.5, -3.0],
                     dtype=dtype)
    want = torch.sign(x)
    for got in (torch.sign(x.to("nkipy")),
                torch.compile(torch.sign, backend="nkipy", fullgraph=True)(x.to("nkipy"))):
        got = got.cpu()
        assert got.dtype == want.dtype
        assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,fn", [
    ("prod_dim", lambda x: x.prod(1)),
    ("prod_all", lambda x: x[:, :20].prod()),
])
def test_half_products_match_eager(dtype, name, fn):
    """Half-precision prod gives eager's value (eager rounds its partial
    products as it goes: bfloat16 0.7891 where a once-rounded product is
    0.8086), eagerly and compiled: it runs on the CPU."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 64, generator=g) * 0.1 + 0.95).to(dtype)
    _check(fn, x)
