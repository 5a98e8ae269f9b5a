"""Compiled equals eager for the registry entries of spike_torch/lowering/aten_math.py
and the fixes that turned compile errors into lowered kernels or CPU partitions.

Several ops share one compiled function (one kernel per dtype) to keep the
file fast. Each case is compiled with ``torch.compile(backend="nkipy")``,
checked against eager PyTorch on the CPU, and checked to be fully lowered (no
node left to a CPU partition) unless the case says it partitions. float32 at
rtol 1e-4 / atol 1e-5, float16 at 2e-3 (two units in the last place) and bfloat16 at 1.6e-2 (computed in
float32 and rounded once, as eager), integers exactly.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence

import pytest
import torch
from torch.utils import _pytree as pytree

F32, F16, BF16, I64, I32 = torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32
TOL = {F32: (1e-4, 1e-5), F16: (2e-3, 2e-3), BF16: (1.6e-2, 1.6e-2),
       torch.float64: (1e-7, 1e-7)}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rnd(*shape, lo=-2.0, hi=2.0, dtype=F32, seed=0):
    t = torch.rand(*shape, generator=_gen(seed)) * (hi - lo) + lo
    return t.to(dtype)


def ints(*shape, lo=-5, hi=6, dtype=I64, seed=0):
    return torch.randint(lo, hi, shape, generator=_gen(seed), dtype=dtype)


@pytest.fixture
def lowered(backend, monkeypatch):
    """Compiles a function and returns (result, names of ops left to the CPU)."""
    from torch_to_nkipy import backend as be

    left: List[str] = []
    orig = be.is_supported_node

    def record(node, *a, **k):
        ok = orig(node, *a, **k)
        if not ok and node.op == "call_function":
            left.append(be.target_name(node.target))
        return ok

    monkeypatch.setattr(be, "is_supported_node", record)

    def run(fn: Callable, *args: Any):
        torch._dynamo.reset()
        left.clear()
        got = torch.compile(fn, backend="nkipy")(*[_clone(a) for a in args])
        return got, sorted(set(left))
    return run


def _clone(a):
    return a.clone() if isinstance(a, torch.Tensor) else a


def _same(got, want, what=""):
    g, _ = pytree.tree_flatten(got)
    w, _ = pytree.tree_flatten(want)
    assert len(g) == len(w), what
    for i, (a, b) in enumerate(zip(g, w)):
        if not isinstance(b, torch.Tensor):
            assert a == b, f"{what}[{i}]"
            continue
        assert a.shape == b.shape and a.dtype == b.dtype, \
            f"{what}[{i}]: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        if b.dtype.is_floating_point:
            rtol, atol = TOL[b.dtype]
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{what}[{i}]: {m}")
        else:
            assert torch.equal(a, b), f"{what}[{i}]: {a} != {b}"


def check(lowered, fn, *args, cpu: Sequence[str] = ()):
    want = fn(*[_clone(a) for a in args])
    got, left = lowered(fn, *args)
    _same(got, want, fn.__name__)
    assert left == sorted(cpu), f"{fn.__name__}: left to the CPU: {left}"


# ---- elementwise ------------------------------------------------------------------

def special_float(x, y):
    return (torch.asinh(x), torch.acosh(x.abs() + 1.5), torch.atanh(x * 0.45),
            torch.special.erfc(x), torch.lgamma(x), torch.erfinv(x * 0.45),
            torch.digamma(x), torch.i0(x), torch.special.polygamma(1, x.abs() + 0.5),
            torch.special.polygamma(2, x.abs() + 0.5), torch.angle(x), torch.fmin(x, y),
            torch.fmax(x, y), torch.ldexp(x, y.round()))


def special_edges(x):
    return (torch.erfinv(x), torch.lgamma(x), torch.digamma(x), torch.angle(x),
            torch.special.erfc(x * 4))


def special_int(a, b):
    return (torch.asinh(a), torch.special.erfc(a), torch.lgamma(a.abs() + 1), torch.i0(a),
            torch.fmin(a, b), torch.fmax(a, b), torch.angle(a), torch.digamma(a.abs() + 1))


@pytest.mark.parametrize("dt", [F32, BF16])
def test_special_functions(lowered, dt):
    x = rnd(4, 6, lo=-1.9, hi=1.9, dtype=dt)
    y = rnd(4, 6, lo=-3.0, hi=3.0, dtype=dt, seed=1)
    y[0, 0] = float("nan")
    check(lowered, special_float, x, y)


def test_special_function_edges(lowered):
    x = torch.tensor([-1.0, 1.0, 1.5, -2.0, 0.0, -0.5, float("nan"), float("inf"), 1e-3, 30.0])
    check(lowered, special_edges, x)


def test_special_functions_of_integers(lowered):
    check(lowered, special_int, ints(3, 5), ints(3, 5, seed=1))


def bessel_and_friends(x):
    return (torch.special.i0e(x), torch.special.i1(x), torch.special.i1e(x),
            torch.special.modified_bessel_i0(x), torch.special.modified_bessel_i1(x),
            torch.special.spherical_bessel_j0(x), torch.special.erfcx(x), torch.frexp(x))


def bessel_half(x):   # eager has no half-precision modified_bessel_*, erfcx, ...
    return torch.special.i0e(x), torch.special.i1(x), torch.special.i1e(x), torch.frexp(x)


def test_bessel_and_friends(lowered):
    check(lowered, bessel_and_friends, rnd(5, 6, lo=-9.0, hi=9.0))
    check(lowered, bessel_half, rnd(5, 6, lo=-9.0, hi=9.0, dtype=BF16))


def test_bessel_and_friends_edges(lowered):
    x = torch.tensor([0.0, -0.0, 3.75, -3.75, 30.0, -30.0, 1e-30, float("inf"), -float("inf"),
                      float("nan"), 0.5, 1.0, 1024.0, -3e-39, 27.0])
    check(lowered, bessel_and_friends, x)


# ---- scans, sorting, order statistics ---------------------------------------------

def scans(x):
    return (torch.cummax(x, 1), torch.cummin(x, 0), torch.cummax(x, -1))


def logcumsumexp(x):
    return torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)


@pytest.mark.parametrize("dt", [F32, BF16, I64])
def test_scans(lowered, dt):
    x = rnd(3, 7, dtype=dt) if dt.is_floating_point else ints(3, 7, lo=-2, hi=3)
    if dt == F32:
        x[1, 3] = float("nan")
    check(lowered, scans, x)
    if dt.is_floating_point:
        check(lowered, logcumsumexp, x if dt != F32 else rnd(3, 7, hi=30.0))


def order(x):
    return (torch.sort(x, dim=-1), torch.sort(x, dim=0, descending=True),
            torch.sort(x, stable=True, dim=1), torch.kthvalue(x, 2, dim=1),
            torch.median(x, dim=1), torch.median(x), torch.argsort(x, dim=0))


def nan_order(x):
    return torch.nanmedian(x, dim=1, keepdim=True), torch.nanmedian(x), torch.median(x, 0)


def search(seq, v, sorter):
    return (torch.searchsorted(seq, v), torch.searchsorted(seq, v, right=True),
            torch.searchsorted(seq, v, out_int32=True),
            torch.bucketize(v, seq[0]), torch.bucketize(v, seq[0], right=True))


def search_sorter(seq, v, sorter):
    return torch.searchsorted(seq, v, sorter=sorter), torch.searchsorted(seq, v, side="right",
                                                                          sorter=sorter)


@pytest.mark.parametrize("dt", [F32, I64])
def test_sorting(lowered, dt):
    x = rnd(4, 5, dtype=dt) if dt.is_floating_point else torch.randperm(20, generator=_gen())
    if dt.is_floating_point:
        x[1, 2] = x[3, 0] = float("nan")       # sorts last, first when descending
    else:   # no ties: which index kthvalue/median return among equal values is unspecified
        x = x.reshape(4, 5) - 10
    check(lowered, order, x)
    seq = torch.sort(rnd(3, 6, seed=2) if dt.is_floating_point else ints(3, 6, seed=2))[0]
    v = rnd(3, 4, seed=3) if dt.is_floating_point else ints(3, 4, seed=3)
    v[0, 0] = seq[0, 2]          # ties decide left from right
    check(lowered, search, seq, v, None)
    raw = rnd(3, 6, seed=4) if dt.is_floating_point else ints(3, 6, lo=-50, hi=50, seed=4)
    check(lowered, search_sorter, raw, v, torch.argsort(raw, dim=-1))


def test_median_with_nans(lowered):
    x = rnd(3, 5)
    x[0, 1] = x[2, 0] = x[2, 4] = float("nan")
    check(lowered, nan_order, x)


# ---- diagonals, strided views, unfold, masks ----------------------------------------

def diagonals(x, s):
    y = x.clone()
    y.diagonal(1, 1, 2).copy_(s)
    return (torch.diagonal(x), torch.diagonal(x, 1, 1, 2), torch.diagonal(x, -2, -1, 0),
            torch.diagonal(x, 9), y, torch.diagonal_scatter(x, s * 2, 1, 1, 2))


def strided(x):
    y = x.clone()
    y.as_strided((2, 2), (4, 1), 1).mul_(3)
    return (x.as_strided((3, 2), (2, 3), 1), torch.as_strided_copy(x, (2, 2, 2), (1, 4, 2)), y,
            x.unfold(1, 2, 1), x.unfold(0, 2, 2), x.unfold(1, 3, 2))


def masks(x, m, s):
    return x.masked_scatter(m, s), x.masked_scatter(m[0], s)


def shapes(x):
    e = x.new_empty_strided((2, 3), (3, 1)).fill_(2)
    return torch.narrow_copy(x, 1, 1, 2), torch.unbind_copy(x, 1), e


@pytest.mark.parametrize("dt", [F32, BF16, I64])
def test_views(lowered, dt):
    x = rnd(3, 4, 5, dtype=dt) if dt.is_floating_point else ints(3, 4, 5)
    s = rnd(3, 4, dtype=dt, seed=1) if dt.is_floating_point else ints(3, 4, seed=1)
    check(lowered, diagonals, x, s)
    x2 = rnd(4, 6, dtype=dt) if dt.is_floating_point else ints(4, 6)
    check(lowered, strided, x2)
    m = rnd(4, 6, seed=5) > 0
    check(lowered, masks, x2, m, x2 * 2 + 1)
    check(lowered, shapes, x2)


# ---- indexing and distances -----------------------------------------------------------

def index_reduce_all(x, idx, src):
    return tuple(x.index_reduce(1, idx, src, r, include_self=inc)
                 for r in ("prod", "mean", "amax", "amin") for inc in (True, False)
                 if x.is_floating_point() or r != "mean")


def puts(x, idx, src):
    return x.put(idx, src), x.put(idx[:2], src[:2], accumulate=True)


def distances(a, b):
    return (torch.cdist(a, b), torch.cdist(a, b, p=1), torch.cdist(a, b, p=float("inf")),
            torch.cdist(a, b, p=3), torch.dist(a, b[:, :4]), torch.dist(a, b[:, :4], p=1),
            torch.dist(a, b[:, :1], float("inf")), torch.dist(a, b[:, :4], 0),
            torch.dist(a, b[:, :4], 3))


@pytest.mark.parametrize("dt", [F32, BF16, I64])
def test_indexing(lowered, dt):
    x = rnd(3, 5, dtype=dt) if dt.is_floating_point else ints(3, 5)
    src = rnd(3, 4, dtype=dt, seed=1) if dt.is_floating_point else ints(3, 4, seed=1)
    idx = torch.tensor([0, 4, 0, 2])
    check(lowered, index_reduce_all, x, idx, src)
    check(lowered, puts, x, torch.tensor([1, -1, 7]), src[0, :3])
    if dt == F32:
        check(lowered, distances, rnd(2, 4, 3), rnd(2, 5, 3, seed=1))


def cross_products(a, b):
    return torch.linalg.cross(a, b), torch.linalg.cross(a.transpose(0, 1), b.transpose(0, 1), dim=0)


@pytest.mark.parametrize("dt", [F32, F16, BF16])
def test_cross_products(lowered, dt):
    """linalg_cross is kept whole (not decomposed): its entry rounds each product
    to a half dtype before the difference, as the CPU kernel does."""
    check(lowered, cross_products, rnd(4, 3, dtype=dt), rnd(4, 3, dtype=dt, seed=1))


def scatter_reductions(x, idx, src):
    out = tuple(x.scatter_reduce(1, idx, src, r, include_self=inc)
                for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)
                if x.is_floating_point() or r != "mean")
    return out + (x.scatter(0, idx % 3, src, reduce="add"),
                  x.scatter(1, idx, src, reduce="multiply"), x.scatter(1, idx, 2.0, reduce="add"))


def segments(data, lengths, offsets):
    return (torch.segment_reduce(data, "sum", lengths=lengths),
            torch.segment_reduce(data, "max", lengths=lengths, initial=0.5),
            torch.segment_reduce(data, "mean", offsets=offsets),
            torch.segment_reduce(data, "min", offsets=offsets, initial=-1.0),
            torch.segment_reduce(data, "prod", lengths=lengths, initial=2.0))


def histograms(x):
    return torch.histc(x, bins=7), torch.histc(x, bins=5, min=-1.0, max=1.0)


def products(a, b, w, c):
    return torch.nn.functional.bilinear(a, b, w, c), torch.nn.functional.pdist(a), \
        torch.nn.functional.pdist(a, p=1)


@pytest.mark.parametrize("dt", [F32, BF16, I64])
def test_scatter_reductions(lowered, dt):
    x = rnd(3, 5, dtype=dt) if dt.is_floating_point else ints(3, 5)
    src = rnd(3, 5, dtype=dt, seed=1) if dt.is_floating_point else ints(3, 5, seed=1)
    idx = torch.tensor([[0, 4, 0, 2, 2], [1, 1, 3, 3, 0]])
    check(lowered, scatter_reductions, x, idx, src)


def test_segments_histograms_products(lowered):
    data = rnd(7, 3)
    check(lowered, segments, data, torch.tensor([2, 0, 4, 1]), torch.tensor([0, 3, 3, 7]))
    h = rnd(40, lo=-1.5, hi=1.5)
    h[0], h[1] = 1.0, -1.0
    check(lowered, histograms, h)
    check(lowered, products, rnd(4, 3), rnd(4, 5, seed=1), rnd(2, 3, 5, seed=2), rnd(2, seed=3))


def linalg_small(a, b, t):
    lo = torch.linalg.cholesky_ex(a)[0]
    return (torch.linalg.cholesky_ex(a, upper=True), torch.cholesky(a), torch.cholesky_inverse(lo),
            torch.cholesky_inverse(lo.mT, upper=True), torch.cholesky_solve(b, lo),
            torch.linalg.solve_triangular(t, b, upper=True),
            torch.linalg.solve_triangular(t.mT, b.mT, upper=False, left=False,
                                          unitriangular=True),
            torch.triangular_solve(b, t, upper=True, transpose=True),
            torch.linalg.det(t @ a), torch.linalg.slogdet(t.mT - a), torch.logdet(a))


def linalg_empty(e):
    return torch.linalg.det(e), torch.linalg.slogdet(e), torch.cholesky(e)


@pytest.mark.parametrize("dt", [F32, torch.float64])
def test_small_linear_algebra(lowered, dt):
    m = rnd(2, 4, 4, dtype=dt)
    a = m @ m.mT + 4 * torch.eye(4, dtype=dt)          # positive definite
    t = torch.triu(rnd(2, 4, 4, dtype=dt, seed=1)) + 3 * torch.eye(4, dtype=dt)
    check(lowered, linalg_small, a, rnd(2, 4, 3, dtype=dt, seed=2), t)
    check(lowered, linalg_empty, torch.zeros(0, 0, dtype=dt))


def test_singular_determinant_and_a_pivot_of_zero(lowered):
    s = torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 6.0]])
    check(lowered, linalg_det_slogdet, s)


def linalg_det_slogdet(a):
    return torch.linalg.det(a), torch.linalg.slogdet(a)


# ---- what used to fail to compile ---------------------------------------------------------

def zero_dim_reductions(x):
    return (torch.sum(x, 0), torch.sum(x, -1, keepdim=True), torch.mean(x, 0),
            torch.amax(x, -1), torch.amin(x, 0, keepdim=True), torch.argmax(x, 0),
            torch.argmin(x, -1, keepdim=True), torch.prod(x, 0), torch.var(x, 0, correction=0),
            torch.std(x, -1, correction=0), torch.logsumexp(x, 0), torch.cumsum(x, 0),
            torch.cumprod(x, -1), torch.softmax(x, 0), torch.log_softmax(x, -1),
            torch.max(x, 0), torch.min(x, -1, keepdim=True), torch.nansum(x, 0),
            torch.all(x, 0), torch.any(x, -1), torch.norm(x, dim=0),
            torch.topk(x, 1), torch.gather(x, 0, torch.tensor(0)),
            torch.index_select(x, 0, torch.tensor([0])), torch.cummax(x, 0), torch.sort(x))


def zero_dim_int_reductions(x):
    return (torch.sum(x, 0), torch.amax(x, -1), torch.argmax(x, 0), torch.prod(x, 0),
            torch.cumsum(x, 0), torch.max(x, 0), torch.all(x, 0),
            torch.index_select(x, 0, torch.tensor([0])))


@pytest.mark.parametrize("dt", [F32, I64])
def test_reductions_of_a_0d_tensor(lowered, dt):
    x = torch.tensor(1.5) if dt == F32 else torch.tensor(3)
    check(lowered, zero_dim_reductions if dt == F32 else zero_dim_int_reductions, x)


def gather_empty(x, i):
    return torch.gather(x, 1, i), torch.gather(x, 0, i[:0])


def index_put_masks(x, m, row, rows):
    return (x.index_put((m,), row), x.index_put((m,), rows),
            x.index_put((m,), rows, accumulate=True), x.index_put((m,), row[:1], accumulate=True),
            x.index_put((x > 0,), row[0]))


def index_put_inner_mask(x, m, v):
    y = x.clone()
    y[:, m] = v
    return y


def cat_zero(a, b, c, e):
    return torch.cat([a, b], 1), torch.cat([c, b], 0), torch.cat([c, c], 0), \
        torch.cat([e, b], 0)


@pytest.mark.parametrize("dt", [F32, BF16, I64])
def test_former_compile_errors(lowered, dt):
    mk = (lambda *s, seed=0: rnd(*s, dtype=dt, seed=seed)) if dt.is_floating_point else \
        (lambda *s, seed=0: ints(*s, seed=seed))
    check(lowered, gather_empty, mk(3, 4), torch.zeros(3, 0, dtype=I64))
    m = torch.tensor([True, False, True, False])
    check(lowered, index_put_masks, mk(4, 3), m, mk(3, seed=1), mk(2, 3, seed=2))
    check(lowered, cat_zero, mk(2, 0), mk(2, 3), mk(0, 3), mk(0))


def test_boolean_mask_past_the_first_dim_runs_on_the_cpu(lowered):
    check(lowered, index_put_inner_mask, rnd(4, 3), torch.tensor([True, False, True]),
          torch.tensor(1.0), cpu=["aten.index_put.default"])


def complex_math(a):
    return (a * 2).abs()


def complex_between(x):
    return torch.view_as_real(torch.view_as_complex(x) * 2).sin() + 1


def test_complex_tensors_run_in_cpu_partitions(lowered):
    check(lowered, complex_math, torch.randn(3, dtype=torch.complex64, generator=_gen()),
          cpu=["aten.abs.default", "aten.mul.Tensor"])
    check(lowered, complex_between, rnd(3, 2),
          cpu=["aten.mul.Tensor", "aten.view_as_complex.default", "aten.view_as_real.default"])


def test_unlowerable_dtype_is_unsupported():
    """A node reading a complex tensor is not lowerable whatever its op."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    import torch.fx

    from spike_torch.lowering import is_supported_node

    g = torch.fx.Graph()
    a = g.placeholder("a")
    n = g.call_function(torch.ops.aten.mul.Tensor, (a, a))
    with FakeTensorMode() as mode:
        a.meta["val"] = mode.from_tensor(torch.zeros(2, dtype=torch.complex64))
        n.meta["val"] = mode.from_tensor(torch.zeros(2, dtype=torch.complex64))
    assert not is_supported_node(n)
    with FakeTensorMode() as mode:
        a.meta["val"] = mode.from_tensor(torch.zeros(2))
        n.meta["val"] = mode.from_tensor(torch.zeros(2))
    assert is_supported_node(n)


