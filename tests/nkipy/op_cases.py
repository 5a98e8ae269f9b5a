"""Op test cases as data, and the harness that checks one.

Every case is an :class:`OpCase`: a kernel function and its arguments. The
reference is the kernel run directly on NumPy arrays (CPU mode: NumPy itself, or
the nkipy op's NumPy implementation); the case passes when the traced graph,
evaluated by an executor, gives the same outputs, dtypes (NumPy's, narrowed to
32 bits) and mutated inputs, within the tolerance of the output dtype.

A compiled-execution test reuses everything here with one parametrized test::

    @pytest.mark.parametrize("case", ALL_CASES, ids=case_id)
    def test_compiled(case):
        check_case(case, executor=lambda graph, arrays: my_compile_and_run(graph, arrays))

Tolerances (``TOLERANCES``; rtol, atol on |out - ref| <= atol + rtol * |ref|):
float32 1e-5/1e-6, float16 1e-3/1e-3 (one ulp is <= 9.8e-4 relative),
bfloat16 1e-2/1e-2 (one ulp is <= 7.8e-3 relative); integers and bool exact.
Cases whose reference rounds differently by construction (a half-precision sum
that NumPy accumulates in half precision, composites) state wider ones.
"""
from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import nkipy.core.ops as ops
from nkipy.core.dtypes import narrow
from nkipy.core.interp import run_graph
from nkipy.core.ir import Graph, bfloat16
from nkipy.core.trace import input_arrays, trace

BF16 = bfloat16
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
I8, I16, I32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
U8, U16, U32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
BOOL = np.dtype(bool)
FLOATS = [F32, F16, BF16]
INTS = [I8, I16, I32, U8]
ALL_DTYPES = FLOATS + INTS + [BOOL]

TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    F32: (1e-5, 1e-6),
    F16: (1e-3, 1e-3),
    BF16: (1e-2, 1e-2),
}


@dataclass
class OpCase:
    """One op test: ``fn(*args, **kwargs)`` traced vs. run directly."""

    id: str
    fn: Callable
    args: tuple
    kwargs: dict = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None
    check_dtype: bool = True
    expect_dtype: Any = None        # result dtypes where nkipy deliberately differs from NumPy
    ref: Callable | None = None     # reference to use instead of fn (e.g. computed in fp32)
    compare_values: bool = True     # False for np.empty_like-style outputs
    tags: tuple = ()

    def __repr__(self) -> str:
        return f"OpCase({self.id})"


def case_id(case: OpCase) -> str:
    return case.id


# -- data -------------------------------------------------------------------------

def data(shape: Sequence[int], dtype: Any, kind: str = "normal", seed: int = 0) -> np.ndarray:
    """Deterministic test data of a dtype: 'normal', 'positive', 'unit' (-0.95..0.95),
    'nonzero', 'small' (small magnitudes, for ints -3..3), 'range' (0..n-1)."""
    dt = np.dtype(dtype)
    # zlib.crc32, not hash(): str hashes change from process to process
    rng = np.random.default_rng(zlib.crc32(repr((tuple(shape), str(dt), kind, seed)).encode()))
    shape = tuple(shape)
    if kind == "range":
        return np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dt)
    if dt == BOOL:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        lo, hi = {"small": (-3, 4), "positive": (1, 20), "nonzero": (1, 20)}.get(kind, (-20, 21))
        if dt.kind == "u":
            lo = max(lo, 0 if kind != "nonzero" else 1)
        x = rng.integers(lo, hi, size=shape)
        if kind == "nonzero" and dt.kind == "i":
            x = x * rng.choice([-1, 1], size=shape)
        return x.astype(dt)
    if kind == "positive":
        x = rng.uniform(0.1, 4.0, size=shape)
    elif kind == "unit":
        x = rng.uniform(-0.95, 0.95, size=shape)
    elif kind == "nonzero":
        x = rng.uniform(0.5, 3.0, size=shape) * rng.choice([-1, 1], size=shape)
    elif kind == "small":
        x = rng.uniform(0.5, 1.5, size=shape)
    else:
        x = rng.standard_normal(shape)
    return x.astype(dt)


def dname(dt: Any) -> str:
    return np.dtype(dt).name


def sname(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape) if len(shape) else "scalar"


# -- harness --------------------------------------------------------------------------

def _copy(x: Any) -> Any:
    return x.copy() if isinstance(x, np.ndarray) else x


def _flatten(r: Any) -> list:
    if r is None:
        return []
    if isinstance(r, (tuple, list)):
        return [y for item in r for y in _flatten(item)]
    return [r]


def reference(case: OpCase) -> tuple[list[Any], dict[str, np.ndarray]]:
    """(flattened outputs, the input arrays after the call by name) of the CPU run."""
    args = tuple(_copy(a) for a in case.args)
    kwargs = {k: _copy(v) for k, v in case.kwargs.items()}
    with np.errstate(all="ignore"):
        out = (case.ref or case.fn)(*args, **kwargs)
    after = input_arrays(case.fn, *args, **kwargs)
    return _flatten(out), after


def graph_inputs(case: OpCase) -> list[np.ndarray]:
    """Fresh copies of the arrays that are the graph's inputs, in input order."""
    return [a.copy() for a in input_arrays(case.fn, *case.args, **case.kwargs).values()]


def tolerance(case: OpCase, dt: np.dtype) -> tuple[float, float]:
    rtol, atol = TOLERANCES.get(np.dtype(dt), (0.0, 0.0))
    return (case.rtol if case.rtol is not None else rtol,
            case.atol if case.atol is not None else atol)


def compare(case: OpCase, out: np.ndarray, expected: Any, what: str) -> None:
    exp = np.asarray(expected)
    if case.check_dtype:
        want = np.dtype(case.expect_dtype) if case.expect_dtype is not None else narrow(exp.dtype)
        assert out.dtype == want, f"{case.id} {what}: dtype {out.dtype}, expected {want}"
    assert out.shape == exp.shape, f"{case.id} {what}: shape {out.shape}, expected {exp.shape}"
    if not case.compare_values:
        return
    is_float = out.dtype.kind == "f" or out.dtype == BF16 or exp.dtype.kind == "f" \
        or exp.dtype == BF16
    if is_float:
        # tolerance of the less precise of the two dtypes
        cands = [d for d in (out.dtype, exp.dtype) if np.dtype(d) in TOLERANCES]
        tol_dt = max(cands, key=lambda d: TOLERANCES[np.dtype(d)][0]) if cands else F32
        rtol, atol = tolerance(case, tol_dt)
        np.testing.assert_allclose(out.astype(np.float64), exp.astype(np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True, err_msg=f"{case.id} {what}")
    else:
        np.testing.assert_array_equal(out.astype(np.int64), exp.astype(np.int64),
                                      err_msg=f"{case.id} {what}")


Executor = Callable[[Graph, list[np.ndarray]], list[np.ndarray]]

_FLOAT_ONLY = {"exp", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "sin", "cos", "tan",
               "arctan", "tanh", "sigmoid", "erf", "ceil", "floor", "rint", "trunc", "div",
               "isnan", "isfinite"}
_INT_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}
_BOOL_ONLY = {"logical_and", "logical_or", "logical_xor", "logical_not", "reduce_any",
              "reduce_all"}
_NOT_BOOL = {"add", "sub", "mul", "maximum", "minimum", "neg", "abs", "square", "sign", "pow",
             "mod", "floor_div", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
             "argmax", "argmin", "cumsum", "cumprod", "matmul", "topk", "reciprocal"}


def _is_float_dt(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == BF16


def assert_ir_conventions(graph: Graph) -> None:
    """The normal form the tracer promises the compiler, beyond ``Graph.verify``."""
    for n in graph.nodes:
        ins = n.inputs
        dt = ins[0].dtype if ins else None
        where = f"{graph.name}: {n.op} at {n.location}"
        if n.op in _FLOAT_ONLY:
            assert _is_float_dt(dt), f"{where}: {n.op} on {dt}"
        if n.op in _INT_ONLY:
            assert dt.kind in "iu", f"{where}: {n.op} on {dt}"
        if n.op in _BOOL_ONLY:
            assert all(v.dtype == BOOL for v in ins), f"{where}: {n.op} on non-bool"
        if n.op in _NOT_BOOL:
            assert dt != BOOL, f"{where}: {n.op} on bool"
        if n.op == "abs":
            assert dt.kind != "u", f"{where}: abs on unsigned"
        if n.op == "where":
            assert ins[0].dtype == BOOL and ins[1].dtype == ins[2].dtype, where
        if n.op == "cast":
            assert isinstance(n.attrs["dtype"], np.dtype) and n.attrs["dtype"] == n.output.dtype
            assert ins[0].dtype != n.output.dtype, f"{where}: no-op cast"
        if n.op == "constant":
            val = n.attrs["value"]
            assert isinstance(val, np.ndarray) and val.dtype == n.output.dtype \
                and val.shape == n.output.shape and not val.flags.writeable, where
        if n.op in ("reshape", "broadcast_to", "transpose", "slice"):
            assert ins[0].shape != n.output.shape or n.op == "transpose" or \
                any(s != 1 for s in n.attrs.get("steps", ())), f"{where}: no-op node"
        if n.op in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_any",
                    "reduce_all"):
            axes = n.attrs["axes"]
            assert isinstance(axes, tuple) and list(axes) == sorted(set(axes)) and axes \
                and all(0 <= a < ins[0].ndim for a in axes), f"{where}: axes {axes}"
        if n.op in ("argmax", "argmin", "cumsum", "cumprod", "take", "take_along_axis",
                    "put_along_axis", "concat", "topk"):
            ax = n.attrs["axis"]
            assert isinstance(ax, int) and 0 <= ax < max(ins[0].ndim, 1), f"{where}: axis {ax}"
        if n.op in ("argmax", "argmin"):
            assert n.output.dtype == np.int32
        if n.op == "matmul":
            a, b = ins
            assert a.dtype == b.dtype and a.ndim == b.ndim >= 2, where
            assert all(x == y or 1 in (x, y) for x, y in zip(a.shape[:-2], b.shape[:-2])), where
        if n.op in ("take", "take_along_axis"):
            assert ins[1].dtype == np.int32, where
        if n.op == "take_along_axis":
            x, i = ins
            ax = n.attrs["axis"]
            assert x.ndim == i.ndim and all(x.shape[d] == i.shape[d] for d in range(x.ndim)
                                            if d != ax), where
        if n.op == "put_along_axis":
            x, i, v = ins
            ax = n.attrs["axis"]
            assert i.dtype == np.int32 and v.dtype == x.dtype and i.shape == v.shape, where
            assert x.ndim == i.ndim and all(x.shape[d] == i.shape[d] for d in range(x.ndim)
                                            if d != ax), where
            assert n.attrs["mode"] in ("set", "add"), where
        if n.op == "set_slice":
            x, u = ins
            shape = tuple(len(range(a, b, c)) for a, b, c in
                          zip(n.attrs["starts"], n.attrs["stops"], n.attrs["steps"]))
            assert u.dtype == x.dtype and (u.ndim == 0 or u.shape == shape), \
                f"{where}: update {u.shape} for slice {shape}"
            assert all(isinstance(t, tuple) for t in (n.attrs["starts"], n.attrs["stops"],
                                                       n.attrs["steps"])), where
        if n.op == "slice":
            for a, b, c, s in zip(n.attrs["starts"], n.attrs["stops"], n.attrs["steps"],
                                  ins[0].shape):
                assert c != 0 and (0 <= a <= s) and -1 <= b <= s, f"{where}: {a}:{b}:{c} of {s}"
        if n.op == "update_slice":
            x, u, *starts = ins
            assert u.dtype == x.dtype and u.ndim == x.ndim and len(starts) == x.ndim, where
            assert all(s.shape == () and s.dtype == np.int32 for s in starts), where
        if n.op == "pad":
            assert isinstance(n.attrs["value"], (bool, int, float)), where
        if n.op == "iota":
            assert n.output.dtype == np.int32, where
        if n.op == "conv2d":
            assert all(v.dtype == ins[0].dtype for v in ins), where
            assert len(n.attrs["stride"]) == 2 and len(n.attrs["dilation"]) == 2
            assert all(len(p) == 2 for p in n.attrs["padding"]), where
        if n.op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            g = n.attrs["replica_groups"]
            assert isinstance(g, tuple) and all(isinstance(x, tuple) for x in g), where
            if "reduce_op" in n.attrs:
                assert n.attrs["reduce_op"] in ("add", "multiply", "maximum", "minimum")


