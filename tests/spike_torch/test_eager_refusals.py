"""Calls the CPU refuses are refused on the nkipy device too, with the CPU's
message, on the first call (Python) and on cached calls (the C++ call cache):
an alpha or value past its dtype's range, a bool or float alpha beside tensors
that cannot take it, a written tensor that overlaps an input or itself. And
values the device once computed wrongly without an error (fmod of a huge
quotient, hypot and cosh past float32's squares and exponentials, the signs of
-0.0 and -NaN, a 0-dim half tensor times a large Python scalar), eager and
compiled, equal to the CPU's bits."""
from __future__ import annotations

import re

import pytest
import torch

from spike_torch import _C, _generic

DEV = "nkipy"
OVERLAP = "some elements of the input tensor and the written-to tensor refer to a single " \
          "memory location"
INTERNAL = "more than one element of the written-to tensor refers to a single memory location"


def _cpu_error(fn, *args):
    with pytest.raises(RuntimeError) as info:
        fn(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    return str(info.value)


def _same_error(fn, *args):
    want = _cpu_error(fn, *args)
    with pytest.raises(RuntimeError, match=re.escape(want[:60])):
        fn(*args)
    return want


@pytest.fixture
def python_path_raises(monkeypatch):
    """After it, a call that reaches Python's check of alpha/value fails the
    test: the refusals that follow must come from the C++ cache."""
    def refuse(*args, **kwargs):
        raise AssertionError("the call went to Python")
    return lambda: monkeypatch.setattr(_generic._scalar_slots, "check", refuse)


def _warm(fn, n=3):
    for _ in range(n):
        fn()


# ---- alpha and value --------------------------------------------------------------

@pytest.mark.parametrize("dtype,alpha,cname", [
    (torch.float32, 1e300, "float"), (torch.float16, 7e4, "c10::Half"),
    (torch.float16, 65519.0, "c10::Half"), (torch.bfloat16, 1e39, "c10::BFloat16")])
def test_alpha_overflow_raises_first_call_and_cached(dtype, alpha, cname, python_path_raises):
    x = torch.ones(3, dtype=dtype, device=DEV)
    want = f"value cannot be converted to type {cname} without overflow"
    assert _same_error(lambda a: torch.add(a, a, alpha=alpha), x) == want
    _warm(lambda: torch.add(x, x, alpha=0.5))
    python_path_raises()
    with pytest.raises(RuntimeError, match=re.escape(want)):
        torch.add(x, x, alpha=alpha)
    with pytest.raises(RuntimeError, match=re.escape(want)):
        torch.add(x, x, alpha=-alpha)
    # values that fit (an infinity fits a float dtype) still run from C++
    assert torch.add(x, x, alpha=2.0).cpu().tolist() == [3.0] * 3
    assert torch.add(x, x, alpha=float("inf")).cpu().isinf().all()


def test_value_checked_in_the_opmath_type(python_path_raises):
    """addcmul/addcdiv convert value to float32 beside half tensors: 7e4
    overflows float16 but not float32, so the CPU computes inf; 1e300 beside
    float32 tensors raises."""
    h = torch.ones(3, dtype=torch.float16, device=DEV)
    x = torch.ones(3, device=DEV)
    _warm(lambda: (torch.addcmul(h, h, h, value=0.5), torch.addcmul(x, x, x, value=0.5)))
    python_path_raises()
    assert torch.addcmul(h, h, h, value=7e4).cpu().isinf().all()
    with pytest.raises(RuntimeError, match="cannot be converted to type float without overflow"):
        torch.addcmul(x, x, x, value=1e300)


def test_foreach_alpha_checked_in_the_tensors_dtype():
    h = torch.ones(3, dtype=torch.float16, device=DEV)
    _same_error(lambda a: torch._foreach_add([a], [a], alpha=7e4), h)


def test_unchecked_scalars_overflow_to_inf_as_on_the_cpu():
    """A Python scalar operand (a wrapped number, not alpha) is not checked."""
    x = torch.ones(3, device=DEV)
    for _ in range(3):
        assert torch.equal((x * 1e300).cpu(), torch.ones(3) * 1e300)
        assert torch.equal((x + 1e300).cpu(), torch.ones(3) + 1e300)


@pytest.mark.parametrize("case", ["bool alpha", "float alpha on int", "int alpha overflow",
                                  "int8 alpha overflow", "foreach bool alpha"])
def test_alpha_refusals_match_the_cpu(case):
    f = torch.ones(3, device=DEV)
    i = torch.ones(3, dtype=torch.int32, device=DEV)
    fn, arg, text = {
        "bool alpha": (lambda a: torch.sub(a, a, alpha=True), f,
                       "Boolean alpha only supported for Boolean results."),
        "float alpha on int": (lambda a: torch.add(a, a, alpha=1.5), i,
                               "For integral input tensors, argument alpha must not be a "
                               "floating point number."),
        "int alpha overflow": (lambda a: torch.add(a, a, alpha=2 ** 40), i,
                               "value cannot be converted to type int without overflow"),
        "int8 alpha overflow": (lambda a: torch.add(a, a, alpha=300), i.to(torch.int8),
                                "value cannot be converted to type int8_t without overflow"),
        "foreach bool alpha": (lambda a: torch._foreach_add([a], [a], alpha=True), f,
                               "Boolean alpha only supported for Boolean results."),
    }[case]
    assert _same_error(fn, arg) == text


def test_uint8_negative_alpha_fits_as_on_the_cpu():
    u = torch.ones(3, dtype=torch.uint8)
    assert torch.equal(torch.add(u.to(DEV), u.to(DEV), alpha=-1).cpu(),
                       torch.add(u, u, alpha=-1))


# ---- overlapping written tensors --------------------------------------------------------

_OVERLAPS = {
    "add_": lambda x: x[1:].add_(x[:-1]),
    "mul_": lambda x: x[1:].mul_(x[:-1]),
    "add out": lambda x: torch.add(x[:-1], 1, out=x[1:]),
    "exp out": lambda x: torch.exp(x[:-1], out=x[1:]),
    "where out": lambda x: torch.where(x[:-1] > 2, x[:-1], x[1:], out=x[1:]),
    "cumsum out": lambda x: torch.cumsum(x[:-1], 0, out=x[1:]),
    "copy_": lambda x: x[1:].copy_(x[:-1]),
}


@pytest.mark.parametrize("name", sorted(_OVERLAPS))
def test_partial_overlap_is_refused(name):
    fn = _OVERLAPS[name]
    x = torch.arange(6.0, device=DEV)
    assert OVERLAP in _same_error(fn, x)
    assert x.cpu().tolist() == list(range(6)), "nothing written"


def test_overlap_refused_from_the_cpp_cache():
    """The kernel of x[1:] + x[:-1] written to a disjoint tensor is cached;
    the same call writing an overlapping view raises from C++."""
    x = torch.arange(8.0, device=DEV)
    before = _C.eager_cache.eager_stats()["fast_calls"]
    for _ in range(3):
        x[4:].add_(x[:4])         # disjoint: allowed, and served by C++ after the first
    assert _C.eager_cache.eager_stats()["fast_calls"] > before
    with pytest.raises(RuntimeError, match=OVERLAP):
        x[1:5].add_(x[:4])
    with pytest.raises(RuntimeError, match=INTERNAL):
        x[:1].expand(4).add_(x[4:])


@pytest.mark.parametrize("name", ["self", "same view", "disjoint"])
def test_full_or_no_overlap_runs(name):
    fn = {"self": lambda x: x.add_(x),
          "same view": lambda x: x.view(2, 3).t().add_(x.view(2, 3).t()),
          "disjoint": lambda x: x[3:].add_(x[:3])}[name]
    x = torch.arange(6.0)
    d = x.to(DEV)
    fn(x)
    fn(d)
    assert torch.equal(d.cpu(), x)


def test_check_overlap_argument_errors():
    with pytest.raises(TypeError, match="tensors must be tensors"):
        _C.eager_cache.eager_check_overlap([1], [0])
    with pytest.raises(ValueError, match="eager_check_overlap: written index 3 out of range"):
        _C.eager_cache.eager_check_overlap([torch.ones(1)], [3])


# ---- values once wrong without an error ----------------------------------------------

_VALUES = {
    "fmod": (torch.fmod, [1e20, -7.5, 5e30, 2.5], [3.0, 2.0, 7.0, -0.0]),
    "fmod scalar": (lambda a: torch.fmod(a, 3.0), [1e20, -7.5, 5e30, -0.0], None),
    "hypot": (torch.hypot, [1e20, 3e38, 1e-30, 3.0], [1e20, 3e38, 1e-30, 4.0]),
    "cosh": (torch.cosh, [89.0, -89.0, 88.5, 1.0], None),
    "sinh": (torch.sinh, [89.0, -89.0, 88.5, 1e-8], None),
    "signbit": (torch.signbit, [-float("nan"), float("nan"), -0.0, 0.0], None),
    "copysign": (torch.copysign, [1.0, 2.0, 3.0, 4.0], [-float("nan"), -0.0, 0.0, -1.0]),
    "digamma": (torch.digamma, [-0.0, 0.0, -1.0, 2.5], None),
}


@pytest.fixture(scope="module")
def backend(nkipy_cache):
    import torch._dynamo
    from torch_to_nkipy import init_nkipy_backend, reset_nkipy_backend

    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=nkipy_cache)
    yield
    torch._dynamo.reset()
    reset_nkipy_backend()


