"""Property-based tests (hypothesis): random shapes, broadcasting, dtypes, indices, axes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from op_cases import OpCase, check_case  # noqa: E402
from nkipy.core.ir import bfloat16  # noqa: E402

DTYPES = [np.dtype(d) for d in ("float32", "float16", "int8", "int16", "int32", "uint8", "bool")] \
    + [bfloat16]
BINARY = [np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.minimum, np.less,
          np.equal, np.logical_and, np.bitwise_xor, np.floor_divide, np.remainder, np.power]


def arrays(dtype: np.dtype, shape) -> st.SearchStrategy:
    if dtype == bfloat16:
        return hnp.arrays(np.float32, shape, elements=st.floats(-8, 8, width=32)).map(
            lambda a: a.astype(bfloat16))
    if dtype.kind == "f":
        return hnp.arrays(dtype, shape, elements=st.floats(-8, 8, width=dtype.itemsize * 8))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return hnp.arrays(dtype, shape, elements=st.integers(max(info.min, -50), min(info.max, 50)))
    return hnp.arrays(dtype, shape)


def run(case: OpCase) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            check_case(case)


@given(data=st.data(), ufunc=st.sampled_from(BINARY), dx=st.sampled_from(DTYPES),
       dy=st.sampled_from(DTYPES),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4))
def test_binary_ufuncs_broadcast_and_promote(data, ufunc, dx, dy, shapes) -> None:
    x = data.draw(arrays(dx, shapes.input_shapes[0]))
    y = data.draw(arrays(dy, shapes.input_shapes[1]))
    if ufunc in (np.true_divide, np.floor_divide, np.remainder):
        y = np.where(y == 0, np.ones((), y.dtype), y)  # no division by zero
    if ufunc is np.power:
        assume(dx.kind == "f" or dx == bfloat16)
        x = np.abs(x) + np.ones((), x.dtype)
        y = np.clip(y, -2, 3).astype(y.dtype) if y.dtype != np.bool_ else y
    if {dx, dy} & {bfloat16} and ufunc in (np.floor_divide, np.remainder, np.power):
        assume(False)  # ml_dtypes computes these via different intermediate roundings
    run(OpCase(f"prop-{ufunc.__name__}", lambda a, b: ufunc(a, b), (x, y), rtol=2e-2, atol=2e-2))


UNARY = [np.negative, np.abs, np.exp, np.sin, np.tanh, np.floor, np.sign, np.square,
         np.logical_not, np.isfinite, np.sqrt, np.log1p]


@given(data=st.data(), ufunc=st.sampled_from(UNARY), dt=st.sampled_from(DTYPES),
       shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
def test_unary_ufuncs(data, ufunc, dt, shape) -> None:
    x = data.draw(arrays(dt, shape))
    if ufunc in (np.sqrt, np.log1p):
        x = np.abs(x)
    run(OpCase(f"prop-{ufunc.__name__}", lambda a: ufunc(a), (x,)))


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5),
       dt=st.sampled_from(DTYPES))
def test_basic_indexing_get_and_set(data, shape, dt) -> None:
    x = data.draw(arrays(dt, shape))
    index = data.draw(hnp.basic_indices(shape, min_dims=0, allow_newaxis=True,
                                        allow_ellipsis=True))
    run(OpCase("prop-getitem", lambda a: a[index], (x,)))

    def setter(a):
        a[index] = a[index] * 2 if dt != np.bool_ else ~a[index]
    run(OpCase("prop-setitem", setter, (x.copy(),)))

    def view_write(a):
        v = a[index]
        v[...] = 1
        return a.sum() if dt != np.bool_ else a.any()
    run(OpCase("prop-view-write", view_write, (x.copy(),)))


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
def test_advanced_indexing(data, shape) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    n_adv = data.draw(st.integers(1, len(shape)))
    positions = sorted(data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=n_adv,
                                          max_size=n_adv, unique=True)))
    bshape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    index = []
    traced = []
    for d in range(len(shape)):
        if d in positions:
            arr = data.draw(hnp.arrays(np.int32, bshape,
                                       elements=st.integers(-shape[d], shape[d] - 1)))
            index.append(arr)
            traced.append(d)
        else:
            index.append(data.draw(st.sampled_from([slice(None), slice(None, None, -1),
                                                    slice(1, None)])))
    arrays_ = [index[d] for d in traced]

    def getter(a, *idx):
        full = list(index)
        for d, i in zip(traced, idx):
            full[d] = i
        return a[tuple(full)]
    run(OpCase("prop-adv-get", getter, (x, *arrays_)))
    static = tuple(index)
    run(OpCase("prop-adv-get-static", lambda a: a[static], (x,)))

    def setter(a, *idx):
        full = list(index)
        for d, i in zip(traced, idx):
            full[d] = i
        uniq = a[tuple(full)]
        a[tuple(full)] = -1.0 + 0 * uniq
    run(OpCase("prop-adv-set", setter, (x.copy(), *arrays_)))


REDUCTIONS = [np.sum, np.max, np.min, np.mean, np.prod, np.any, np.all, np.var]


@given(data=st.data(), fn=st.sampled_from(REDUCTIONS), dt=st.sampled_from(DTYPES),
       shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4),
       keepdims=st.booleans())
def test_reductions_over_random_axes(data, fn, dt, shape, keepdims) -> None:
    assume(not (fn is np.var and dt == np.bool_))
    x = data.draw(arrays(dt, shape))
    if fn is np.prod:
        x = np.clip(x, -2, 2).astype(dt)
    axes = data.draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                                          max_size=len(shape), unique_by=lambda a: a % len(shape))
                     .map(tuple))
    half = dt in (np.float16, bfloat16)

    def kernel(a):
        return fn(a, axis=axes, keepdims=keepdims)

    def ref(a):
        r = fn(a.astype(np.float32) if half else a, axis=axes, keepdims=keepdims)
        return np.asarray(r).astype(dt) if half and fn not in (np.any, np.all) else r
    run(OpCase(f"prop-{fn.__name__}", kernel, (x,), ref=ref, rtol=1e-4 if not half else None,
               atol=1e-4 if not half else None))


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
def test_reshape_transpose_roundtrip(data, shape) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    new_shape = data.draw(st.sampled_from([(-1,), (int(np.prod(shape)), 1), shape[::-1]]))

    def k(a):
        t = a.transpose(perm)
        return t.reshape(new_shape), np.moveaxis(a, 0, -1), np.flip(t, axis=0)
    run(OpCase("prop-layout", k, (x,)))


@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
       dt=st.sampled_from(DTYPES))
def test_concat_stack_split(data, shape, dt) -> None:
    x = data.draw(arrays(dt, shape))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))

    def k(a):
        c = np.concatenate([a, a[::-1]], axis=axis)
        parts = np.array_split(c, 3, axis=axis)
        return c, np.stack(parts[:1] + [a], axis=0), parts
    run(OpCase("prop-concat", k, (x,)))
