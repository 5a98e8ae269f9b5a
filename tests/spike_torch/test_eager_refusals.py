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
                                  "int8 alpha overflow", "foreach bool alpha", "rsub bool alpha",
                                  "rsub alpha overflow", "sub negated alpha overflow",
                                  "value beside a 0-dim float64", "cast before alpha",
                                  "overlap before alpha"])
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
        "rsub bool alpha": (lambda a: torch.rsub(a, a, alpha=True), f,
                            "Boolean alpha only supported for Boolean results."),
        "rsub alpha overflow": (lambda a: torch.rsub(a, 2.0, alpha=1e39), f,
                                "value cannot be converted to type float without overflow"),
        # sub(x, y, alpha) is add(x, y, -alpha): -(-128) does not fit int8
        "sub negated alpha overflow": (lambda a: torch.sub(a, a, alpha=-128),
                                       i.to(torch.int8),
                                       "value cannot be converted to type int8_t without "
                                       "overflow"),
        # a 0-dim float64 operand does not make the computation float64
        "value beside a 0-dim float64": (
            lambda a: torch.addcmul(a, torch.tensor(2.0, dtype=torch.float64, device=a.device),
                                    a, value=1e39), f,
            "value cannot be converted to type float without overflow"),
        "cast before alpha": (lambda a: a.add_(f, alpha=True), i.to(torch.int64),
                              "result type Float can't be cast to the desired output type Long"),
        "overlap before alpha": (lambda a: a[1:].add_(a[:-1], alpha=1.5), i, OVERLAP),
    }[case]
    assert text in _same_error(fn, arg)


def test_alphas_that_fit_as_on_the_cpu():
    """uint8 takes alpha -1; sub takes the alpha whose negation fits (int8 128)."""
    u = torch.ones(3, dtype=torch.uint8)
    assert torch.equal(torch.add(u.to(DEV), u.to(DEV), alpha=-1).cpu(),
                       torch.add(u, u, alpha=-1))
    b = torch.tensor([2, 3, 4], dtype=torch.int8)
    for _ in range(3):
        assert torch.equal(torch.sub(b.to(DEV), b.to(DEV), alpha=128).cpu(),
                           torch.sub(b, b, alpha=128))


# ---- overlapping written tensors --------------------------------------------------------

_OVERLAPS = {
    "add_": lambda x: x[1:].add_(x[:-1]),
    "mul_": lambda x: x[1:].mul_(x[:-1]),
    "add out": lambda x: torch.add(x[:-1], 1, out=x[1:]),
    "exp out": lambda x: torch.exp(x[:-1], out=x[1:]),
    "where out": lambda x: torch.where(x[:-1] > 2, x[:-1], x[1:], out=x[1:]),
    "cumsum out": lambda x: torch.cumsum(x[:-1], 0, out=x[1:]),
    "copy_": lambda x: x[1:].copy_(x[:-1]),
    "floor_divide_": lambda x: x[1:5].floor_divide_(x[3:7]),
    "index_select out=self": lambda x: torch.index_select(x, 0, torch.arange(5, -1, -1).to(
        x.device), out=x),
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
        _C.eager_cache.eager_check_overlap([1], [0], 2)
    with pytest.raises(ValueError, match="eager_check_overlap: written index 3 out of range"):
        _C.eager_cache.eager_check_overlap([torch.ones(1)], [3], 2)


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
    "copysign int8": (torch.copysign, torch.tensor([-128, 0, 5], dtype=torch.int8),
                      [1.0, -1.0, -0.0]),
    "copysign uint8": (lambda a: torch.copysign(a, -1.0),
                       torch.tensor([1, 200, 0], dtype=torch.uint8), None),
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
    args = [torch.as_tensor(xs)] + ([torch.tensor(ys)] if ys is not None else [])
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["mul", "div"])
def test_half_0dim_times_a_scalar_into_a_float32_out(dtype, op):
    """mul(0-dim f16 7.0, 0.1, out=f32): the product rounded to float16, then
    written to the float32 out (0.7001953125, not 0.7 or 0.6997)."""
    x = torch.tensor(7.0, dtype=dtype)
    fn = getattr(torch, op)
    want = fn(x, 0.1, out=torch.empty(()))
    for _ in range(3):
        out = torch.empty((), device=DEV)
        fn(x.to(DEV), 0.1, out=out)
        assert torch.equal(out.cpu(), want)


_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
           "fmod": torch.fmod, "remainder": torch.remainder, "maximum": torch.maximum,
           "lt": torch.lt, "hypot": torch.hypot, "pow": lambda a, b: torch.pow(a.abs(), b)}


@pytest.mark.parametrize("name", sorted(_BINARY))
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_0dim_tensor_of_another_float_dtype_does_not_widen(name, mode, request):
    """PyTorch converts a 0-dim operand to the dtype the dimensioned one gives
    (fmod(x_f16, tensor(-0.3)) divides by -0.3 rounded to float16); mul and
    div read a 0-dim second operand beside half tensors in float32."""
    fn = _BINARY[name]
    torch.manual_seed(0)
    if mode == "compiled":
        request.getfixturevalue("backend")
    for dx, ds in [(torch.float16, torch.float32), (torch.float32, torch.float64),
                   (torch.bfloat16, torch.float64), (torch.float16, torch.bfloat16)]:
        x = (torch.randn(8) * 50).to(dx)
        s = torch.tensor(-0.3, dtype=ds)
        for args in ((x, s), (s, x)):
            want = fn(*args)
            if mode == "compiled":
                torch._dynamo.reset()
                got = torch.compile(fn, backend="nkipy", dynamic=False)(*args)
            else:
                got = fn(*[a.to(DEV) for a in args]).cpu()
            assert got.dtype == want.dtype
            assert torch.equal(got.double().nan_to_num(7), want.double().nan_to_num(7)), \
                (name, dx, ds)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_half_division_with_a_rounding_mode(dtype, mode, request):
    """div(x, 0.1, rounding_mode=...) on half tensors divides by 0.1 in float32,
    as the CPU does (float16 7 // 0.1 is 69; by 0.1 rounded to half, 70)."""
    if mode == "compiled":
        request.getfixturevalue("backend")
    torch.manual_seed(1)
    x = torch.cat([torch.tensor([7.0]), torch.randn(15) * 20]).to(dtype)
    for rounding in ("floor", "trunc"):
        for v in (0.1, -0.7, 1e-3):
            def fn(a):
                return torch.div(a, v, rounding_mode=rounding)
            want = fn(x)
            if mode == "compiled":
                torch._dynamo.reset()
                got = torch.compile(fn, backend="nkipy", dynamic=False)(x)
            else:
                got = fn(x.to(DEV)).cpu()
            assert torch.equal(got, want), (rounding, v)