# ---- every new entry has a case here ------------------------------------------------------

ALL_CASES = [
    (special_float, lambda: (rnd(2, 3), rnd(2, 3, seed=1))),
    (special_int, lambda: (ints(2, 3), ints(2, 3, seed=1))),
    (scans, lambda: (rnd(3, 4),)), (logcumsumexp, lambda: (rnd(3, 4),)),
    (order, lambda: (rnd(4, 5),)), (nan_order, lambda: (rnd(4, 5),)),
    (search, lambda: (rnd(3, 6), rnd(3, 4), None)),
    (search_sorter, lambda: (rnd(3, 6), rnd(3, 4), torch.zeros(3, 6, dtype=I64))),
    (diagonals, lambda: (rnd(3, 4, 5), rnd(3, 4))), (strided, lambda: (rnd(4, 6),)),
    (masks, lambda: (rnd(4, 6), rnd(4, 6) > 0, rnd(4, 6))), (shapes, lambda: (rnd(4, 6),)),
    (index_reduce_all, lambda: (rnd(3, 5), torch.tensor([0, 4, 0, 2]), rnd(3, 4))),
    (puts, lambda: (rnd(3, 5), torch.tensor([1, -1, 7]), rnd(3))),
    (distances, lambda: (rnd(2, 4, 3), rnd(2, 5, 3))),
    (cross_products, lambda: (rnd(4, 3), rnd(4, 3, seed=1))),
    (zero_dim_reductions, lambda: (torch.tensor(1.5),)),
    (bessel_and_friends, lambda: (rnd(2, 3),)),
    (scatter_reductions, lambda: (rnd(3, 5), torch.tensor([[0, 4, 0], [1, 1, 3]]), rnd(3, 3))),
    (segments, lambda: (rnd(7, 3), torch.tensor([2, 0, 4, 1]), torch.tensor([0, 3, 3, 7]))),
    (histograms, lambda: (rnd(40),)),
    (products, lambda: (rnd(4, 3), rnd(4, 5), rnd(2, 3, 5), rnd(2))),
    (linalg_small, lambda: (torch.eye(4) * 2, rnd(4, 3), torch.eye(4) * 3)),
]


