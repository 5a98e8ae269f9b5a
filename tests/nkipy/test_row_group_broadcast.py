"""A last-axis reduction's row group reads a value of shape S[:-1] in two ways:
once per row (a reduction's own result, or a keepdims value) or, read by a
full-row operation with NumPy broadcasting, along the row (aligned to the
trailing axes). Taking the second for the first gave half-precision
matrix-vector products that were off by ~20 (the cast of the vector was
hoisted as a per-row scalar)."""
from __future__ import annotations

import numpy as np
import pytest

from nkipy.runtime import baremetal_jit
from op_cases import run_kernel

RNG = np.random.default_rng(7)


def _cast_mul_sum(a, b):          # torch's decomposition of a half mv
    return (a.astype(np.float32) * b.astype(np.float32)).sum(axis=-1).astype(a.dtype)


def _mixed(a, b):                 # per-row and along-the-row uses of (n,) values together
    r = (a * np.exp(b)).sum(axis=-1)          # b along the row
    return (a - r[..., None]) * (b + 1.0)     # r per row, b along the row again


def _keepdims(a, b):
    m = a.max(axis=-1, keepdims=True)
    return (np.exp(a - m) * b).sum(axis=-1) / np.exp(a - m).sum(axis=-1)


@pytest.mark.parametrize("n", [1, 4, 33, 64])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_cast_then_broadcast_in_a_row_reduction(n, dtype):
    a = RNG.standard_normal((n, n)).astype(dtype)
    b = RNG.standard_normal(n).astype(dtype)
    got = baremetal_jit(_cast_mul_sum, name="rg_mv")(a, b)
    want = _cast_mul_sum(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), want, atol=2e-3 * n, rtol=2e-2)


@pytest.mark.parametrize("fn", [_mixed, _keepdims], ids=["mixed", "keepdims"])
@pytest.mark.parametrize("shape", [(5, 5), (3, 3, 3)])
def test_per_row_and_along_the_row_reads(fn, shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape[1:]).astype(np.float32)
    got = baremetal_jit(fn, name=f"rg_{fn.__name__}")(a, b)
    np.testing.assert_allclose(got, fn(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)


# A member of a row group may read an earlier member's result only at the row
# the group is computing (RowGroups.reads_own_row); other reads are emitted
# after the group. Both of these were silently wrong (found by the
# differential fuzzer, tests/difffuzz).

def _reduction_along_the_row(a, b):   # torch: a.sum(-1) + b, b of shape (N, 1)
    return a.sum(axis=-1) + b


def _flipped_rows(a, b):              # torch: y - y.sum(1, keepdim=True), y = flip(a * b, 0)
    y = np.flip(a * b, axis=0)
    return y - y.sum(axis=-1, keepdims=True)


def _shifted_rows(a, b):              # a member read one row further on
    y = a * b
    s = y.sum(axis=-1, keepdims=True)
    return y[1:] - s[:-1]


def _flipped_softmax(a, b):           # log_softmax of a flipped product
    y = np.flip(a * b, axis=0)
    m = y.max(axis=-1, keepdims=True)
    return y - m - np.log(np.exp(y - m).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("fn", [_reduction_along_the_row, _flipped_rows, _shifted_rows,
                                _flipped_softmax])
@pytest.mark.parametrize("n", [2, 5, 17])
def test_members_read_only_their_own_row(fn, n):
    a = RNG.standard_normal((n, n)).astype(np.float32)
    b = RNG.standard_normal((n, 1) if fn is _reduction_along_the_row else (n,)).astype(
        np.float32)
    if fn in (_flipped_rows, _shifted_rows, _flipped_softmax):
        a = a[:, :1]                  # (n, 1) * (n,): an outer product
    got = baremetal_jit(fn, name=f"rg_{fn.__name__}")(a, b)
    np.testing.assert_allclose(got, fn(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-4, atol=1e-4)


def test_reads_of_other_rows_leave_the_group_but_softmax_still_fuses(tmp_path):
    n = 8
    a = RNG.standard_normal((n, 1)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    k, (out,) = run_kernel(_flipped_softmax, a, b, cache_dir=str(tmp_path), name="rg_flip_sm")
    np.testing.assert_allclose(out, _flipped_softmax(a, b), rtol=1e-5, atol=1e-5)
    # the product is computed before the group; max, exp-sum and the result
    # fuse into one pass over the rows
    assert k.c_source.count("static void rows") == 1