def interp_executor(graph: Graph, arrays: list[np.ndarray]) -> list[np.ndarray]:
    return run_graph(graph, *arrays)


def check_case(case: OpCase, executor: Executor = interp_executor) -> Graph:
    """Traces the case, runs it with ``executor`` and compares with the reference.

    If the reference raises, tracing must raise an exception of the same kind
    (TypeError / ValueError / IndexError / OverflowError ...).
    """
    try:
        expected, after = reference(case)
    except Exception as exc:  # NumPy rejects it: so must the tracer
        kinds = tuple(k for k in (OverflowError, IndexError, TypeError, ValueError)
                      if isinstance(exc, k)) or (Exception,)
        try:
            trace(case.fn, *case.args, **case.kwargs)
        except kinds:
            return None  # type: ignore[return-value]
        raise AssertionError(f"{case.id}: NumPy raised {exc!r} but tracing succeeded")
    graph = trace(case.fn, *case.args, **case.kwargs)
    assert_ir_conventions(graph)
    before = input_arrays(case.fn, *case.args, **case.kwargs)
    outs = executor(graph, graph_inputs(case))
    n_alias_appended = sum(1 for i in graph.aliases if i >= len(expected))
    assert len(outs) == len(expected) + n_alias_appended, \
        f"{case.id}: {len(outs)} outputs, expected {len(expected)} + {n_alias_appended} aliased"
    for i, e in enumerate(expected):
        compare(case, outs[i], e, f"output{i}")
    names = list(before)
    aliased = set()
    for oi, ii in graph.aliases.items():
        aliased.add(names[ii])
        compare(case, outs[oi], after[names[ii]], f"mutated input {names[ii]!r}")
    for name in names:
        if name not in aliased:
            assert np.array_equal(before[name], after[name], equal_nan=True), \
                f"{case.id}: the kernel mutates input {name!r} on CPU but the graph has no alias"
    return graph


# =====================================================================================
# The cases
# =====================================================================================

def _c(cases: list, id: str, fn: Callable, *args: Any, **opts: Any) -> None:
    cases.append(OpCase(id, fn, tuple(args), **opts))


def _u(f: Callable) -> Callable:
    def k(x):  # noqa: ANN001
        return f(x)
    k.__name__ = getattr(f, "__name__", "kernel")
    return k


def _b(f: Callable) -> Callable:
    def k(x, y):  # noqa: ANN001
        return f(x, y)
    k.__name__ = getattr(f, "__name__", "kernel")
    return k


def _half_ref(fn: Callable) -> Callable:
    """Reference computed in float32 and cast back for half-precision arrays."""
    def ref(*args: Any, **kw: Any) -> Any:
        conv = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype in (F16, BF16)
                else a for a in args]
        halves = [a.dtype for a in args if isinstance(a, np.ndarray) and a.dtype in (F16, BF16)]
        out = fn(*conv, **kw)
        if not halves:
            return out

        def back(o: Any) -> Any:
            if isinstance(o, (tuple, list)):
                return type(o)(back(x) for x in o)
            o = np.asarray(o)
            return o.astype(halves[0]) if o.dtype == np.float32 else o
        return back(out)
    return ref


# -- unary -----------------------------------------------------------------------

UNARY = [  # (function, data kind, extra tolerance for composites)
    (np.negative, "normal", None), (np.positive, "normal", None), (np.absolute, "normal", None),
    (np.fabs, "normal", None), (np.exp, "small", None), (np.expm1, "small", None),
    (np.exp2, "small", 1e-5), (np.log, "positive", None), (np.log1p, "positive", None),
    (np.log2, "positive", None), (np.log10, "positive", 1e-5), (np.sqrt, "positive", None),
    (np.square, "small", None), (np.reciprocal, "nonzero", None), (np.sin, "normal", None),
    (np.cos, "normal", None), (np.tan, "unit", None), (np.arctan, "normal", None),
    (np.arcsin, "unit", 1e-5), (np.arccos, "unit", 1e-5), (np.sinh, "small", 1e-5),
    (np.cosh, "small", 1e-5), (np.tanh, "normal", None), (np.ceil, "normal", None),
    (np.floor, "normal", None), (np.rint, "normal", None), (np.trunc, "normal", None),
    (np.sign, "normal", None), (np.invert, "normal", None), (np.logical_not, "normal", None),
    (np.isnan, "normal", None), (np.isfinite, "normal", None), (np.isinf, "normal", None),
    (np.deg2rad, "normal", 1e-5), (np.rad2deg, "normal", 1e-5),
]


def _unary_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    for f, kind, extra in UNARY:
        for dt in ALL_DTYPES:
            for shape in [(7,), (3, 5)]:
                _c(cases, f"unary-{f.__name__}-{dname(dt)}-{sname(shape)}", _u(f),
                   data(shape, dt, kind), rtol=extra if dt == F32 and extra else None)
        for shape in [(), (0,), (1,), (64, 33)]:
            _c(cases, f"unary-{f.__name__}-float32-{sname(shape)}", _u(f),
               data(shape, F32, kind), rtol=extra)
    # operators and methods
    x = data((4, 5), F32)
    xi = data((4, 5), I32)
    xb = data((4, 5), BOOL)
    for name, fn, arg in [
        ("neg-op", lambda x: -x, x), ("pos-op", lambda x: +x, x), ("abs-builtin", lambda x: abs(x), x),
        ("invert-op-int", lambda x: ~x, xi), ("invert-op-bool", lambda x: ~x, xb),
        ("round-method", lambda x: x.round(), x * 3), ("round-decimals", lambda x: np.round(x, 2), x),
        ("round-neg-decimals", lambda x: np.round(x * 100, -1), x),
        ("round-builtin", lambda x: round(x), x * 3), ("around-int", lambda x: np.around(x), xi),
        ("clip", lambda x: np.clip(x, -0.5, 0.5), x), ("clip-min-only", lambda x: np.clip(x, 0, None), x),
        ("clip-method", lambda x: x.clip(min=-0.1, max=0.2), x),
        ("clip-int-float-bounds", lambda x: np.clip(x, -2.5, 3.5), xi),
        ("clip-array-bounds", lambda x: np.clip(x, x[0], 1.0), x),
        ("sigmoid", lambda x: ops.sigmoid(x), x), ("erf", lambda x: ops.erf(x), x),
        ("erfc", lambda x: ops.erfc(x), x), ("lgamma", lambda x: ops.lgamma(x), np.abs(x) + 0.25),
        ("arcsinh", lambda x: np.arcsinh(x), x), ("arccosh", lambda x: np.arccosh(x), np.abs(x) + 1),
        ("arctanh", lambda x: np.arctanh(x), x * 0.45),
        ("rsqrt", lambda x: ops.rsqrt(x), np.abs(x) + 0.1),
        ("sigmoid-f16", lambda x: ops.sigmoid(x), x.astype(F16)),
        ("erf-bf16", lambda x: ops.erf(x), x.astype(BF16)),
        ("sigmoid-int", lambda x: ops.sigmoid(x), xi),
        ("nan-inf-preds", lambda x: (np.isnan(x), np.isinf(x), np.isfinite(x)),
         np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], F32)),
        ("abs-int8-min", lambda x: np.abs(x), np.array([-128, -1, 0, 127], I8)),
        ("neg-uint8-wraps", lambda x: -x, np.array([0, 1, 255], U8)),
        ("reciprocal-int", lambda x: np.reciprocal(x), np.array([1, -1, 2, -3, 7], I32)),
        ("sign-nan", lambda x: np.sign(x), np.array([np.nan, -2.0, 0.0, 3.0], F32)),
        ("signbit", lambda x: np.signbit(x), np.array([-np.nan, np.nan, -0.0, 0.0, -2.0], F32)),
        ("signbit-int", lambda x: np.signbit(x), xi),
        ("ufunc-dtype-kw", lambda x: np.exp(x, dtype=np.float32), xi),
        ("ufunc-out-kw", lambda x: np.exp(x[0], out=x[1]), x),
    ]:
        _c(cases, f"unary-{name}", fn, arg)
    return cases


# -- binary ----------------------------------------------------------------------

