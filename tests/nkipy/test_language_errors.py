"""What cannot be traced fails with a clear error naming the problem."""
from __future__ import annotations

import numpy as np
import pytest

import nkipy.core.ops as ops
from nkipy.core.ops import NKIPyUnsupportedError
from nkipy.core.trace import NKIPyTracingError, trace

X = np.arange(6, dtype=np.float32).reshape(2, 3)
I = np.array([0, 1], dtype=np.int32)


@pytest.mark.parametrize("fn,pattern", [
    (lambda x: bool(x), r"bool\(\).*not known while the kernel is traced"),
    (lambda x: x if x.sum() > 0 else -x, r"bool\(\)"),
    (lambda x: x[0, 0] and x, r"bool\(\)"),
    (lambda x: float(x[0, 0]), r"float\(\)"),
    (lambda x: int(x[0, 0]), r"int\(\)"),
    (lambda x: complex(x[0, 0]), r"complex\(\)"),
    (lambda x: list(range(x[0, 0])), r"__index__"),
    (lambda x: [1, 2, 3][x[0, 0].astype(np.int32)], r"__index__"),
    (lambda x: x.item(), r"\.item\(\)"),
    (lambda x: x.tolist(), r"\.tolist\(\)"),
    (lambda x: np.asarray(x), r"cannot be converted to a NumPy array"),
    (lambda x: np.array(x), r"cannot be converted to a NumPy array"),
])
def test_data_dependent_python_is_rejected(fn, pattern) -> None:
    with pytest.raises(NKIPyTracingError, match=pattern):
        trace(fn, X)
    assert issubclass(NKIPyTracingError, TypeError)


def test_writing_a_tracer_into_a_numpy_array() -> None:
    def k(x):
        out = np.zeros((2, 3), np.float32)
        out[0] = x[0]
        return out

    with pytest.raises(NKIPyTracingError, match=r"np\.zeros_like\(x\)"):
        trace(k, X)


@pytest.mark.parametrize("fn,pattern", [
    (lambda x: x[x > 2], r"traced boolean mask.*data-dependent shape.*np\.where"),
    (lambda x: np.where(x > 2), r"one argument.*data-dependent"),
    (lambda x: np.nonzero(x), r"np\.nonzero has a data-dependent"),
    (lambda x: x.nonzero(), r"nonzero\(\) has a data-dependent"),
    (lambda x: np.unique(x), r"np\.unique"),
    (lambda x: np.argwhere(x), r"np\.argwhere"),
    (lambda x: np.allclose(x, x), r"np\.allclose"),
    (lambda x: x[: x[0, 0]], r"slice bounds must be static"),
    (lambda x: np.repeat(x, x[0].astype(np.int32), axis=1), r"traced repeat counts"),
    (lambda x: np.copyto(np.zeros((2, 3)), x), r"destination must be a traced tensor"),
    (lambda x: np.exp(x, out=np.zeros((2, 3), np.float32)), r"out= must be a traced tensor"),
])
def test_data_dependent_shapes_are_rejected(fn, pattern) -> None:
    with pytest.raises(NKIPyTracingError, match=pattern):
        trace(fn, X)


@pytest.mark.parametrize("fn,pattern", [
    (lambda x: np.sort(x), r"np\.sort is not supported.*topk"),
    (lambda x: np.argsort(x), r"np\.argsort is not supported"),
    (lambda x: x.sort(), r"sort is not supported"),
    (lambda x: np.einsum("ij->ji", x), r"np\.einsum is not supported"),
    (lambda x: np.convolve(x[0], x[1]), r"np\.convolve is not supported in nkipy kernels"),
    (lambda x: np.linalg.inv(x[:, :2]), r"np\.linalg\.inv is not supported"),
    (lambda x: np.fft.fft(x), r"fft is not supported"),
    (lambda x: np.cbrt(x), r"np\.cbrt is not supported"),
    (lambda x: np.left_shift(x.astype(np.int32), 1), r"np\.left_shift is not supported"),
    (lambda x: x.astype(np.int32) << 1, r"the << operator"),
    (lambda x: x.astype(np.int32) >> 1, r"the >> operator"),
    (lambda x: np.multiply.at(x, [0], 2), r"np\.multiply\.at is not supported"),
    (lambda x: np.sum(x, where=x > 1), r"sum\(where=\.\.\.\) is not supported"),
    (lambda x: np.exp(x, where=x > 1), r"np\.exp\(where=\.\.\.\) is not supported"),
    (lambda x: np.linalg.norm(x, ord=2), r"norm\(ord=2\) of a matrix"),
    (lambda x: x.view(np.int32), r"view\(\).*not supported"),
    (lambda x: x.reshape(3, 2, order="F"), r"reshape\(order='F'\)"),
    (lambda x: np.pad(x, 1, mode="linear_ramp"), r"np\.pad\(mode='linear_ramp'\)"),
    (lambda x: np.round(x.astype(np.int32), -1), r"negative decimals"),
    (lambda x: ops.arange(x[0, 0]), r"arange with traced bounds"),
    (lambda x: np.roll(x, x[0, 0].astype(np.int32)), r"np\.roll with a traced shift"),
])
def test_unsupported_features_name_themselves(fn, pattern) -> None:
    with pytest.raises(NKIPyUnsupportedError, match=pattern) as info:
        trace(fn, X)
    assert "docs/nkipy-ops.md" in str(info.value)
    assert issubclass(NKIPyUnsupportedError, NotImplementedError)


