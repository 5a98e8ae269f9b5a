"""Property-based tests (hypothesis) of layouts in COMPILED kernels, against NumPy.

The kernel's input is a contiguous array; inside the kernel it is viewed
through a chain that the generated C must index correctly: a permutation
(transpose), step slices (negative steps included), ranges (possibly empty),
a broadcast to a new leading axis, and 0-d / zero-size shapes. On such views
the tests run reductions (sum/max/mean over one axis, over axis tuples in any
order, over all axes, with and without keepdims), elementwise chains of two
views that broadcast against each other, basic and advanced indexing, and
matmul. Every case is traced, compiled to C, run on the device and compared
with NumPy on the same view.

Each distinct kernel costs a C compile (~0.5 s on a loaded 2-core machine),
so the examples per test are bounded and derandomized (CI is deterministic);
kernels share a module-wide compile cache. Values are small integers held in
float32, so sums and maxima are exact and a wrong element (a misplaced stride)
cannot hide under a tolerance; the tolerance only covers mean's division and
the order of float additions."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nkipy.runtime import DeviceKernel, DeviceTensor  # noqa: E402

_SETTINGS = dict(deadline=None, derandomize=True, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("layout_cache"))


def run_compiled(fn, *arrays, cache_dir: str) -> list:
    kernel = DeviceKernel.compile_and_load(fn, *arrays, build_dir=cache_dir)
    names = [v.name for v in kernel.graph.inputs]
    outs = kernel(inputs={n: DeviceTensor.from_numpy(np.require(a, requirements="C"))
                          for n, a in zip(names, arrays)})
    return [outs[n].numpy() for n in kernel.graph.output_names]


def check(fn, *arrays, cache_dir: str, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """``fn`` compiled and run on the device equals ``fn`` run by NumPy
    (shape, dtype and values; NaN where NumPy gives NaN)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        expected = fn(*arrays)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    got = run_compiled(fn, *arrays, cache_dir=cache_dir)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.shape == e.shape, f"shape {g.shape} != NumPy's {e.shape}"
        assert g.dtype == e.dtype, f"dtype {g.dtype} != NumPy's {e.dtype}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)


def ints(shape, seed: int, dtype=np.float32, lo: int = -4, hi: int = 5) -> np.ndarray:
    """Small integers (exact in float32 sums) of ``shape``."""
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


# ---- views -------------------------------------------------------------------

@dataclass(frozen=True)
class View:
    """A chain applied inside the kernel: transpose(perm), then a basic slice
    per axis, then (optionally) a broadcast to a new leading axis of size 2."""
    shape: Tuple[int, ...]       # the kernel input's (contiguous) shape
    perm: Tuple[int, ...]
    slices: Tuple[slice, ...]
    bcast: bool = False

    def __call__(self, a: Any) -> Any:
        v = a.transpose(self.perm) if len(self.perm) > 1 else a
        if self.slices:
            v = v[self.slices]
        if self.bcast:
            v = np.broadcast_to(v, (2,) + tuple(v.shape))
        return v

    @property
    def out_shape(self) -> Tuple[int, ...]:
        return self(np.empty(self.shape, np.float32)).shape


def _slice_for(draw, n: int) -> slice:
    kind = draw(st.sampled_from(["all", "all", "step", "range", "reverse", "rstep", "empty"]))
    if kind == "all":
        return slice(None)
    if kind == "step":
        return slice(draw(st.integers(0, max(n - 1, 0))), None, draw(st.integers(2, 3)))
    if kind == "range":
        lo = draw(st.integers(0, n))
        return slice(lo, draw(st.integers(lo, n)))
    if kind == "reverse":
        return slice(None, None, -1)
    if kind == "rstep":
        return slice(None, None, -2)
    return slice(1, 1)   # zero-size along this axis


