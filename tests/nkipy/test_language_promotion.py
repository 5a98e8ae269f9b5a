"""Type promotion: NumPy 2 rules (weak Python scalars), results narrowed to 32 bits,
and the two deliberate bfloat16 deviations."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import nkipy.core.ops as ops
from nkipy.core import dtypes as D
from nkipy.core.ir import bfloat16 as BF16
from nkipy.core.trace import trace

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
I8, I16, I32 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32)
U8, U16, U32 = np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32)
B = np.dtype(bool)
DTYPES = [F32, F16, BF16, I8, I16, I32, U8, U16, U32, B]


def out_dtype(fn, *arrays) -> np.dtype:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace(fn, *arrays).outputs[0].dtype


def arr(dt) -> np.ndarray:
    return np.ones((2,), dtype=dt)


@pytest.mark.parametrize("fn,dt,expected", [
    # weak Python scalars take the array's kind
    (lambda x: x + 1, I8, I8), (lambda x: x + 1.5, I8, F32), (lambda x: x * 2.0, F16, F16),
    (lambda x: x + 1, B, I32), (lambda x: x + 1.5, B, F32), (lambda x: x + True, B, B),
    (lambda x: x - 1, U8, U8), (lambda x: 2 ** x, U16, U16), (lambda x: x * 0.5, BF16, BF16),
    (lambda x: x + 1, BF16, BF16), (lambda x: x > 1000, I8, B), (lambda x: x < -1, U8, B),
    # NumPy scalars and 0-d arrays are strong (then narrowed)
    (lambda x: x * np.float64(2), F16, F32), (lambda x: x + np.int64(1), I8, I32),
    (lambda x: x + np.float32(1), BF16, F32), (lambda x: x + np.int8(1), U8, I16),
    (lambda x: x + np.array(2.0), F16, F32),
    # division and float functions
    (lambda x: x / x, I8, F32), (lambda x: x / 2, I32, F32), (lambda x: x / x, B, F32),
    (lambda x: x // x, I8, I8), (lambda x: x % 3, U8, U8), (lambda x: np.exp(x), I8, F16),
    (lambda x: np.exp(x), I16, F32), (lambda x: np.exp(x), I32, F32), (lambda x: np.exp(x), B, F16),
    (lambda x: np.sqrt(x), U8, F16), (lambda x: np.rint(x), I8, F16),
    (lambda x: np.floor(x), I8, I8), (lambda x: np.abs(x), B, B), (lambda x: np.square(x), B, I8),
    (lambda x: ops.sigmoid(x), I32, F32), (lambda x: ops.softmax(x), I8, F16),
    # reductions
    (lambda x: x.sum(), I8, I32), (lambda x: x.sum(), U8, U32), (lambda x: x.sum(), B, I32),
    (lambda x: x.sum(), F16, F16), (lambda x: x.prod(), I16, I32), (lambda x: x.max(), I8, I8),
    (lambda x: x.max(), B, B), (lambda x: x.mean(), I8, F32), (lambda x: x.mean(), F16, F16),
    (lambda x: x.mean(), BF16, BF16), (lambda x: x.var(), I32, F32), (lambda x: x.argmax(), F32, I32),
    (lambda x: np.cumsum(x), B, I32), (lambda x: np.count_nonzero(x), F32, I32),
    (lambda x: np.linalg.norm(x), I8, F32), (lambda x: np.linalg.norm(x), F16, F16),
    (lambda x: np.linalg.norm(x), BF16, F32), (lambda x: x.any(), F32, B),
    # matrix products: bf16 @ bf16 stays bf16 (NumPy/ml_dtypes: float32)
    (lambda x: x[:, None] @ x[None], BF16, BF16), (lambda x: x[:, None] @ x[None], I8, I8),
    (lambda x: x[:, None] @ x[None], B, B), (lambda x: np.dot(x, x), F16, F16),
    # casts narrow
    (lambda x: x.astype(np.float64), I8, F32), (lambda x: x.astype(np.uint64), F32, U32),
    (lambda x: x.astype(int), F32, I32), (lambda x: x.astype(float), I8, F32),
    (lambda x: x.astype("bfloat16"), F32, BF16),
    # creation from scalars
    (lambda x: ops.full((2,), 1.5), F32, F32), (lambda x: ops.full((2,), 3), F32, I32),
    (lambda x: np.full_like(x, 2.5), I8, I8), (lambda x: np.where(x > 0, 1, 0), F32, I32),
    (lambda x: np.where(x > 0, x, 0.5), F16, F16), (lambda x: np.where(x > 0, x, 0.5), BF16, BF16),
    (lambda x: np.clip(x, 0, 1), I8, I8), (lambda x: np.clip(x, 0.5, 1), I8, F32),
    (lambda x: np.concatenate([x, np.zeros(2, np.int8)]), U8, I16),
])
def test_result_dtype(fn, dt, expected) -> None:
    assert out_dtype(fn, arr(dt)) == np.dtype(expected)


@pytest.mark.parametrize("dx,dy", list(itertools.product(DTYPES, repeat=2)))
def test_binary_promotion_matches_numpy_narrowed(dx, dy) -> None:
    for ufunc in (np.add, np.multiply, np.true_divide, np.maximum, np.equal):
        try:
            with np.errstate(all="ignore"):
                expected = ufunc(arr(dx), arr(dy)).dtype
        except TypeError:
            with pytest.raises(TypeError):
                trace(lambda x, y: ufunc(x, y), arr(dx), arr(dy))
            continue
        got = out_dtype(lambda x, y: ufunc(x, y), arr(dx), arr(dy))
        assert got == D.narrow(expected), (ufunc.__name__, dx, dy, got, expected)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("scalar", [0, 7, -1, 2.5, True, 300, np.float16(1), np.uint8(3)])
def test_scalar_promotion_matches_numpy_narrowed(dt, scalar) -> None:
    for op in (lambda x, s=scalar: x + s, lambda x, s=scalar: s * x, lambda x, s=scalar: x > s):
        try:
            with np.errstate(all="ignore"):
                expected = op(arr(dt)).dtype
        except (TypeError, OverflowError) as exc:
            with pytest.raises(type(exc) if isinstance(exc, OverflowError) else TypeError):
                trace(op, arr(dt))
            continue
        got = out_dtype(op, arr(dt))
        if dt == BF16 and isinstance(scalar, float) and not isinstance(scalar, np.generic) \
                and expected != np.bool_:
            assert got == BF16  # deliberate: bfloat16 op python float stays bfloat16
        else:
            assert got == D.narrow(expected), (dt, scalar, got, expected)


def test_result_type_helper() -> None:
    assert D.result_type(I8, 1) == I8
    assert D.result_type(I8, 1.0) == F32
    assert D.result_type(BF16, F16) == F32
    assert D.result_type(BF16, I32) == F32
    assert D.result_type(U32, I32) == I32  # int64 narrowed
    assert D.result_type(np.float64) == F32
    assert D.result_type(np.float64, narrow_result=False) == np.float64
    with pytest.raises(OverflowError):
        D.result_type(I8, 1000)
    with pytest.raises(TypeError):
        D.dtype_key(1j)


def test_same_kind_casting_rule() -> None:
    assert D.can_cast_same_kind(F32, F16) and D.can_cast_same_kind(F16, BF16)
    assert D.can_cast_same_kind(I32, I8) and D.can_cast_same_kind(B, BF16)
    assert not D.can_cast_same_kind(F32, I32) and not D.can_cast_same_kind(BF16, I8)
    assert not D.can_cast_same_kind(I8, B)


def test_sanitize_and_check_supported() -> None:
    x = np.zeros(2, np.int64)
    with pytest.warns(UserWarning, match="'w'"):
        assert D.sanitize_array(x, "w").dtype == I32
    y = np.zeros(2, np.float32)
    assert D.sanitize_array(y) is y
    assert D.check_supported(np.float64) == F32
    with pytest.raises(TypeError, match="supported dtypes: float32, float16"):
        D.check_supported(np.complex64)