def test_unsupported_mask_combinations() -> None:
    def k(x):
        x[x[:, 0] > 0, 1] = 0

    with pytest.raises(NKIPyUnsupportedError, match="boolean mask combined with other indices"):
        trace(k, X)

    def k2(x):
        x[x > 0] = x[x > 0] * 2

    with pytest.raises(NKIPyTracingError, match="boolean mask"):
        trace(k2, X)


def test_tracer_used_after_its_trace() -> None:
    saved = []

    def k(x):
        saved.append(x)
        return x + 1

    trace(k, X)
    with pytest.raises(NKIPyTracingError, match="trace finished"):
        saved[0] + 1
    with pytest.raises(NKIPyTracingError, match="finished"):
        np.exp(saved[0])
    with pytest.raises(NKIPyTracingError, match="finished"):
        trace(lambda y: y + saved[0], X)


def test_unsupported_dtypes_inside_kernels() -> None:
    with pytest.raises(TypeError, match="complex"):
        trace(lambda x: x + 1j, X)
    with pytest.raises(TypeError, match="do not support dtype"):
        trace(lambda x: x.astype(np.complex64), X)
    with pytest.raises(TypeError, match="U1"):
        trace(lambda x: x + np.array(["a"]), X)


def test_operator_with_foreign_types_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        trace(lambda x: x + "s", X)
    with pytest.raises(TypeError):
        trace(lambda x: x * {}, X)


def test_index_errors_are_numpy_like() -> None:
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0 with size 2"):
        trace(lambda x: x[2], X)
    with pytest.raises(IndexError, match="too many indices"):
        trace(lambda x: x[0, 0, 0], X)
    with pytest.raises(IndexError, match="single ellipsis"):
        trace(lambda x: x[..., ...], X)
    with pytest.raises(IndexError, match="integer"):
        trace(lambda x, i: x[i.astype(np.float32)], X, I)
    with pytest.raises(IndexError, match="boolean index did not match"):
        trace(lambda x: x[np.array([True, False, True])], X)
    with pytest.raises(NKIPyUnsupportedError, match="bool scalar"):
        trace(lambda x: x[True], X)


def test_shape_errors_are_numpy_like() -> None:
    with pytest.raises(ValueError, match="could not be broadcast"):
        trace(lambda x: x + np.ones(4, np.float32), X)
    with pytest.raises(ValueError, match="cannot reshape array of size 6 into shape"):
        trace(lambda x: x.reshape(4, -1), X)
    with pytest.raises(ValueError, match="could not broadcast input array"):
        trace(lambda x: x.__setitem__(0, np.ones(2, np.float32)), X)
    with pytest.raises(ValueError, match="read-only"):
        trace(lambda x: np.broadcast_to(x, (2, 2, 3)).__setitem__(0, 1), X)
    with pytest.raises(np.exceptions.AxisError):
        trace(lambda x: x.sum(axis=2), X)
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        trace(lambda x: x.sum(axis=(0, 0)), X)
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        trace(lambda x: len(x.sum()), X)
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        trace(lambda x: list(x.sum()), X)


def test_inplace_casting_errors() -> None:
    def k(x):
        x += 1.5

    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float32'\\) "
                                        "to dtype\\('int32'\\)"):
        trace(k, I)
    with pytest.raises(TypeError, match="according to the rule 'same_kind'"):
        trace(lambda x: np.copyto(x, np.float32(1.5)), I)
    with pytest.raises(OverflowError, match="Python integer 300 out of bounds for int8"):
        trace(lambda x: x * 300, I.astype(np.int8))


