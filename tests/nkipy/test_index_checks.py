"""Traced indices out of range fail the kernel's execution with NumPy's
IndexError (spike.NrtIndexError: an IndexError and an NrtError), naming the
first bad value, the axis and its size, where they were clamped before; the
interpreter raises the same. Negative indices count from the end."""
from __future__ import annotations

import numpy as np
import pytest

import spike
from nkipy.core import ops
from nkipy.core.interp import run_graph
from nkipy.core.trace import trace
from nkipy.runtime import baremetal_jit

X = np.arange(49, dtype=np.float32).reshape(7, 7)

KERNELS = {
    "take": lambda x, i: np.take(x, i, axis=1),
    "take_flat": lambda x, i: np.take(x[0], i),
    "take_along_axis": lambda x, i: np.take_along_axis(x, np.broadcast_to(i[None], (7, 3)), 1),
    "getitem_2d": lambda x, i: x[0, i],          # a flat position of 9 would be in range
    "getitem_pair": lambda x, i: x[i, i],
    "setitem": lambda x, i: _set(x, i),
    "put_along_axis": lambda x, i: ops.put_along_axis(x, np.broadcast_to(i[None], (7, 3)),
                                                      1.0, 1),
}


def _set(x, i):
    x[i] = 0.0
    return x


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("bad", [9, -8, 2 ** 31 - 1])
def test_out_of_range_fails_the_execution(name, bad):
    i = np.array([1, bad, 3], dtype=np.int32)
    fn = KERNELS[name]
    with pytest.raises(IndexError):
        fn(X.copy(), i)                              # NumPy
    with pytest.raises(spike.NrtIndexError, match=rf"IndexError: index {bad} is out of bounds "
                                                   rf"for axis \d with size \d+"):
        baremetal_jit(fn, name=f"ic_{name}")(X.copy(), i)
    with pytest.raises(IndexError, match=rf"index {bad} is out of bounds"):
        run_graph(trace(fn, X.copy(), i), X.copy(), i)   # the interpreter too


@pytest.mark.parametrize("name", list(KERNELS))
def test_in_range_and_negative_indices(name):
    i = np.array([1, -1, -7], dtype=np.int32)
    fn = KERNELS[name]
    np.testing.assert_array_equal(baremetal_jit(fn, name=f"ic_{name}")(X.copy(), i),
                                  fn(X.copy(), i))


def test_check_index_on_concrete_and_traced_indices():
    assert ops.check_index(np.array([0, 6]), 0, 7) is not None
    with pytest.raises(IndexError, match="index -1 is out of bounds for axis 2 with size 7"):
        ops.check_index(np.array([-1]), 0, 7, axis=2)
    np.testing.assert_array_equal(ops.check_index(np.array([-1, 3]), -7, 7), [6, 3])

    def k(x, i):
        with ops.op_context("aten.gather"):
            j = ops.check_index(i, 0, 7, axis=0)
        return np.take(x, j, axis=0)
    with pytest.raises(spike.NrtIndexError, match=r"index -2 is out of bounds for axis 0 "
                                                   r"with size 7 \(in aten.gather\)"):
        baremetal_jit(k, name="ic_ctx")(X, np.array([-2], np.int32))
    assert issubclass(spike.NrtIndexError, spike.NrtError)