BINARY = [  # (function, kind of x, kind of y)
    (np.add, "normal", "normal"), (np.subtract, "normal", "normal"),
    (np.multiply, "normal", "normal"), (np.true_divide, "normal", "nonzero"),
    (np.floor_divide, "normal", "nonzero"), (np.remainder, "normal", "nonzero"),
    (np.power, "positive", "small"), (np.maximum, "normal", "normal"),
    (np.minimum, "normal", "normal"), (np.fmax, "normal", "normal"), (np.fmin, "normal", "normal"),
    (np.bitwise_and, "normal", "normal"), (np.bitwise_or, "normal", "normal"),
    (np.bitwise_xor, "normal", "normal"), (np.logical_and, "normal", "normal"),
    (np.logical_or, "normal", "normal"), (np.logical_xor, "normal", "normal"),
    (np.equal, "small", "small"), (np.not_equal, "small", "small"), (np.less, "normal", "normal"),
    (np.less_equal, "small", "small"), (np.greater, "normal", "normal"),
    (np.greater_equal, "small", "small"), (np.logaddexp, "normal", "normal"),
    (np.arctan2, "normal", "normal"), (np.hypot, "normal", "normal"),
    (np.fmod, "normal", "nonzero"), (np.copysign, "normal", "normal"),
]
SHAPE_PAIRS = [((3, 5), (3, 5)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (3,)), ((5,), ()),
               ((4, 1, 3), (2, 1)), ((0, 3), (1, 3)), ((1,), (1,))]


def _binary_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    for f, kx, ky in BINARY:
        comp = f in (np.logaddexp, np.arctan2, np.hypot)
        for dt in ALL_DTYPES:
            kyy = "small" if f is np.power and dt.kind in "iub" else ky
            kxx = "small" if f is np.power and dt.kind in "iu" else kx
            if f is np.power and dt.kind == "i":
                kyy = "positive"
            for sx, sy in SHAPE_PAIRS[:3]:
                x, y = data(sx, dt, kxx, 1), data(sy, dt, kyy, 2)
                if f is np.power and dt.kind in "iu":
                    y = (np.abs(y.astype(np.int64)) % 4).astype(dt)
                _c(cases, f"binary-{f.__name__}-{dname(dt)}-{sname(sx)}-{sname(sy)}", _b(f), x, y,
                   rtol=1e-5 if comp and dt == F32 else None)
        for sx, sy in SHAPE_PAIRS[3:]:
            _c(cases, f"binary-{f.__name__}-float32-{sname(sx)}-{sname(sy)}", _b(f),
               data(sx, F32, kx, 3), data(sy, F32, ky, 4), rtol=1e-5 if comp else None)
    # special values
    sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5], F32)
    for f in (np.maximum, np.minimum, np.fmax, np.fmin, np.add, np.true_divide, np.logaddexp,
              np.equal, np.less, np.arctan2, np.fmod, np.copysign, np.hypot):
        _c(cases, f"binary-special-{f.__name__}", _b(f), sp, sp[::-1].copy(),
           rtol=1e-5 if f in (np.logaddexp, np.arctan2) else None)
    xi = np.array([7, -7, 7, -7, 0, 5], I32)
    yi = np.array([2, 2, -2, -2, 3, 0], I32)
    for f in (np.floor_divide, np.remainder):
        _c(cases, f"binary-int-signs-{f.__name__}", _b(f), xi, yi)
    xf = np.array([7.5, -7.5, 7.5, -7.5, 0.0], F32)
    yf = np.array([2.0, 2.0, -2.0, -2.0, 3.0], F32)
    for f in (np.floor_divide, np.remainder):
        _c(cases, f"binary-float-signs-{f.__name__}", _b(f), xf, yf)
    _c(cases, "binary-int-power-wraps", _b(np.power), np.array([3, 5, -2, 10], I8),
       np.array([5, 3, 7, 3], I8))
    _c(cases, "binary-int8-add-wraps", _b(np.add), np.array([120, -120], I8),
       np.array([10, -10], I8))
    return cases


