"""The special-function IR ops (arcsinh, arccosh, arctanh, erfc, lgamma; libm's
fmod, hypot, copysign, sinh, cosh and signbit), the
order of NaN in topk, and structured ops of 1-D tensors repeated in one
kernel: each traced, run by the interpreter and compiled to C on the device,
against NumPy / Python's math module (correctly rounded references).
Tolerances: float32 rtol 2e-6 (libm's float functions are within a few ulp),
float64 rtol 1e-14 (atol 1e-15: lgamma near its zeros at 1 and 2), bfloat16 one unit in the last place (2^-7 relative)."""
import math

import numpy as np
import pytest

import nkipy.core.ops as ops
from nkipy.core.dtypes import bfloat16, wide_dtypes
from nkipy.core.interp import run_graph
from nkipy.core.trace import trace
from nkipy.runtime import DeviceKernel, DeviceTensor


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("math_ops_cache")


def both(fn, *arrays, cache_dir, wide=False):
    """(interpreter outputs, device outputs) of ``fn`` traced on ``arrays``."""
    if wide:
        with wide_dtypes():
            graph = trace(fn, *arrays)
    else:
        graph = trace(fn, *arrays)
    host = run_graph(graph, *arrays)
    k = DeviceKernel.from_graph(graph, build_dir=cache_dir)
    names = [v.name for v in k.graph.inputs]
    outs = k(inputs={n: DeviceTensor.from_numpy(np.ascontiguousarray(a))
                     for n, a in zip(names, arrays)})
    return host, [outs[n].numpy() for n in k.graph.output_names]


def _lgamma(v):
    if math.isnan(v):
        return v
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return math.inf
    return math.lgamma(v)


REF = {
    "arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh,
    "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
    "lgamma": np.vectorize(_lgamma, otypes=[np.float64]),
}
OPS = {"arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh,
       "erfc": ops.erfc, "lgamma": ops.lgamma}
DOMAIN = {"arcsinh": (-30.0, 30.0), "arccosh": (1.0, 40.0), "arctanh": (-0.99, 0.99),
          "erfc": (-4.0, 9.0), "lgamma": (-6.5, 30.0)}
EDGES = {"arcsinh": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30],
         "arccosh": [1.0, 0.5, np.inf, np.nan],
         "arctanh": [0.0, 1.0, -1.0, 2.0, np.nan],
         "erfc": [0.0, -np.inf, np.inf, 10.0, 30.0, np.nan],
         "lgamma": [0.0, -1.0, -2.0, 1.0, 2.0, 0.5, -0.5, np.inf, -np.inf, np.nan]}