def _aten_ops(fn, args) -> set:
    from torch._functorch.aot_autograd import aot_function
    from torch_to_nkipy.backend import decompositions

    seen: set = set()

    def grab(gm, _):
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    aot_function(fn, fw_compiler=grab, decompositions=decompositions())(*args)
    return seen


def test_every_aten_math_entry_has_a_case():
    from spike_torch.lowering import aten_math
    from spike_torch.lowering.registry import _REGISTRY

    mine = {n for n, f in _REGISTRY.items() if getattr(f, "__module__", "") == aten_math.__name__}
    seen: set = set()
    for fn, make in ALL_CASES:
        seen |= _aten_ops(fn, make())
    assert sorted(mine - seen - {"aten.diagonal_copy.default"}) == []


def test_integer_inputs_of_floating_ops_and_scaled_products(backend):
    """Floating unary ops on integer tensors compute in float32 (reciprocal of an
    int is not 0), a float base to integer powers is a float power (ldexp with a
    negative exponent), add{mm,mv,bmm} cast float scalars to the integer type on
    integer tensors and ignore the bias when beta is 0 (a NaN in it included)."""
    x = torch.tensor([3, -2, 5, 0, 7])
    m, v = torch.arange(10).reshape(5, 2) - 4, torch.tensor([2, -3])
    f = torch.tensor([1.5, 2.0, -3.0, 0.25, 8.0])
    nan_bias = torch.tensor([float("nan")] * 5)

    def fn(x, m, v, f, nb):
        return (torch.reciprocal(x), 3.5 / x, torch.cos(x), torch.ldexp(f, x),
                torch.addmv(x, m, v, beta=0.2, alpha=1.6), torch.addmv(x, m, v, beta=2, alpha=3),
                torch.addmv(nb, m.float(), v.float(), beta=0.0))

    want = fn(x, m, v, f, nan_bias)
    got = torch.compile(fn, backend="nkipy")(x, m, v, f, nan_bias)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1.3e-6, atol=1e-5, equal_nan=False)
    # the same lowerings serve eager ops on the device
    dev = [t.to("nkipy") for t in (x, m, v, f, nan_bias)]
    for g, w in zip(fn(*dev), want):
        torch.testing.assert_close(g.cpu(), w, rtol=1.3e-6, atol=1e-5, equal_nan=False)