def _operator_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    ops_ = [
        ("add", lambda x, y: x + y), ("radd", lambda x, y: 2 + x), ("sub", lambda x, y: x - y),
        ("rsub", lambda x, y: 1.5 - x), ("mul", lambda x, y: x * y), ("rmul", lambda x, y: 3 * x),
        ("truediv", lambda x, y: x / y), ("rtruediv", lambda x, y: 2.0 / y),
        ("floordiv", lambda x, y: x // y), ("rfloordiv", lambda x, y: 7 // y),
        ("mod", lambda x, y: x % y), ("rmod", lambda x, y: 7 % y), ("pow", lambda x, y: x ** 2),
        ("pow-half", lambda x, y: abs(x) ** 0.5), ("pow-neg1", lambda x, y: x ** -1.0),
        ("pow-one", lambda x, y: x ** 1), ("pow-three", lambda x, y: x ** 3),
        ("pow-np-scalar", lambda x, y: x ** np.float32(2)),
        ("rpow", lambda x, y: 2 ** x), ("divmod", lambda x, y: divmod(x, y)),
        ("lt", lambda x, y: x < y), ("le", lambda x, y: x <= 0.5), ("gt", lambda x, y: x > y),
        ("ge", lambda x, y: 1 >= x), ("eq", lambda x, y: x == y), ("ne", lambda x, y: x != 1),
        ("ndarray-lhs", lambda x, y: np.ones(x.shape, x.dtype) + x),
        ("np-scalar-lhs", lambda x, y: np.float32(2) * x), ("np-scalar-f64", lambda x, y: x * np.float64(2)),
        ("list-operand", lambda x, y: x + [1, 2, 3, 4]),
    ]
    for dt in [F32, F16, BF16, I32, I8]:
        x = data((3, 4), dt, "nonzero", 5)
        y = data((3, 4), dt, "nonzero", 6)
        for name, fn in ops_:
            if dt.kind in "iu" and name in ("rpow", "pow-neg1"):
                continue
            _c(cases, f"op-{name}-{dname(dt)}", fn, x, y,
               expect_dtype=BF16 if dt == BF16 and name in ("rsub", "rtruediv", "pow-half",
                                                            "pow-neg1") else None)
    xb, yb = data((3, 4), BOOL, seed=1), data((3, 4), BOOL, seed=2)
    for name, fn in [("and", lambda x, y: x & y), ("or", lambda x, y: x | y),
                     ("xor", lambda x, y: x ^ y), ("rand", lambda x, y: True & x),
                     ("add", lambda x, y: x + y), ("mul", lambda x, y: x * y),
                     ("sub-error", lambda x, y: x - y), ("neg-error", lambda x, y: -x)]:
        _c(cases, f"op-bool-{name}", fn, xb, yb)
    xi, yi = data((3, 4), I16, seed=3), data((3, 4), I16, seed=4)
    for name, fn in [("and", lambda x, y: x & y), ("or", lambda x, y: x | 5),
                     ("xor", lambda x, y: 3 ^ y)]:
        _c(cases, f"op-int16-{name}", fn, xi, yi)
    # in-place operators mutate the kernel input (aliased outputs)
    for name, fn in [("iadd", lambda x, y: x.__iadd__(y)), ("isub", lambda x, y: x.__isub__(1)),
                     ("imul", lambda x, y: x.__imul__(y)), ("itruediv", lambda x, y: x.__itruediv__(2.0)),
                     ("ipow", lambda x, y: x.__ipow__(2))]:
        def k(x, y, _f=fn):  # noqa: ANN001
            _f(x, y)
        _c(cases, f"op-inplace-{name}", k, data((3, 4), F32, "nonzero", 1), data((3, 4), F32, "nonzero", 2))

    def iadd_broadcast(x, y):  # noqa: ANN001
        x += y[0]
        return x.sum()
    _c(cases, "op-inplace-broadcast", iadd_broadcast, data((3, 4), F32), data((3, 4), F32))

    def ifloordiv_int(x):  # noqa: ANN001
        x //= 2
        x %= 5
    _c(cases, "op-inplace-int-floordiv-mod", ifloordiv_int, data((5,), I32, seed=9))

    def iadd_float_into_int(x):  # noqa: ANN001
        x += 1.5
    _c(cases, "op-inplace-float-into-int-error", iadd_float_into_int, data((5,), I32))

    def iadd_bad_shape(x, y):  # noqa: ANN001
        x += y
    _c(cases, "op-inplace-bad-broadcast-error", iadd_bad_shape, data((3,), F32), data((2, 3), F32))
    _c(cases, "op-int8-overflowing-scalar-error", lambda x: x + 1000, data((3,), I8))
    _c(cases, "op-uint8-negative-scalar-error", lambda x: x + (-1), data((3,), U8))
    _c(cases, "op-matmul-operator", lambda x, y: x @ y, data((3, 4), F32), data((4, 2), F32))
    _c(cases, "op-rmatmul", lambda x: np.ones((2, 3), np.float32) @ x, data((3, 4), F32))

    def imatmul(x, y):  # noqa: ANN001
        x @= y
    _c(cases, "op-imatmul", imatmul, data((3, 3), F32), data((3, 3), F32))
    return cases


# -- type promotion -------------------------------------------------------------------

SCALARS = [1, -2, 2.5, True, np.float32(1.5), np.int8(3), np.float64(0.5), np.int64(7)]


def _promotion_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    for dx, dy in itertools.product(ALL_DTYPES + [U16, U32], repeat=2):
        x, y = data((2, 3), dx, "small", 1), data((2, 3), dy, "small", 2)
        _c(cases, f"promote-add-{dname(dx)}-{dname(dy)}", _b(np.add), x, y)
    for dx, dy in itertools.product(ALL_DTYPES, repeat=2):
        x, y = data((2, 3), dx, "small", 1), data((2, 3), dy, "nonzero", 2)
        _c(cases, f"promote-divide-{dname(dx)}-{dname(dy)}", _b(np.true_divide), x, y)
        _c(cases, f"promote-less-{dname(dx)}-{dname(dy)}", _b(np.less), x, y)
        no_common = {dx, dy} in ({BF16, F16}, {BF16, I16}, {BF16, I32})
        # ml_dtypes has no common dtype of these; nkipy uses float32 (its ufunc loops' choice)
        _c(cases, f"promote-where-{dname(dx)}-{dname(dy)}",
           lambda c, x, y: np.where(c, x, y), data((2, 3), BOOL), x, y,
           ref=(lambda c, x, y: np.where(c, x.astype(F32), y.astype(F32))) if no_common else None)
    for dt in ALL_DTYPES + [U16]:
        for s in SCALARS:
            x = data((2, 3), dt, "small", 3)
            weak_float_bf16 = dt == BF16 and isinstance(s, float) and not isinstance(s, np.generic)
            for opname, f in [("add", lambda x, s=s: x + s), ("mul", lambda x, s=s: s * x),
                              ("div", lambda x, s=s: x / s), ("gt", lambda x, s=s: x > s)]:
                exp = BF16 if weak_float_bf16 and opname != "gt" else None
                _c(cases, f"promote-scalar-{opname}-{dname(dt)}-{type(s).__name__}-{s}", f, x,
                   expect_dtype=exp)
    return cases


# -- reductions ---------------------------------------------------------------------

def _reduction_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    reds = [
        ("sum", np.sum, "normal"), ("prod", np.prod, "small"), ("max", np.max, "normal"),
        ("min", np.min, "normal"), ("mean", np.mean, "normal"), ("var", np.var, "normal"),
        ("std", np.std, "normal"), ("any", np.any, "normal"), ("all", np.all, "normal"),
        ("argmax", np.argmax, "normal"), ("argmin", np.argmin, "normal"),
        ("count_nonzero", np.count_nonzero, "small"),
    ]
    axes_list = [None, 0, -1, (0, 2), (-1, 0), 1]
    for name, f, kind in reds:
        for dt in ALL_DTYPES:
            x = data((2, 3, 4), dt, kind, 7)
            if dt == BOOL and name in ("var", "std"):
                continue
            for axis in axes_list:
                if name in ("argmax", "argmin") and isinstance(axis, tuple):
                    continue
                for keepdims in ((False, True) if axis in (None, -1, (0, 2)) else (False,)):
                    fn = (lambda x, f=f, a=axis, k=keepdims: f(x, axis=a, keepdims=k))
                    half = dt in (F16, BF16) and name in ("sum", "mean", "var", "std", "prod")
                    _c(cases, f"reduce-{name}-{dname(dt)}-axis{axis}-keep{int(keepdims)}", fn, x,
                       ref=_half_ref(fn) if half else None,
                       rtol=1e-4 if dt == F32 and name in ("var", "std") else None)
        for shape, axis in [((5,), None), ((1,), 0), ((33, 17), 1), ((33, 17), None),
                            ((0, 3), 0), ((0, 3), 1), ((0,), None)]:
            x = data(shape, F32, kind, 8)
            # a float32 sum's rounding error scales with sum(|x|), not with the
            # (possibly cancelling) result: NumPy sums pairwise, the kernel in lanes
            _c(cases, f"reduce-{name}-float32-{sname(shape)}-axis{axis}",
               lambda x, f=f, a=axis: f(x, axis=a), x, rtol=1e-5,
               atol=float(np.finfo(np.float32).eps) * float(np.abs(x).sum()) if name in
               ("sum", "mean") else None)
    x = data((3, 4), F32)
    for name, fn in [
        ("sum-method", lambda x: x.sum(axis=1)), ("sum-dtype", lambda x: np.sum(x, dtype=np.float16)),
        ("sum-initial", lambda x: np.sum(x, axis=0, initial=10.0)),
        ("max-initial", lambda x: np.max(x, axis=1, initial=0.5)),
        ("mean-method-keep", lambda x: x.mean(axis=0, keepdims=True)),
        ("var-ddof", lambda x: x.var(axis=1, ddof=1)), ("std-ddof", lambda x: np.std(x, ddof=1)),
        ("amax", lambda x: np.amax(x, axis=0)), ("amin", lambda x: np.amin(x)),
        ("prod-method", lambda x: x.prod(axis=0)), ("any-method", lambda x: (x > 1).any(axis=1)),
        ("all-method", lambda x: (x > -3).all()), ("argmax-method", lambda x: x.argmax()),
        ("argmax-keepdims-none", lambda x: np.argmax(x, keepdims=True)),
        ("ufunc-reduce-add", lambda x: np.add.reduce(x)),
        ("ufunc-reduce-max", lambda x: np.maximum.reduce(x, axis=1)),
        ("ufunc-reduce-and", lambda x: np.logical_and.reduce(x > 0, axis=0)),
        ("ufunc-accumulate", lambda x: np.add.accumulate(x, axis=1)),
        ("ufunc-outer", lambda x: np.multiply.outer(x[0], x[1])),
        ("max-nan", lambda x: np.max(np.where(x > 1, np.nan, x), axis=1)),
        ("argmax-nan", lambda x: np.argmax(np.where(x > 1, np.nan, x), axis=1)),
        ("argmax-ties", lambda x: np.argmax(np.floor(x), axis=1)),
        ("mean-int", lambda x: np.mean(x.astype(np.int32))),
        ("sum-out", lambda x: np.sum(x, axis=0, out=x[0])),
    ]:
        _c(cases, f"reduce-{name}", fn, x, rtol=1e-4)
    for name, f in [("cumsum", np.cumsum), ("cumprod", np.cumprod)]:
        for dt in ALL_DTYPES:
            x = data((3, 5), dt, "small", 9)
            for axis in (None, 0, -1):
                fn = (lambda x, f=f, a=axis: f(x, axis=a))
                _c(cases, f"{name}-{dname(dt)}-axis{axis}", fn, x,
                   ref=_half_ref(fn) if dt in (F16, BF16) else None)
        _c(cases, f"{name}-method", lambda x, n=name: getattr(x, n)(axis=1), data((3, 5), F32))
        _c(cases, f"{name}-dtype", lambda x, f=f: f(x, axis=0, dtype=np.float32), data((3, 5), I8))
        _c(cases, f"{name}-empty", lambda x, f=f: f(x, axis=0), data((0, 2), F32))
    return cases


# -- shapes and layout -------------------------------------------------------------------

def _transform_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    x = data((2, 3, 4), F32)
    xi = data((2, 3, 4), I16)
    xb = data((2, 3, 4), BOOL)
    fns = [
        ("reshape", lambda x: x.reshape(6, 4)), ("reshape-neg1", lambda x: x.reshape(-1, 2)),
        ("reshape-tuple", lambda x: x.reshape((4, -1))), ("np-reshape", lambda x: np.reshape(x, (24,))),
        ("reshape-scalar", lambda x: x[0, 0, :1].reshape(())), ("ravel", lambda x: np.ravel(x)),
        ("flatten", lambda x: x.flatten()), ("transpose", lambda x: x.transpose()),
        ("transpose-perm", lambda x: x.transpose(2, 0, 1)), ("transpose-neg", lambda x: np.transpose(x, (-1, 0, -2))),
        ("T", lambda x: x.T), ("mT", lambda x: x.mT), ("swapaxes", lambda x: np.swapaxes(x, 0, -1)),
        ("moveaxis", lambda x: np.moveaxis(x, 0, -1)), ("moveaxis-multi", lambda x: np.moveaxis(x, [0, 1], [-1, 0])),
        ("expand_dims", lambda x: np.expand_dims(x, 1)), ("expand_dims-tuple", lambda x: np.expand_dims(x, (0, -1))),
        ("squeeze", lambda x: np.squeeze(x[:, :1, None])), ("squeeze-axis", lambda x: x[:1].squeeze(0)),
        ("squeeze-bad-axis-error", lambda x: np.squeeze(x, 1)),
        ("concatenate", lambda x: np.concatenate([x, x * 2], axis=1)),
        ("concatenate-neg", lambda x: np.concatenate((x, x[:, :1]), axis=-2)),
        ("concatenate-none", lambda x: np.concatenate([x, x[0]], axis=None)),
        ("concatenate-mixed-dtype", lambda x: np.concatenate([x, np.ones((2, 3, 1), np.int32)], axis=2)),
        ("concatenate-const", lambda x: np.concatenate([np.zeros((1, 3, 4), np.float32), x])),
        ("concatenate-empty", lambda x: np.concatenate([x[:, :0], x], axis=1)),
        ("stack", lambda x: np.stack([x, x + 1])), ("stack-neg", lambda x: np.stack([x, x], axis=-1)),
        ("hstack", lambda x: np.hstack([x[0], x[1]])), ("vstack", lambda x: np.vstack([x[0, 0], x[1, 1]])),
        ("split-sections", lambda x: np.split(x, 2, axis=2)), ("split-indices", lambda x: np.split(x, [1, 2], axis=1)),
        ("split-uneven-error", lambda x: np.split(x, 3, axis=2)), ("array_split", lambda x: np.array_split(x, 3, axis=2)),
        ("copy", lambda x: np.copy(x)), ("copy-method", lambda x: x.copy()),
        ("repeat", lambda x: np.repeat(x, 2, axis=1)), ("repeat-none", lambda x: np.repeat(x, 2)),
        ("repeat-array", lambda x: np.repeat(x, [1, 0, 2], axis=1)), ("repeat-method", lambda x: x.repeat(3, axis=-1)),
        ("tile", lambda x: np.tile(x, 2)), ("tile-more-dims", lambda x: np.tile(x, (2, 1, 1, 2))),
        ("broadcast_to", lambda x: np.broadcast_to(x[:, :1], (2, 3, 4))),
        ("broadcast_to-new-dims", lambda x: np.broadcast_to(x[0, 0], (5, 4)) + 0),
        ("pad-constant", lambda x: np.pad(x, 1)), ("pad-value", lambda x: np.pad(x, ((0, 0), (1, 2), (3, 0)), constant_values=-1.5)),
        ("pad-per-side-values", lambda x: np.pad(x, 1, constant_values=((0, 1), (2, 3), (4, 5)))),
        ("pad-edge", lambda x: np.pad(x, ((1, 1), (0, 2), (2, 1)), mode="edge")),
        ("pad-reflect", lambda x: np.pad(x, ((1, 1), (2, 2), (3, 0)), mode="reflect")),
        ("pad-symmetric", lambda x: np.pad(x, 2, mode="symmetric")), ("pad-wrap", lambda x: np.pad(x, ((0, 0), (1, 4), (2, 2)), mode="wrap")),
        ("diff", lambda x: np.diff(x)), ("diff-n2-axis0", lambda x: np.diff(x, n=2, axis=1)),
        ("diff-prepend", lambda x: np.diff(x, axis=-1, prepend=0.0)),
        ("diff-append-array", lambda x: np.diff(x, axis=0, append=x[:1])),
        ("flip", lambda x: np.flip(x)), ("flip-axis", lambda x: np.flip(x, axis=(0, 2))),
        ("fliplr", lambda x: np.fliplr(x)), ("flipud", lambda x: np.flipud(x)),
        ("roll", lambda x: np.roll(x, 2, axis=2)), ("roll-neg", lambda x: np.roll(x, -1, axis=0)),
        ("roll-none", lambda x: np.roll(x, 5)), ("roll-tuple", lambda x: np.roll(x, (1, 2), axis=(1, 2))),
        ("roll-broadcast-shift", lambda x: np.roll(x, 1, axis=(0, 1))), ("roll-big", lambda x: np.roll(x, 13, axis=-1)),
        ("atleast_2d", lambda x: np.atleast_2d(x[0, 0])), ("atleast_3d", lambda x: np.atleast_3d(x[0, 0])),
        ("atleast_1d-scalar", lambda x: np.atleast_1d(x[0, 0, 0])),
        ("reshape-bad-error", lambda x: x.reshape(5, 5)), ("transpose-bad-error", lambda x: x.transpose(0, 1)),
    ]
    for name, fn in fns:
        _c(cases, f"transform-{name}-float32", fn, x)
    for name, fn in fns[:12] + [fns[20], fns[28], fns[33], fns[36], fns[38], fns[44]]:
        _c(cases, f"transform-{name}-int16", fn, xi)
        _c(cases, f"transform-{name}-bool", fn, xb)
        _c(cases, f"transform-{name}-bfloat16", fn, x.astype(BF16))
    # astype between all dtype pairs
    for src, dst in itertools.product(ALL_DTYPES + [U16, U32], repeat=2):
        kind = "positive" if dst.kind == "u" else "normal"
        v = data((3, 4), src, kind, 11)
        if src.kind == "f" or src == BF16:
            v = (v * 10).astype(src)
        _c(cases, f"astype-{dname(src)}-to-{dname(dst)}", lambda x, d=dst: x.astype(d), v)
    _c(cases, "astype-float64-narrows", lambda x: x.astype(np.float64), x, expect_dtype=F32)
    _c(cases, "astype-int64-narrows", lambda x: x.astype(np.int64), xi, expect_dtype=I32)
    _c(cases, "astype-np-function", lambda x: np.astype(x, np.int32) if hasattr(np, "astype") else x.astype(np.int32), x)
    _c(cases, "astype-bf16-method", lambda x: x.astype(BF16) * 2, x)
    # edge sizes
    for shape in [(0,), (1,), (0, 4), (1, 1, 1)]:
        e = data(shape, F32)
        _c(cases, f"transform-edge-reshape-{sname(shape)}", lambda x: x.reshape(-1), e)
        _c(cases, f"transform-edge-transpose-{sname(shape)}", lambda x: x.T * 1, e)
        _c(cases, f"transform-edge-concat-{sname(shape)}", lambda x: np.concatenate([x, x]), e)
        _c(cases, f"transform-edge-flip-{sname(shape)}", lambda x: np.flip(x), e)
    return cases


# -- creation -------------------------------------------------------------------

def _creation_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    for dt in [F32, F16, BF16, I32, I8, U8, BOOL]:
        x = data((3, 4), dt, "small")
        _c(cases, f"create-zeros_like-{dname(dt)}", lambda x: np.zeros_like(x), x)
        _c(cases, f"create-ones_like-{dname(dt)}", lambda x: np.ones_like(x) + x, x)
        _c(cases, f"create-full_like-{dname(dt)}", lambda x: np.full_like(x, 1), x)
        _c(cases, f"create-empty_like-{dname(dt)}", lambda x: np.empty_like(x), x,
           compare_values=False)
        _c(cases, f"create-tril-{dname(dt)}", lambda x: np.tril(x), x)
        _c(cases, f"create-triu-k-{dname(dt)}", lambda x: np.triu(x, 1), x)
    x = data((3, 4), F32)
    for name, fn in [
        ("zeros_like-dtype", lambda x: np.zeros_like(x, dtype=np.int32)),
        ("full_like-float", lambda x: np.full_like(x, 2.5)),
        ("full_like-shape", lambda x: np.full_like(x, 7, shape=(2, 2))),
        ("tril-neg-k", lambda x: np.tril(x, -1)), ("triu-big-k", lambda x: np.triu(x, 5)),
        ("tril-batched", lambda x: np.tril(np.stack([x, x + 1]))),
        ("diag-2d", lambda x: np.diag(x)), ("diag-2d-k1", lambda x: np.diag(x, 1)),
        ("diag-2d-kneg", lambda x: np.diag(x, -2)), ("diag-1d", lambda x: np.diag(x[0])),
        ("diag-1d-k", lambda x: np.diag(x[1], 2)), ("diag-1d-kneg", lambda x: np.diag(x[1], -1)),
        ("np-arange-constant", lambda x: x + np.arange(4, dtype=np.float32)),
        ("np-arange-int64-constant", lambda x: x * np.arange(4)),
        ("np-eye-constant", lambda x: x[:, :3] @ np.eye(3, dtype=np.float32)),
        ("ops-zeros", lambda x: ops.zeros((2, 3), np.float32) + x[0, 0]),
        ("ops-full", lambda x: ops.full((2, 2), 3, np.int32)),
        ("ops-full-inferred", lambda x: ops.full((2,), 1.5)),
        ("ops-constant", lambda x: ops.constant([[1, 2, 3, 4]], np.float32) * x),
        ("ops-eye", lambda x: ops.eye(3, 4, 1)), ("ops-arange", lambda x: ops.arange(2, 11, 3)),
        ("ops-arange-float", lambda x: ops.arange(0.5, 2.0, 0.5)),
        ("ops-ones", lambda x: ops.ones(3, np.int8)), ("ops-empty", lambda x: ops.empty((2,), np.float32) * 0),
    ]:
        _c(cases, f"create-{name}", fn, x)

    def fill_then_write(x):  # noqa: ANN001
        out = np.zeros_like(x)
        out[1:, :2] = x[:2, 2:]
        return out
    _c(cases, "create-zeros-then-setitem", fill_then_write, x)

    def ops_zeros_write(x):  # noqa: ANN001
        out = ops.zeros((2, 4), dtype=np.float32)
        out[0] = x[1]
        out[1, ::2] = 5
        return out
    _c(cases, "create-ops-zeros-then-setitem", ops_zeros_write, x)
    return cases


# -- linear algebra -------------------------------------------------------------------

def _linalg_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    shapes = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5)),
              ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2)),
              ((0, 4), (4, 3)), ((3, 0), (0, 2)), ((64, 33), (33, 17))]
    for sa, sb in shapes:
        _c(cases, f"matmul-float32-{sname(sa)}-{sname(sb)}", _b(np.matmul), data(sa, F32, seed=1),
           data(sb, F32, seed=2), rtol=1e-4, atol=1e-5)
    for dt in [F16, BF16, I8, I32, U8, BOOL]:
        a, b = data((3, 8), dt, "small", 1), data((8, 5), dt, "small", 2)
        fn = _b(np.matmul)
        # bf16 @ bf16 stays bf16 in nkipy (NumPy/ml_dtypes returns float32)
        _c(cases, f"matmul-{dname(dt)}", fn, a, b, ref=_half_ref(fn) if dt in (F16, BF16) else None,
           expect_dtype=BF16 if dt == BF16 else None)
    _c(cases, "matmul-mixed-f16-f32", _b(np.matmul), data((3, 4), F16), data((4, 2), F32), rtol=1e-3)
    _c(cases, "matmul-mismatch-error", _b(np.matmul), data((3, 4), F32), data((3, 2), F32))
    _c(cases, "matmul-scalar-error", lambda a, b: np.matmul(a[0, 0], b), data((3, 4), F32), data((4, 2), F32))
    for sa, sb in [((3, 4), (4, 5)), ((4,), (4,)), ((2, 3, 4), (4,)), ((4,), (4, 5)),
                   ((2, 3, 4), (5, 4, 2)), ((3, 4), ()), ((), (3,))]:
        _c(cases, f"dot-{sname(sa)}-{sname(sb)}", _b(np.dot), data(sa, F32, seed=1),
           data(sb, F32, seed=2), rtol=1e-4, atol=1e-5)
    _c(cases, "dot-method", lambda a, b: a.dot(b), data((3, 4), F32), data((4, 2), F32), rtol=1e-5)
    _c(cases, "vdot", lambda a, b: np.vdot(a, b), data((3, 4), F32), data((3, 4), F32), rtol=1e-5)
    _c(cases, "inner", lambda a, b: np.inner(a, b), data((3, 4), F32), data((2, 4), F32), rtol=1e-5)
    _c(cases, "inner-1d", lambda a, b: np.inner(a[0], b[0]), data((3, 4), F32), data((2, 4), F32), rtol=1e-5)
    _c(cases, "outer", lambda a, b: np.outer(a, b), data((3,), F32), data((2, 2), F32))
    _c(cases, "outer-int", lambda a, b: np.outer(a, b), data((3,), I32), data((4,), I8))
    x = data((4, 5), F32)
    for name, fn in [("trace", lambda x: np.trace(x)), ("trace-offset", lambda x: np.trace(x, 1)),
                     ("trace-neg-offset", lambda x: np.trace(x, -2)),
                     ("trace-axes", lambda x: np.trace(np.stack([x, x * 2]), axis1=1, axis2=2)),
                     ("trace-method", lambda x: x.trace()),
                     ("trace-int", lambda x: np.trace(x.astype(np.int8)))]:
        _c(cases, f"linalg-{name}", fn, x, rtol=1e-5)
    for ord_ in [None, 2, 1, np.inf, -np.inf, 0, 3, 0.5]:
        _c(cases, f"norm-vector-ord{ord_}", lambda x, o=ord_: np.linalg.norm(x[0], ord=o), x, rtol=1e-5)
        _c(cases, f"norm-axis-ord{ord_}", lambda x, o=ord_: np.linalg.norm(x, ord=o, axis=1), x, rtol=1e-5)
    for ord_ in [None, "fro", 1, -1, np.inf, -np.inf]:
        _c(cases, f"norm-matrix-ord{ord_}", lambda x, o=ord_: np.linalg.norm(x, ord=o), x, rtol=1e-5)
        _c(cases, f"norm-matrix-keepdims-ord{ord_}",
           lambda x, o=ord_: np.linalg.norm(x, ord=o, axis=(1, 0), keepdims=True), x, rtol=1e-5)
    _c(cases, "norm-3d-none", lambda x: np.linalg.norm(np.stack([x, x])), x, rtol=1e-5)
    _c(cases, "norm-keepdims", lambda x: np.linalg.norm(x, axis=-1, keepdims=True), x, rtol=1e-5)
    for dt in [F16, BF16, I32]:
        _c(cases, f"norm-{dname(dt)}", lambda x: np.linalg.norm(x, axis=1), data((4, 5), dt),
           rtol=1e-5 if dt == I32 else None)
    return cases