def _data(name, dtype):
    lo, hi = DOMAIN[name]
    x = np.linspace(lo, hi, 61)
    return np.concatenate([x, np.asarray(EDGES[name])]).astype(dtype)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_special_function(name, dtype, cache):
    dt = np.dtype(bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    x = _data(name, dt)
    with np.errstate(all="ignore"):
        want = REF[name](x.astype(np.float64))
    host, dev = both(lambda a: OPS[name](a), x, cache_dir=cache, wide=dtype == "float64")
    rtol = {"float32": 2e-6, "float64": 1e-14, "bfloat16": 2.0 ** -7}[dtype]
    for got, where in ((host[0], "interpreter"), (dev[0], "device")):
        assert got.dtype == dt, where
        np.testing.assert_allclose(got.astype(np.float64), want.astype(dt).astype(np.float64),
                                   rtol=rtol, atol=1e-15 if dtype == "float64" else 1e-30,
                                   equal_nan=True, err_msg=where)


def test_special_functions_of_integers_are_float(cache):
    x = np.arange(1, 9, dtype=np.int32)
    host, dev = both(lambda a: (ops.erfc(a), ops.lgamma(a), np.arcsinh(a)), x, cache_dir=cache)
    for outs in (host, dev):
        assert [o.dtype for o in outs] == [np.dtype(np.float32)] * 3
        np.testing.assert_allclose(outs[1], [math.lgamma(v) for v in range(1, 9)], rtol=2e-6,
                                   atol=1e-6)


def test_cpu_reference_outside_a_kernel():
    """Called on NumPy arrays the ops are their NumPy reference."""
    x = np.asarray([0.5, 1.0, -1.0], np.float32)
    assert ops.lgamma(x).dtype == np.float32
    np.testing.assert_allclose(ops.lgamma(x), [math.lgamma(0.5), 0.0, math.inf], rtol=1e-6)
    np.testing.assert_allclose(ops.erfc(x), [math.erfc(v) for v in x], rtol=1e-6)


@pytest.mark.parametrize("ascend", [True, False])
def test_topk_ranks_nan_above_every_number(ascend, cache):
    """NaN comes last among the smallest and first among the largest, in the
    interpreter and in the compiled C alike; ties keep the lower index."""
    x = np.asarray([[3.0, np.nan, 1.0, 1.0, -2.0, np.nan, 5.0]], np.float32)
    host, dev = both(lambda a: ops.topk(a, 7, axis=1, is_ascend=ascend), x, cache_dir=cache)
    want_idx = [4, 2, 3, 0, 6, 1, 5] if ascend else [1, 5, 6, 0, 2, 3, 4]
    for vals, idx in (host, dev):
        assert idx.tolist() == [want_idx]
        np.testing.assert_array_equal(vals, x[:, want_idx])


def test_two_1d_scans_in_one_kernel(cache):
    """Two cumsums and two topks of 1-D tensors in one kernel (their C locals
    used to be declared twice in one scope)."""
    x = np.asarray([3.0, 1.0, 2.0, 5.0], np.float32)

    def k(a):
        return np.cumsum(a), np.cumsum(a * 2), ops.topk(a, 2)[0], ops.topk(-a, 2)[0]

    host, dev = both(k, x, cache_dir=cache)
    for outs in (host, dev):
        np.testing.assert_allclose(outs[0], np.cumsum(x))
        np.testing.assert_allclose(outs[1], np.cumsum(x * 2))
        np.testing.assert_allclose(outs[2], [5.0, 3.0])
        np.testing.assert_allclose(outs[3], [-1.0, -2.0])


# ---- libm's fmod, hypot, copysign, sinh, cosh, signbit -----------------------------------

#: values where the formulas these ops once were (x - trunc(x / y) * y,
#: sqrt(x*x + y*y), (exp(x) + exp(-x)) / 2, x < 0) lose digits, overflow or
#: miss a sign: huge quotients, squares past float32's range, |x| past 88.7
#: (exp overflows while cosh does not), -0.0 and a NaN with its sign bit set
_X = [1e20, -7.5, 5e30, 3e38, 1e-30, 89.0, -89.0, 88.5, 0.0, -0.0, 2.5, -np.inf, np.nan]
_Y = [3.0, 2.0, 7.0, 3e38, 1e-30, 0.5, -3.0, 88.5, -1.0, 4.0, -0.0, 1.0, 2.0]


@pytest.mark.parametrize("name", ["fmod", "hypot", "copysign"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_libm_binary(name, dtype, cache):
    dt = np.dtype(dtype)
    with np.errstate(all="ignore"):
        x, y = np.asarray(_X).astype(dt), np.asarray(_Y).astype(dt)
        want = getattr(np, name)(x.astype(np.float64), y.astype(np.float64)).astype(dt)
    host, dev = both(lambda a, b: getattr(ops, name)(a, b), x, y, cache_dir=cache,
                     wide=dtype == "float64")
    for got, where in ((host[0], "interpreter"), (dev[0], "device")):
        assert got.dtype == dt, where
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=2e-6 if dtype == "float32" else 1e-15 if
                                   dtype == "float64" else 2.0 ** -10, equal_nan=True,
                                   err_msg=where)
        assert (np.signbit(got) == np.signbit(want)).all(), where


@pytest.mark.parametrize("name", ["sinh", "cosh", "signbit"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_libm_unary(name, dtype, cache):
    dt = np.dtype(bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    x = np.concatenate([np.asarray(_X), [-np.nan]]).astype(dt)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(np.float64))
    host, dev = both(lambda a: getattr(ops, name)(a), x, cache_dir=cache,
                     wide=dtype == "float64")
    for got, where in ((host[0], "interpreter"), (dev[0], "device")):
        if name == "signbit":
            assert got.dtype == np.bool_ and got.tolist() == want.tolist(), where
            continue
        np.testing.assert_allclose(got.astype(np.float64), want.astype(dt).astype(np.float64),
                                   rtol={"float32": 2e-6, "float64": 1e-15,
                                         "bfloat16": 2.0 ** -7}[dtype], equal_nan=True,
                                   err_msg=where)


def test_integer_fmod_and_signbit(cache):
    """fmod of integers takes the dividend's sign; signbit of an integer is x < 0."""
    x = np.asarray([7, -7, 7, -7, 0, 5], np.int32)
    y = np.asarray([3, 3, -3, -3, 2, 5], np.int32)
    host, dev = both(lambda a, b: (ops.fmod(a, b), ops.signbit(a)), x, y, cache_dir=cache)
    for outs in (host, dev):
        assert outs[0].tolist() == np.fmod(x, y).tolist()
        assert outs[1].tolist() == np.signbit(x).tolist()