@st.composite
def views(draw, min_dims: int = 0, max_dims: int = 4, allow_bcast: bool = True,
          allow_empty: bool = True) -> View:
    ndim = draw(st.integers(min_dims, max_dims))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    perm = tuple(draw(st.permutations(range(ndim))))
    slices = []
    for d in range(ndim):
        s = _slice_for(draw, shape[perm[d]])
        if not allow_empty and len(range(*s.indices(shape[perm[d]]))) == 0:
            s = slice(None)
        slices.append(s)
    bcast = allow_bcast and draw(st.integers(0, 3)) == 0
    return View(shape, perm, tuple(slices), bcast)


@st.composite
def axes_for(draw, ndim: int) -> Optional[Any]:
    """None, one axis (possibly negative), or a tuple of axes in any order."""
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    kind = draw(st.sampled_from(["none", "one", "tuple", "tuple"]))
    if kind == "none":
        return None
    if kind == "one":
        return draw(st.integers(-ndim, ndim - 1))
    ax = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(a - ndim if draw(st.booleans()) else a for a in ax)


def _reduced_sizes(shape, axis) -> list:
    if axis is None:
        return list(shape)
    ax = (axis,) if isinstance(axis, int) else axis
    return [shape[a] for a in ax]


# ---- reductions --------------------------------------------------------------

REDUCTIONS = {"sum": np.sum, "max": np.max, "mean": np.mean}


@settings(max_examples=26, **_SETTINGS)
@given(view=views(), red=st.sampled_from(sorted(REDUCTIONS)), data=st.data(),
       keepdims=st.booleans(), seed=st.integers(0, 3))
@example(view=View((3, 4, 5), (0, 2, 1), (slice(None),) * 3), red="sum", data=None,
         keepdims=False, seed=0)  # the np.sum(x.transpose(0, 2, 1), axis=(1, 2))
def test_reduction_over_views(view, red, data, keepdims, seed, cache) -> None:
    shape = view.out_shape
    axis = (1, 2) if data is None else data.draw(axes_for(len(shape)))
    if red == "max" and 0 in _reduced_sizes(shape, axis):
        return  # NumPy refuses: a maximum of nothing has no identity
    fn = REDUCTIONS[red]
    check(lambda a: fn(view(a), axis=axis, keepdims=keepdims), ints(view.shape, seed),
          cache_dir=cache)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 1, 7), (4, 6, 2)])
@pytest.mark.parametrize("red", sorted(REDUCTIONS))
def test_multi_axis_reduction_of_transposed_input(shape, red, cache) -> None:
    """The issue's example, as fixed cases: the reduced axes of a transposed
    view are not contiguous in memory and must not be collapsed into one loop."""
    fn = REDUCTIONS[red]
    x = ints(shape, 5)
    check(lambda a: fn(a.transpose(0, 2, 1), axis=(1, 2)), x, cache_dir=cache)
    check(lambda a: fn(a.transpose(2, 0, 1), axis=(0, 1)), x, cache_dir=cache)


# ---- elementwise chains ------------------------------------------------------

@st.composite
def broadcastable_views(draw) -> Tuple[View, View]:
    """Two views whose shapes broadcast: the second's view shape is a suffix
    of the first's with some axes set to 1 (by a range slice of length 1)."""
    a = draw(views(max_dims=3))
    target = a.out_shape
    k = draw(st.integers(0, len(target)))
    suffix = target[len(target) - k:]
    # a contiguous input of the suffix shape (1s kept), transposed and
    # transposed back, so its view is strided but equal in shape to suffix
    sub = tuple(1 if (s > 1 and draw(st.integers(0, 3)) == 0) else s for s in suffix)
    perm = tuple(draw(st.permutations(range(len(sub)))))
    # View applies transpose(perm) to an input of shape base: base[perm] == sub
    base = tuple(np.empty(sub).transpose(np.argsort(perm)).shape) if sub else ()
    b = View(base, perm, (), False)
    return a, b