# -- nn / conv ---------------------------------------------------------------------------

def _softmax_np(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _nn_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    for dt in FLOATS + [I8]:
        x = data((4, 7), dt, "normal", 3)
        for axis in (-1, 0):
            _c(cases, f"softmax-{dname(dt)}-axis{axis}", lambda x, a=axis: ops.softmax(x, axis=a), x)
            _c(cases, f"log_softmax-{dname(dt)}-axis{axis}",
               lambda x, a=axis: ops.log_softmax(x, axis=a), x)
        w = data((7,), dt, "positive", 4)
        _c(cases, f"rms_norm-{dname(dt)}", lambda x: ops.rms_norm(x), x)
        _c(cases, f"rms_norm-weight-{dname(dt)}", lambda x, w: ops.rms_norm(x, w, eps=1e-5), x, w)
    _c(cases, "softmax-3d-middle", lambda x: ops.softmax(x, axis=1), data((2, 5, 3), F32))
    _c(cases, "softmax-large-values", lambda x: ops.softmax(x * 100), data((3, 8), F32))
    _c(cases, "softmax-empty", lambda x: ops.softmax(x), data((0, 4), F32))
    _c(cases, "tensor_apis-softmax", lambda x: __import__("nkipy.core.tensor_apis").core.tensor_apis.softmax(x),
       data((3, 4), F32))
    _c(cases, "rms_norm-axis0", lambda x: ops.rms_norm(x, axis=0), data((6, 3), F32))
    _c(cases, "softmax-vs-formula", lambda x: ops.softmax(x), data((5, 6), F32),
       ref=lambda x: _softmax_np(x.astype(np.float64)).astype(np.float32))
    for dt in [F32, F16, BF16, I32, I8, U8, BOOL]:
        x = data((3, 9), dt, "normal", 5)
        for k, axis, asc in [(3, -1, False), (2, 0, False), (4, 1, True), (9, -1, False), (1, 0, True)]:
            _c(cases, f"topk-{dname(dt)}-k{k}-axis{axis}-asc{int(asc)}",
               lambda x, k=k, a=axis, s=asc: ops.topk(x, k, axis=a, is_ascend=s), x)
    _c(cases, "topk-ties", lambda x: ops.topk(x, 3, axis=-1), np.array([[1, 3, 3, 2, 3]], F32))
    _c(cases, "topk-default-axis0", lambda x: ops.topk(x, 2), data((5,), F32))
    _c(cases, "topk-k-too-big-error", lambda x: ops.topk(x, 6, axis=0), data((5,), F32))
    for dt in [F32, F16]:
        x = data((2, 4, 7, 6), dt, seed=1)
        for name, kw, wshape in [
            ("basic", {}, (3, 4, 3, 3)), ("stride2-pad1", {"stride": 2, "padding": 1}, (5, 4, 3, 3)),
            ("dilation", {"dilation": (2, 1), "padding": (2, 0)}, (2, 4, 2, 3)),
            ("groups", {"groups": 2, "padding": 1}, (6, 2, 3, 3)),
            ("depthwise", {"groups": 4}, (4, 1, 3, 1)),
            ("asym-pad", {"padding": ((1, 0), (2, 1))}, (3, 4, 2, 2)),
            ("same", {"padding": "same"}, (3, 4, 3, 5)), ("1x1", {}, (8, 4, 1, 1)),
        ]:
            w = data(wshape, dt, seed=2)
            _c(cases, f"conv2d-{name}-{dname(dt)}",
               lambda x, w, kw=kw: ops.conv2d(x, w, **kw), x, w, rtol=1e-4 if dt == F32 else 2e-3,
               atol=1e-4 if dt == F32 else 2e-3)
        b = data((3,), dt, seed=3)
        _c(cases, f"conv2d-bias-{dname(dt)}",
           lambda x, w, b: ops.conv2d(x, w, b, stride=(1, 2)), x, data((3, 4, 3, 3), dt, seed=2), b,
           rtol=1e-4 if dt == F32 else 2e-3, atol=1e-4 if dt == F32 else 2e-3)
    _c(cases, "conv2d-channel-mismatch-error", lambda x, w: ops.conv2d(x, w), data((1, 3, 5, 5), F32),
       data((2, 4, 3, 3), F32))
    for dt in [F32, F16]:
        x = data((2, 4, 5, 6, 5), dt, seed=4)
        tol = dict(rtol=1e-4, atol=1e-4) if dt == F32 else dict(rtol=2e-3, atol=2e-3)
        for name, kw, wshape in [
            ("basic", {}, (3, 4, 2, 3, 3)),
            ("stride-pad-dil-groups", {"stride": (2, 1, 2), "padding": 1, "dilation": (1, 2, 1),
                                       "groups": 2}, (6, 2, 3, 2, 3)),
            ("asym-pad", {"padding": ((2, 1), (0, 1), (1, 0))}, (3, 4, 3, 2, 2)),
            ("same", {"padding": "same"}, (2, 4, 3, 3, 1)),
        ]:
            _c(cases, f"conv3d-{name}-{dname(dt)}", lambda x, w, kw=kw: ops.conv3d(x, w, **kw),
               x, data(wshape, dt, seed=5), **tol)
        _c(cases, f"conv3d-bias-{dname(dt)}", lambda x, w, b: ops.conv3d(x, w, b, stride=2),
           x, data((3, 4, 1, 3, 3), dt, seed=5), data((3,), dt, seed=6), **tol)
    _c(cases, "conv3d-channel-mismatch-error", lambda x, w: ops.conv3d(x, w),
       data((1, 3, 4, 5, 5), F32), data((2, 4, 3, 3, 3), F32))
    return cases


# -- indexing -------------------------------------------------------------------------------

def _indexing_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    x = data((4, 5, 6), F32)
    idx = np.array([3, 0, -1, 2], np.int32)
    getters = [
        ("int", lambda x: x[1]), ("neg-int", lambda x: x[-1, -2]), ("slice", lambda x: x[1:3]),
        ("slice-step", lambda x: x[::2, 1::3]), ("neg-step", lambda x: x[::-1, 3:0:-2]),
        ("neg-slice", lambda x: x[-3:-1, :-2]), ("ellipsis", lambda x: x[..., 2]),
        ("ellipsis-mid", lambda x: x[1, ..., 1:]), ("none", lambda x: x[None, :, None, 0]),
        ("empty-slice", lambda x: x[3:1]), ("all", lambda x: x[...]), ("empty-tuple", lambda x: x[()]),
        ("out-of-range-slice", lambda x: x[2:100, -100:2]), ("static-int-array", lambda x: x[[0, 2, 3]]),
        ("static-2-arrays", lambda x: x[[0, 1], [2, 3]]), ("static-arrays-bcast", lambda x: x[[[0], [1]], [2, 3, 4]]),
        ("static-array-slice", lambda x: x[:, [4, 0]]), ("static-array-sep", lambda x: x[[1, 2], :, [0, 5]]),
        ("static-int-and-array", lambda x: x[1, :, [0, 2]]), ("static-array-int-adjacent", lambda x: x[:, 2, [1, 2]]),
        ("static-neg-array", lambda x: x[[-1, -4]]), ("static-mask", lambda x: x[np.array([True, False, True, False])]),
        ("static-mask-2d", lambda x: x[np.arange(20).reshape(4, 5) % 3 == 0]),
        ("static-array-none", lambda x: x[None, [0, 1], 1]), ("ix_", lambda x: x[np.ix_([0, 2], [1, 3, 4])]),
        ("int-oob-error", lambda x: x[4]), ("array-oob-error", lambda x: x[[0, 9]]),
        ("too-many-error", lambda x: x[0, 0, 0, 0]), ("float-index-error", lambda x: x[np.array([1.0])]),
        ("np-int-scalar", lambda x: x[np.int64(2), np.int32(-1)]),
    ]
    for name, fn in getters:
        _c(cases, f"getitem-{name}", fn, x)
    for dt in [F16, BF16, I8, BOOL, U8]:
        xd = data((4, 5, 6), dt)
        for name, fn in getters[:8] + [getters[14], getters[18]]:
            _c(cases, f"getitem-{name}-{dname(dt)}", fn, xd)
    dyn = [
        ("take-axis0", lambda x, i: x[i]), ("axis1", lambda x, i: x[:, i]),
        ("axis2-with-int", lambda x, i: x[1, :, i]), ("with-slice", lambda x, i: x[1:3, i, ::2]),
        ("two-arrays", lambda x, i: x[i, i]), ("two-arrays-sep", lambda x, i: x[i, :, i]),
        ("array-and-static", lambda x, i: x[i, [0, 1, 2, 3]]), ("2d-index", lambda x, i: x[:, i.reshape(2, 2)]),
        ("scalar-index", lambda x, i: x[i[0]]), ("neg-indices", lambda x, i: x[i % 4 - 4]),
        ("np-take", lambda x, i: np.take(x, i, axis=1)), ("np-take-none", lambda x, i: np.take(x, i)),
        ("np-take-clip", lambda x, i: np.take(x, i + 3, axis=0, mode="clip")),
        ("np-take-wrap", lambda x, i: np.take(x, i + 5, axis=2, mode="wrap")),
        ("take-method", lambda x, i: x.take(i, axis=-1)), ("int8-index", lambda x, i: x[i.astype(np.int8)]),
        ("uint-index", lambda x, i: x[:, (i % 5).astype(np.uint16)]), ("none-and-array", lambda x, i: x[None, i]),
    ]
    for name, fn in dyn:
        _c(cases, f"getitem-traced-{name}", fn, x, idx)
    _c(cases, "getitem-traced-float-index-error", lambda x, i: x[i], x, data((2,), F32))
    _c(cases, "take-static-neg", lambda x: np.take(x, [-1, 0], axis=2), x)
    _c(cases, "take-static-oob-error", lambda x: np.take(x, [7], axis=2), x)
    # take_along_axis / put_along_axis / scatter
    ia = np.argsort(x, axis=1)[:, :3].astype(np.int32)
    _c(cases, "take_along_axis", lambda x, i: np.take_along_axis(x, i, axis=1), x, ia)
    _c(cases, "take_along_axis-neg-axis", lambda x, i: np.take_along_axis(x, i, axis=-2), x, ia)
    _c(cases, "take_along_axis-bcast", lambda x, i: np.take_along_axis(x, i[:1], axis=1), x, ia)
    _c(cases, "take_along_axis-static", lambda x: np.take_along_axis(x, np.array([[[0], [1], [2], [3], [4]]]), axis=2), x)
    _c(cases, "take_along_axis-none", lambda x, i: np.take_along_axis(x, i.reshape(-1), axis=None), x, ia)
    _c(cases, "ops-take_along_axis", lambda x, i: ops.take_along_axis(x, i, 1), x, ia)

    def np_put(x, i):  # noqa: ANN001
        np.put_along_axis(x, i, -1.0, axis=1)
    _c(cases, "np-put_along_axis-mutates", np_put, x, ia)

    def np_put_vals(x, i):  # noqa: ANN001
        np.put_along_axis(x, i, x[:, :3] * 10, axis=1)
        return x[0]
    _c(cases, "np-put_along_axis-values", np_put_vals, x, ia)
    _c(cases, "ops-put_along_axis-functional", lambda x, i: ops.put_along_axis(x, i, 0.0, axis=1), x, ia)
    _c(cases, "ops-put_along_axis-none", lambda x: ops.put_along_axis(x, np.array([0, 7]), 1.0, None), x)
    si = np.array([3, 0], np.int32)
    _c(cases, "scatter_along_axis-axis0", lambda x, i: ops.scatter_along_axis(x, i, x[:2] * 2, 0), x, si)
    _c(cases, "scatter_along_axis-axis1", lambda x, i: ops.scatter_along_axis(x, i, np.ones((4, 2, 6), np.float32), 1), x, si)
    _c(cases, "scatter_along_axis-full-rank",
       lambda x, i: ops.scatter_along_axis(x, i, 5.0, -1), x,
       np.argsort(x, axis=2)[:, :, :2].astype(np.int32))
    _c(cases, "static_slice", lambda x: ops.static_slice(x, [1, 0, 2], [3, 5, 6], [1, 2, 2]), x)
    _c(cases, "static_slice-squeeze", lambda x: ops.static_slice(x, [1, 0, 0], [2, 5, 6], None, [0]), x)
    _c(cases, "dynamic_update_slice-static", lambda x: ops.dynamic_update_slice(x, np.ones((2, 2, 2), np.float32), [1, 3, 4]), x)
    _c(cases, "dynamic_update_slice-clamped", lambda x: ops.dynamic_update_slice(x, x[:2, :2, :2] * 0, [3, 4, 5]), x)
    _c(cases, "dynamic_update_slice-update-shape", lambda x: ops.dynamic_update_slice(x, 7.0, [0, 0, 0], (1, 2, 3)), x)
    _c(cases, "dynamic_update_slice-traced",
       lambda x, p: ops.dynamic_update_slice(x, x[:1, :2, :3] + 1, [p[0], 2, p[1]]), x,
       np.array([2, 5], np.int32))
    _c(cases, "dynamic_update_slice-traced-clamp",
       lambda x, p: ops.dynamic_update_slice(x, x[:2] * 0 - 1, [p[0], 0, 0]), x, np.array([9, 0], np.int32))
    _c(cases, "scatter_strided", lambda x: ops.scatter_strided(x, -1.0, [[0, 2], [1, 3, 4], [5]]), x)
    _c(cases, "scatter_strided-values", lambda x: ops.scatter_strided(x, np.arange(4.0).reshape(2, 1, 2), [[0, 2], [1], [0, 5]]), x)
    # where
    c = data((4, 5, 6), BOOL)
    for name, fn, args in [
        ("basic", lambda c, x: np.where(c, x, -x), (c, x)), ("scalars", lambda c, x: np.where(c, 1.0, 0.0) * x, (c, x)),
        ("scalar-y", lambda c, x: np.where(c, x, 0), (c, x)), ("bcast", lambda c, x: np.where(c[:, :1], x[0], 2.5), (c, x)),
        ("cond-float", lambda c, x: np.where(x, 1, 2), (c, x)), ("mixed-dtype", lambda c, x: np.where(c, x.astype(np.int8), x.astype(np.float16)), (c, x)),
        ("int-scalars", lambda c, x: np.where(c, 1, 2), (c, x)), ("ops-where", lambda c, x: ops.where(x > 0, x, 0.0), (c, x)),
    ]:
        _c(cases, f"where-{name}", fn, *args)
    _c(cases, "where-int8-oversized-scalar-wraps", lambda x: np.where(x > 0, x, 1000),
       data((5,), I8))
    _c(cases, "clip-int8-oversized-bounds", lambda x: np.clip(x, -1000, 1000), data((5,), I8))
    _c(cases, "clip-uint8-negative-bound", lambda x: np.clip(x, -5, 3), data((5,), U8))
    _c(cases, "where-bf16-scalar", lambda c, x: np.where(c, x, 0.5), c, x.astype(BF16), expect_dtype=BF16)
    _c(cases, "isclose", lambda x, y: np.isclose(x, y, rtol=0.1), x, x * 1.05)
    return cases


# -- setitem and aliasing --------------------------------------------------------------------

def _setitem_cases() -> list[OpCase]:
    cases: list[OpCase] = []
    x = data((4, 5, 6), F32)
    idx = np.array([3, 0, 2], np.int32)

    def mk(stmt: Callable, ret: bool = False) -> Callable:
        def k(x):  # noqa: ANN001
            stmt(x)
            return x.sum() if ret else None
        return k

    setters = [
        ("int", lambda x: x.__setitem__(1, 0.5)), ("slice", lambda x: x.__setitem__(slice(1, 3), -1)),
        ("row-from-array", lambda x: x.__setitem__((0, 0), np.arange(6, dtype=np.float32))),
        ("step", lambda x: x.__setitem__((slice(None, None, 2), 1), 9)),
        ("neg-step", lambda x: x.__setitem__((slice(None, None, -1), slice(4, 0, -2)), 2)),
        ("ellipsis", lambda x: x.__setitem__((Ellipsis, 0), x[..., 1])),
        ("broadcast-value", lambda x: x.__setitem__(slice(None), x[0])),
        ("value-leading-ones", lambda x: x.__setitem__(0, x[None, 1])),
        ("none", lambda x: x.__setitem__((None, 1), 3.0)), ("whole", lambda x: x.__setitem__(Ellipsis, 1.0)),
        ("static-array", lambda x: x.__setitem__([0, 2], x[1] * 2)),
        ("static-arrays", lambda x: x.__setitem__(([0, 1], [2, 3]), 7)),
        ("static-mask", lambda x: x.__setitem__(np.array([True, False, False, True]), 0)),
        ("static-mask-values", lambda x: x.__setitem__(np.array([False, True, True, False]), x[:2] + 1)),
        ("static-dup-last-wins", lambda x: x.__setitem__([1, 1], np.stack([x[0], x[2]]))),
        ("traced-mask", lambda x: x.__setitem__(x > 0.5, 0.0)),
        ("traced-mask-leading", lambda x: x.__setitem__(x[:, :, 0] > 0, -5.0)),
        ("traced-mask-row-value", lambda x: x.__setitem__(x[:, 0, 0] > 0, x[0])),
        ("int-cast", lambda x: x.__setitem__(0, 7)), ("empty-slice", lambda x: x.__setitem__(slice(3, 1), 4)),
        ("fill", lambda x: x.fill(3)), ("copyto", lambda x: np.copyto(x, 0.25)),
        ("copyto-where", lambda x: np.copyto(x, -x, where=x > 0)),
        ("ops-copyto", lambda x: ops.copyto(x, x * 2)),
    ]
    for name, stmt in setters:
        _c(cases, f"setitem-input-{name}", mk(stmt), x)
        _c(cases, f"setitem-input-{name}-returns-sum", mk(stmt, True), x)
    for dt in [F16, BF16, I32, I8, BOOL]:
        xd = data((4, 5, 6), dt)
        for name, stmt in setters[:6] + [setters[10], setters[15]]:
            _c(cases, f"setitem-input-{name}-{dname(dt)}", mk(stmt), xd)

    def traced_index(x, i):  # noqa: ANN001
        x[i] = 0
    _c(cases, "setitem-traced-index", traced_index, x, idx)

    def traced_index_values(x, i):  # noqa: ANN001
        x[:, i, 1:3] = x[:, :3, :2] * 10
    _c(cases, "setitem-traced-index-values", traced_index_values, x, idx)

    def traced_two(x, i):  # noqa: ANN001
        x[i, i] = -1
    _c(cases, "setitem-traced-two-arrays", traced_two, x, idx)

    def traced_neg(x, i):  # noqa: ANN001
        x[i - 4] = 3
    _c(cases, "setitem-traced-negative", traced_neg, x, idx)

    def traced_scalar_pos(x, i):  # noqa: ANN001
        x[i[0], 1] = 100
    _c(cases, "setitem-traced-scalar", traced_scalar_pos, x, idx)

    def kv_write(cache, new, pos):  # noqa: ANN001
        cache[:, pos[0]] = new          # traced scalar position: an update_slice
        cache[pos[1], 1:3, -1] = 0.5
        return cache[:, pos[0]].sum()
    for p in ([2, 1], [-1, -4], [4, 0]):
        _c(cases, f"setitem-traced-scalar-positions-{p[0]}-{p[1]}", kv_write, data((4, 5, 6), F32),
           data((4, 6), F32), np.array(p, np.int32))

    def two_scalars(x, p):  # noqa: ANN001
        x[p[0], None, p[1]] = x[0, None, 0] * 3
    _c(cases, "setitem-traced-two-scalars-none", two_scalars, data((4, 5, 6), F32),
       np.array([1, 3], np.int32))

    def intermediate(x):  # noqa: ANN001
        y = x * 2
        y[0] = 1
        y[:, -1] += 5
        return y
    _c(cases, "setitem-intermediate", intermediate, x)

    def via_view(x):  # noqa: ANN001
        row = x[1]
        row[2:] = 0
        v = x.T
        v[0] = 9
        r = x.reshape(20, 6)
        r[-1] *= 2
    _c(cases, "setitem-through-views", via_view, x)

    def nested_views(x):  # noqa: ANN001
        a = x[1:]
        b = a[0]
        b[0, 0] = 42
        c = x[1]
        return c + a[0]
    _c(cases, "setitem-nested-views-sibling-refresh", nested_views, x)

    def iterate_rows(x):  # noqa: ANN001
        for i, row in enumerate(x):
            row += i
    _c(cases, "setitem-iterate-rows", iterate_rows, x)

    def add_at(x, i):  # noqa: ANN001
        np.add.at(x, i, 1.0)                       # repeated indices accumulate
        np.add.at(x, (i[:2], slice(None), 0), x[:2, :, 1])
        np.add.at(x, 0, 5.0)
    _c(cases, "add_at", add_at, x, np.array([1, 1, 3, 1], np.int32))
    _c(cases, "add_at-static", lambda x: np.add.at(x, ([0, 0, 2], [1, 1, 1]), 2.0), x)

    def slice_iadd(x):  # noqa: ANN001
        x[1:3] += 1
        x[0, [1, 1, 2]] += 10
    _c(cases, "setitem-slice-iadd", slice_iadd, x)

    def noncontig_reshape_copy(x):  # noqa: ANN001
        t = x.transpose(1, 0, 2)
        r = t.reshape(-1)   # a copy in NumPy: writing to r leaves x unchanged
        r[0] = 99
        return r
    _c(cases, "setitem-reshape-of-transpose-is-copy", noncontig_reshape_copy, x)

    def squeeze_view(x):  # noqa: ANN001
        s = x[:1].squeeze(0)
        s[0, 0] = -7
        e = np.expand_dims(x, 0)
        e[0, 3] = 1
    _c(cases, "setitem-squeeze-expand-views", squeeze_view, x)

    def return_mutated(x, y):  # noqa: ANN001
        x[0] = 1
        return y * 2, x
    _c(cases, "setitem-return-mutated", return_mutated, x, data((3,), F32))

    def mutate_two(x, y):  # noqa: ANN001
        y[0] = x[0, 0, 0]
        x[1] = 2
        return x[2].sum()
    _c(cases, "setitem-two-inputs", mutate_two, x, data((3,), F32))

    def broadcast_readonly(x):  # noqa: ANN001
        b = np.broadcast_to(x[0], (2, 5, 6))
        b[0] = 1
    _c(cases, "setitem-broadcast-readonly-error", broadcast_readonly, x)
    _c(cases, "setitem-int8-overflow-error", mk(lambda x: x.__setitem__(0, 1000)), data((3,), I8))
    _c(cases, "setitem-uint8-negative-error", mk(lambda x: x.__setitem__(0, -1)), data((3,), U8))
    _c(cases, "setitem-float-into-int-truncates", mk(lambda x: x.__setitem__(0, 2.7)), data((3,), I8))
    _c(cases, "setitem-bad-shape-error", mk(lambda x: x.__setitem__(0, np.ones((2, 2), np.float32))), x)
    return cases


# -- collectives -------------------------------------------------------------------------

def _collective_cases() -> list[OpCase]:
    from nkipy.distributed import collectives as cc
    cases: list[OpCase] = []
    x = data((4, 6), F32)
    for g in ([[0]], [[0, 1]], [[0, 1], [2, 3]]):
        n = len(g[0])
        for name, fn in [
            ("all_reduce-add", lambda x, g=g: cc.all_reduce(x, replica_groups=g)),
            ("all_reduce-max", lambda x, g=g: cc.all_reduce(x, replica_groups=g, reduce_op=np.maximum)),
            ("all_reduce-mul", lambda x, g=g: cc.all_reduce(x, replica_groups=g, reduce_op=np.multiply)),
            ("all_gather", lambda x, g=g: cc.all_gather(x, 1, replica_groups=g)),
            ("reduce_scatter", lambda x, g=g: cc.reduce_scatter(x, 0, replica_groups=g)),
            ("all_to_all", lambda x, g=g: cc.all_to_all(x, 1, 0, replica_groups=g)),
        ]:
            _c(cases, f"collective-{name}-ranks{n}-groups{len(g)}", fn, x)
    _c(cases, "collective-default-groups", lambda x: cc.all_reduce(x), x)
    _c(cases, "collective-int", lambda x: cc.all_reduce(x, [[0, 1]]), data((3,), I32))
    _c(cases, "collective-reduce_scatter-bad-split-error",
       lambda x: cc.reduce_scatter(x, 0, replica_groups=[[0, 1, 2]]), x)
    return cases


# -- whole kernels -----------------------------------------------------------------------------

def _kernel_cases() -> list[OpCase]:
    import math
    cases: list[OpCase] = []

    def playground(A, B):  # noqa: ANN001  (the original's examples/playground kernel)
        A = A.transpose(1, 0)
        return A @ B
    for dt in (F16, F32):
        fn = playground
        _c(cases, f"kernel-playground-{dname(dt)}", fn, data((128, 96), dt), data((128, 64), dt),
           ref=_half_ref(fn) if dt == F16 else None, rtol=2e-3 if dt == F16 else 1e-4,
           atol=2e-3 if dt == F16 else 1e-4, tags=("kernel",))

    def layer_norm(x, g, b, eps=1e-5):  # noqa: ANN001
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b

    def gelu_mlp(x, w1, w2):  # noqa: ANN001
        h = x @ w1
        h = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
        return h @ w2

    def gelu_erf(x):  # noqa: ANN001
        return 0.5 * x * (1.0 + ops.erf(x / math.sqrt(2.0)))

    def attention(q, k, v):  # noqa: ANN001
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        mask = np.triu(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), 1)
        s = np.where(mask, -np.inf, s)
        return ops.softmax(s, axis=-1) @ v

    def rope(x, cos, sin):  # noqa: ANN001
        x1, x2 = x[..., ::2], x[..., 1::2]
        r1 = x1 * cos - x2 * sin
        r2 = x1 * sin + x2 * cos
        return np.stack([r1, r2], axis=-1).reshape(x.shape)

    def rope_half(x, cos, sin):  # noqa: ANN001
        h = x.shape[-1] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return x * np.concatenate([cos, cos], -1) + rot * np.concatenate([sin, sin], -1)

    def decoder_step(x, w, cache, pos):  # noqa: ANN001
        h = ops.rms_norm(x, w)
        cache[:, pos[0]] = h             # KV-cache write at a traced position
        scores = cache @ h[0]
        return ops.softmax(scores, axis=-1)

    def embedding(table, ids):  # noqa: ANN001
        return table[ids] * math.sqrt(table.shape[-1])

    def sampling(logits, temperature=0.7):  # noqa: ANN001
        p = ops.softmax(logits / temperature, axis=-1)
        vals, idx = ops.topk(p, 5, axis=-1)
        return vals / vals.sum(axis=-1, keepdims=True), idx

    def residual_block(x, w1, w2, g):  # noqa: ANN001
        h = ops.rms_norm(x, g, eps=1e-6)
        y = np.maximum(h @ w1, 0) @ w2
        x += y                           # in place: x becomes an aliased output
        return x.mean()

    x = data((8, 32), F32)
    theta = np.outer(np.arange(6), 1.0 / 10000 ** (np.arange(8) / 8)).astype(np.float32)
    for dt in (F32, F16, BF16):
        # whole kernels round at every op in half precision; the reference rounds once
        tol = {F32: {"rtol": 1e-4, "atol": 1e-4}, F16: {"rtol": 1e-2, "atol": 1e-2},
               BF16: {"rtol": 6e-2, "atol": 6e-2}}[dt]
        xd = x.astype(dt)
        _c(cases, f"kernel-layer_norm-{dname(dt)}", layer_norm, xd,
           data((32,), dt, "positive"), data((32,), dt), ref=_half_ref(layer_norm),
           tags=("kernel",), **tol)
        _c(cases, f"kernel-gelu_mlp-{dname(dt)}", gelu_mlp, xd * 0.5, data((32, 64), dt) * 0.2,
           data((64, 16), dt) * 0.2, ref=_half_ref(gelu_mlp), tags=("kernel",), **tol)
        _c(cases, f"kernel-gelu_erf-{dname(dt)}", gelu_erf, xd, ref=_half_ref(gelu_erf),
           tags=("kernel",), **tol)
        _c(cases, f"kernel-attention-{dname(dt)}", attention, data((2, 6, 16), dt),
           data((2, 6, 16), dt), data((2, 6, 16), dt), ref=_half_ref(attention), tags=("kernel",),
           **tol)
        _c(cases, f"kernel-rope-{dname(dt)}", rope, data((2, 6, 16), dt), np.cos(theta).astype(dt),
           np.sin(theta).astype(dt), ref=_half_ref(rope), tags=("kernel",), **tol)
        _c(cases, f"kernel-rope_half-{dname(dt)}", rope_half, data((2, 6, 16), dt),
           np.cos(theta).astype(dt), np.sin(theta).astype(dt), ref=_half_ref(rope_half),
           tags=("kernel",), **tol)
    _c(cases, "kernel-decoder_step", decoder_step, data((1, 16), F32), data((16,), F32, "positive"),
       data((3, 10, 16), F32), np.array([4], np.int32), rtol=1e-4, atol=1e-5, tags=("kernel",))
    _c(cases, "kernel-embedding", embedding, data((50, 16), F32),
       np.array([[3, 49, 0], [7, 7, 1]], np.int32), tags=("kernel",))
    _c(cases, "kernel-sampling", sampling, data((4, 40), F32), rtol=1e-5, tags=("kernel",))
    _c(cases, "kernel-residual_block", residual_block, data((4, 16), F32), data((16, 32), F32) * 0.2,
       data((32, 16), F32) * 0.2, data((16,), F32, "positive"), rtol=1e-4, atol=1e-5,
       tags=("kernel",))
    return cases