@pytest.mark.parametrize("name", sorted(_VALUES))
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_values_equal_the_cpu(name, mode, request):
    fn, xs, ys = _VALUES[name]
    args = [torch.tensor(xs)] + ([torch.tensor(ys)] if ys is not None else [])
    want = fn(*args)
    if mode == "compiled":
        request.getfixturevalue("backend")
        torch._dynamo.reset()
        got = torch.compile(fn, backend="nkipy", dynamic=False)(*args)
    else:
        got = fn(*[a.to(DEV) for a in args])
    got = got.cpu()
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=2e-6, atol=0, equal_nan=True)
        assert torch.equal(got.signbit(), want.signbit()) or name in ("fmod",)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["mul", "div"])
@pytest.mark.parametrize("shape", [(), (3,)])
def test_half_times_a_scalar_is_computed_in_float32(dtype, op, shape):
    """0.5 * 70000 is 35000 in float32, 35008 once rounded to float16; the
    scalar itself (70000) is past float16's range and must not be rounded
    first, for a 0-dim tensor as for any other."""
    x = torch.full(shape, 0.5, dtype=dtype)
    fn = (lambda a: a * 70000.0) if op == "mul" else (lambda a: a / (1 / 70000.0))
    want = fn(x)
    for _ in range(2):
        got = fn(x.to(DEV)).cpu()
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)