CHAINS = {
    "affine": lambda x, y: x * 2.0 - y + 1.0,
    "exp_abs": lambda x, y: np.exp(-np.abs(x)) * y,
    "max_where": lambda x, y: np.where(x > y, np.maximum(x, y), x - y),
    "square_sum": lambda x, y: np.square(x + y) - x * y,
}


@settings(max_examples=14, **_SETTINGS)
@given(pair=broadcastable_views(), chain=st.sampled_from(sorted(CHAINS)), seed=st.integers(0, 3))
def test_elementwise_chain_over_views(pair, chain, seed, cache) -> None:
    va, vb = pair
    f = CHAINS[chain]
    check(lambda a, b: f(va(a), vb(b)), ints(va.shape, seed), ints(vb.shape, seed + 1),
          cache_dir=cache, rtol=1e-5, atol=1e-5)


# ---- indexing ----------------------------------------------------------------

@settings(max_examples=12, **_SETTINGS)
@given(view=views(min_dims=1, allow_bcast=False), data=st.data(), seed=st.integers(0, 3))
def test_basic_indexing_of_views(view, data, seed, cache) -> None:
    from hypothesis.extra import numpy as hnp

    index = data.draw(hnp.basic_indices(view.out_shape, min_dims=0, allow_newaxis=True,
                                        allow_ellipsis=True))
    check(lambda a: view(a)[index] + 0.0, ints(view.shape, seed), cache_dir=cache)


@settings(max_examples=10, **_SETTINGS)
@given(view=views(min_dims=1, max_dims=3, allow_bcast=False, allow_empty=False), data=st.data(),
       seed=st.integers(0, 3), as_input=st.booleans())
def test_advanced_indexing_of_views(view, data, seed, as_input, cache) -> None:
    shape = view.out_shape
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=4)),
                   dtype=np.int32)
    lead = (slice(None),) * axis
    x = ints(view.shape, seed)
    if as_input:
        check(lambda a, i: view(a)[lead + (i,)], x, idx, cache_dir=cache)
    else:
        check(lambda a: view(a)[lead + (idx,)], x, cache_dir=cache)


# ---- matmul ------------------------------------------------------------------

@st.composite
def matmul_operands(draw):
    """(a, b) views with a.shape[-1] == b.shape[-2], batch dims broadcasting."""
    m, k, n = (draw(st.integers(1, 5)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    b_batch = batch if draw(st.booleans()) else ()

    def operand(rows: int, cols: int, lead: tuple) -> View:
        trans = draw(st.booleans())
        step = draw(st.sampled_from([1, 1, 2]))
        # the stored input holds step * rows rows (every step-th taken), maybe transposed
        core = (rows * step, cols)
        nd = len(lead) + 2
        if trans:
            shape = lead + (core[1], core[0])
            perm = tuple(range(len(lead))) + (nd - 1, nd - 2)
        else:
            shape, perm = lead + core, tuple(range(nd))
        slices = (slice(None),) * len(lead) + (slice(None, None, step), slice(None))
        return View(shape, perm, slices)

    return operand(m, k, batch), operand(k, n, b_batch)


@settings(max_examples=10, **_SETTINGS)
@given(ops=matmul_operands(), seed=st.integers(0, 3))
def test_matmul_of_views(ops, seed, cache) -> None:
    va, vb = ops
    check(lambda a, b: va(a) @ vb(b), ints(va.shape, seed), ints(vb.shape, seed + 1),
          cache_dir=cache, rtol=1e-5, atol=1e-4)


# ---- 0-d and zero-size -------------------------------------------------------

@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 4, 2)])
def test_zero_size_and_0d_chains(shape, cache) -> None:
    x = ints(shape, 3)
    check(lambda a: (np.sum(a * 2.0 + 1.0), np.max(a.T + 1.0, axis=None) if a.size else a.T,
                     np.mean(np.abs(a), axis=() if a.ndim == 0 else 0)), x, cache_dir=cache)