def test_collective_argument_errors() -> None:
    from nkipy.distributed import collectives as cc
    with pytest.raises(ValueError, match="same size"):
        trace(lambda x: cc.all_reduce(x, replica_groups=[[0, 1], [2]]), X)
    with pytest.raises(ValueError, match="distinct"):
        trace(lambda x: cc.all_reduce(x, replica_groups=[[0, 0]]), X)
    with pytest.raises(ValueError, match="unsupported reduce_op"):
        trace(lambda x: cc.all_reduce(x, replica_groups=[[0]], reduce_op=np.subtract), X)
    with pytest.raises(ValueError, match="not divisible"):
        trace(lambda x: cc.all_to_all(x, 1, 0, replica_groups=[[0, 1]]), X)


def test_nkipy_op_argument_errors() -> None:
    with pytest.raises(ValueError, match="k=4 must be between 0 and the size of axis 1"):
        trace(lambda x: ops.topk(x, 4, axis=1), X)
    with pytest.raises(ValueError, match="stride and dilation must be positive"):
        trace(lambda x: ops.conv2d(x[None, None], x[None, None, :, :2], stride=0), X)
    with pytest.raises(ValueError, match="padding must be an int or a tuple of 2 ints"):
        trace(lambda x: ops.conv2d(x[None, None], x[None, None, :, :2], padding=(1, 2, 3)), X)
    with pytest.raises(ValueError, match="bias must have shape"):
        trace(lambda x: ops.conv2d(x[None, None], x[None, None, :, :2], x[0]), X)
    with pytest.raises(ValueError, match="update shape .* does not fit"):
        trace(lambda x: ops.dynamic_update_slice(x, np.ones((3, 3), np.float32), [0, 0]), X)
    with pytest.raises(ValueError, match="one start index per dimension"):
        trace(lambda x: ops.dynamic_update_slice(x, x[:1], [0]), X)
    with pytest.raises(ValueError, match="one start/limit/stride per dimension"):
        trace(lambda x: ops.static_slice(x, [0], [1]), X)


def test_arange_past_int32_needs_a_64_bit_dtype() -> None:
    """An integer arange whose values or indices leave int32 is an int64 iota
    under wide dtypes (exact, run by the interpreter), and refused when the
    kernel dtype is 32-bit rather than wrapping silently."""
    import nkipy.core.ops as ops
    from nkipy.core.dtypes import wide_dtypes
    from nkipy.core.interp import run_graph
    from nkipy.core.trace import trace

    def k(x):
        return x + ops.arange(2 ** 31 - 2, 2 ** 31 + 2, dtype=np.int64)

    x = np.zeros(4, np.int64)
    with wide_dtypes():
        g = trace(k, x)
    np.testing.assert_array_equal(run_graph(g, x)[0], np.arange(2 ** 31 - 2, 2 ** 31 + 2))
    with pytest.raises(ValueError, match=r"values or indices outside int32 need a 64-bit dtype"):
        trace(lambda y: y + ops.arange(2 ** 31 - 2, 2 ** 31 + 2), np.zeros(4, np.int32))


def test_arange_of_integer_bounds_in_a_float_dtype_has_every_value() -> None:
    """arange(0, 7, 1, dtype=float32) is all seven values (sizing the range
    without materialising it once left a float range of one element)."""
    import nkipy.core.ops as ops
    from nkipy.core.interp import run_graph
    from nkipy.core.trace import trace

    for args in ((0, 7, 1), (5, -4, -3), (3,)):
        g = trace(lambda x: x + ops.arange(*args, dtype=np.float32), np.zeros((), np.float32))
        np.testing.assert_array_equal(run_graph(g, np.zeros((), np.float32))[0],
                                      np.arange(*args, dtype=np.float32))


def test_fail_if_fails_with_its_message() -> None:
    """ops.fail_if: x unchanged while the condition is false; its message as a
    RuntimeError on NumPy arrays and from run_graph when it holds anywhere."""
    from nkipy.core.interp import run_graph

    def k(x):
        return ops.fail_if(x + 1.0, np.max(x, axis=-1, keepdims=True) > 4.0, "check: x too large")

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(k(x - 6), x - 5)
    with pytest.raises(RuntimeError, match="check: x too large"):
        k(x)
    g = trace(k, x)
    assert [n.op for n in g.nodes].count("fail_if") == 1
    np.testing.assert_array_equal(run_graph(g, x - 6)[0], x - 5)
    with pytest.raises(RuntimeError, match="check: x too large"):
        run_graph(g, x)
    with pytest.raises(ValueError, match="does not broadcast to"):
        trace(lambda y: ops.fail_if(y[:1], y > 0, "m"), x)
