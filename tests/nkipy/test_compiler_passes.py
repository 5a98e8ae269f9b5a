"""The compiler's graph passes (nkipy/compiler/passes.py) on graphs built
directly: which no-op nodes simplify removes and which it keeps, and the
size limit of constant folding. Written to kill mutants that `make mutation`
found surviving (a simplify that removed nothing, a FOLD_LIMIT off by a
factor of two passed every other test)."""
from __future__ import annotations

import numpy as np
import pytest

from nkipy.compiler import passes
from nkipy.core import ops
from nkipy.core.ir import Graph
from nkipy.core.trace import trace

F32 = np.dtype(np.float32)


def _graph_with(op: str, attrs: dict, out_shape, out_dtype=F32, in_shape=(3, 4)):
    g = Graph("passes")
    x = g.add_input("x", in_shape, F32)
    n = g.add(op, [x], attrs, [(out_shape, out_dtype)])
    y = g.add("exp", [n.output], {}, [(out_shape, out_dtype)])
    g.outputs = [y.output]
    g.output_names = ["output0"]
    return g, x, n


NOOPS = [
    ("cast", {"dtype": F32}, (3, 4)),
    ("reshape", {"shape": (3, 4)}, (3, 4)),
    ("broadcast_to", {"shape": (3, 4)}, (3, 4)),
    ("transpose", {"perm": (0, 1)}, (3, 4)),
    ("slice", {"starts": (0, 0), "stops": (3, 4), "steps": (1, 1)}, (3, 4)),
]


@pytest.mark.parametrize("op,attrs,shape", NOOPS, ids=[n[0] for n in NOOPS])
def test_simplify_removes_noops(op, attrs, shape) -> None:
    g, x, n = _graph_with(op, attrs, shape)
    assert passes.simplify(g) == 1
    assert [m.op for m in g.nodes] == ["exp"]
    assert g.nodes[0].inputs[0] is x  # the use now reads the operand


KEPT = [
    ("cast", {"dtype": np.dtype(np.float16)}, (3, 4), np.dtype(np.float16)),
    ("reshape", {"shape": (4, 3)}, (4, 3), F32),
    ("transpose", {"perm": (1, 0)}, (4, 3), F32),
    ("slice", {"starts": (1, 0), "stops": (3, 4), "steps": (1, 1)}, (2, 4), F32),
    ("exp", {}, (3, 4), F32),
]


@pytest.mark.parametrize("op,attrs,shape,dtype", KEPT, ids=[k[0] for k in KEPT])
def test_simplify_keeps_real_work(op, attrs, shape, dtype) -> None:
    g, _, n = _graph_with(op, attrs, shape, dtype)
    assert passes.simplify(g) == 0
    assert g.nodes[0] is n


def test_simplify_keeps_a_square_transpose() -> None:
    """Same shape and dtype, but the perm moves data: not a no-op."""
    g, _, n = _graph_with("transpose", {"perm": (1, 0)}, (4, 4), F32, in_shape=(4, 4))
    assert passes.simplify(g) == 0 and g.nodes[0] is n


def _folded(n_elems: int) -> bool:
    """Whether ``full(n) * 3`` (both constants) folds into one constant."""
    def kernel(a):
        return a[0] + ops.full((n_elems,), 2.0, np.float32) * 3.0
    g = passes.optimize(trace(kernel, np.ones((2, n_elems), np.float32)))
    return "mul" not in [n.op for n in g.nodes]


def test_fold_limit_boundary() -> None:
    assert passes.FOLD_LIMIT == 1 << 16
    assert _folded(passes.FOLD_LIMIT)
    assert not _folded(passes.FOLD_LIMIT + 1)
    assert _folded(4)


def test_cse_merges_repeated_work() -> None:
    def kernel(a):
        return np.exp(a) + np.exp(a)
    g = trace(kernel, np.ones((3,), np.float32))
    assert [n.op for n in g.nodes] == ["exp", "exp", "add"]
    assert passes.cse(g) == 1
    assert [n.op for n in g.nodes] == ["exp", "add"]
    add = g.nodes[1]
    assert add.inputs[0] is add.inputs[1] is g.nodes[0].output


def test_a_constant_division_by_zero_stays_for_run_time() -> None:
    """With PyTorch's semantics an integer division by zero fails the execution:
    folding must not turn it into a constant (and lose the error)."""
    from nkipy.core.dtypes import torch_semantics

    def kernel(a):
        return a + ops.full((3,), 7, np.int32) // ops.full((3,), 0, np.int32)
    with torch_semantics():
        g = passes.optimize(trace(kernel, np.ones((3,), np.int32)))
    assert "floor_div" in [n.op for n in g.nodes]


def test_simplify_rewires_a_graph_output() -> None:
    """A no-op producing a graph output: the output becomes its operand."""
    g = Graph("passes")
    x = g.add_input("x", (3, 4), F32)
    e = g.add("exp", [x], {}, [((3, 4), F32)])
    n = g.add("cast", [e.output], {"dtype": F32}, [((3, 4), F32)])
    g.outputs = [n.output]
    g.output_names = ["output0"]
    assert passes.simplify(g) == 1
    assert g.outputs[0] is e.output


def _two_transposes(p1, p2, shape=(2, 3, 4)):
    g = Graph("passes")
    x = g.add_input("x", shape, F32)
    s1 = tuple(shape[i] for i in p1)
    t1 = g.add("transpose", [x], {"perm": p1}, [(s1, F32)])
    s2 = tuple(s1[i] for i in p2)
    t2 = g.add("transpose", [t1.output], {"perm": p2}, [(s2, F32)])
    y = g.add("exp", [t2.output], {}, [(s2, F32)])
    g.outputs = [y.output]
    g.output_names = ["output0"]
    return g, x


def test_transpose_of_transpose_folds() -> None:
    """Two transposes undoing each other vanish; others become one transpose
    of the first's operand, with the composed perm (checked by running it)."""
    from nkipy.core import interp

    g, x = _two_transposes((1, 0, 2), (1, 0, 2))
    passes.optimize(g)
    assert [n.op for n in g.nodes] == ["exp"] and g.nodes[0].inputs[0] is x
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for p1, p2 in (((2, 0, 1), (0, 2, 1)), ((1, 2, 0), (2, 0, 1)), ((0, 2, 1), (1, 0, 2))):
        g, x = _two_transposes(p1, p2)
        expected = np.exp(np.transpose(np.transpose(a, p1), p2))
        passes.optimize(g)
        ops_left = [n.op for n in g.nodes]
        assert ops_left.count("transpose") <= 1, ops_left
        if ops_left.count("transpose"):
            assert g.nodes[0].inputs[0] is x
        np.testing.assert_array_equal(interp.run_graph(g, a)[0], expected)