def _philox_low_bits(seed, index):
    w = ops.philox(seed, index)
    return (w[0] & 0xFFFF) + (w[1] & 0xFFFF) + (w[2] & 0xFFFF) + (w[3] & 0xFFFF)


def _random_cases() -> list[OpCase]:
    """Philox words (the IR's philox0..3): their low 16 bits, the part every
    integer width holds, against nkipy.core.philox's NumPy reference."""
    cases: list[OpCase] = []
    idx = np.arange(24, dtype=I32).reshape(2, 3, 4) * 977
    _c(cases, "random-philox", _philox_low_bits, np.array(12345, I32), idx, check_dtype=False)
    # the run-time check of the same module (IR op fail_if), passing: x unchanged
    _c(cases, "check-fail_if-passes",
       lambda x: ops.fail_if(x * 2.0, np.max(np.abs(x), axis=-1, keepdims=True) > 1e30, "never"),
       data((3, 5), F32))
    return cases


ALL_CASES: list[OpCase] = (
    _unary_cases() + _binary_cases() + _operator_cases() + _promotion_cases()
    + _reduction_cases() + _transform_cases() + _creation_cases() + _linalg_cases()
    + _nn_cases() + _indexing_cases() + _setitem_cases() + _collective_cases()
    + _kernel_cases() + _random_cases()
)

_ids = [c.id for c in ALL_CASES]
assert len(set(_ids)) == len(_ids), sorted({i for i in _ids if _ids.count(i) > 1})

__all__ = ["OpCase", "ALL_CASES", "case_id", "check_case", "reference", "graph_inputs",
           "compare", "data", "TOLERANCES", "interp_executor"]


def run_kernel(fn: Callable, *arrays: np.ndarray, cache_dir: Any, **kwargs: Any):
    """Compiles ``fn`` for ``arrays`` (DeviceKernel.compile_and_load, build
    files under ``cache_dir``; ``kwargs`` such as ``name`` passed on), runs it
    on the device once and returns (the kernel, its outputs as NumPy arrays)."""
    from nkipy.runtime import DeviceKernel, DeviceTensor

    k = DeviceKernel.compile_and_load(fn, *arrays, build_dir=cache_dir, **kwargs)
    names = [v.name for v in k.graph.inputs]
    outs = k(inputs={n: DeviceTensor.from_numpy(a) for n, a in zip(names, arrays)})
    return k, [outs[n].numpy() for n in k.graph.output_names]
