"""run_graph on hand-built graphs: the IR semantics the compiler must reproduce."""
from __future__ import annotations

import numpy as np
import pytest

from nkipy.core.interp import run_graph
from nkipy.core.ir import Graph, bfloat16

F32, F16, I32, I8 = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int8))


def graph1(op: str, shapes_dtypes, attrs=None, out=None) -> Graph:
    g = Graph("t")
    ins = [g.add_input(f"a{i}", s, d) for i, (s, d) in enumerate(shapes_dtypes)]
    outs = out or [(shapes_dtypes[0][0], shapes_dtypes[0][1])]
    n = g.add(op, ins, attrs or {}, outs)
    g.outputs = list(n.outputs)
    g.output_names = [f"output{i}" for i in range(len(n.outputs))]
    g.verify()
    return g


def test_half_precision_is_computed_in_float32_and_rounded_once() -> None:
    # 2049 is not a float16: add in f16 steps would round differently than one rounding
    x = np.array([1024.0, 0.3], F16)
    y = np.array([1.4, 0.4], F16)
    g = graph1("add", [((2,), F16), ((2,), F16)])
    (out,) = run_graph(g, x, y)
    assert out.dtype == F16
    np.testing.assert_array_equal(out, (x.astype(np.float32) + y.astype(np.float32)).astype(F16))
    xb = np.array([1.0, 3.0], bfloat16)
    gb = graph1("exp", [((2,), bfloat16)])
    np.testing.assert_array_equal(run_graph(gb, xb)[0],
                                  np.exp(xb.astype(np.float32)).astype(bfloat16))


def test_half_sum_accumulates_in_float32() -> None:
    x = np.full(4096, 1.0, F16)
    g = graph1("reduce_sum", [((4096,), F16)], {"axes": (0,), "keepdims": False}, [((), F16)])
    assert run_graph(g, x)[0] == 4096  # a float16 accumulator would stop at 2048


def test_integer_division_semantics() -> None:
    a = np.array([7, -7, 7, -7, 5, 0], I32)
    b = np.array([2, 2, -2, -2, 0, 0], I32)
    fd, = run_graph(graph1("floor_div", [((6,), I32), ((6,), I32)]), a, b)
    md, = run_graph(graph1("mod", [((6,), I32), ((6,), I32)]), a, b)
    dv, = run_graph(graph1("div", [((6,), I32), ((6,), I32)]), a, b)
    np.testing.assert_array_equal(fd, [3, -4, -4, 3, 0, 0])
    np.testing.assert_array_equal(md, [1, 1, -1, -1, 0, 0])
    np.testing.assert_array_equal(dv, [3, -3, -3, 3, 0, 0])  # truncating, x/0 = 0


def test_integer_pow_and_reciprocal() -> None:
    b = np.array([2, -2, 1, -1, 3, 0], I32)
    e = np.array([10, 3, -5, -3, -1, 0], I32)
    (p,) = run_graph(graph1("pow", [((6,), I32), ((6,), I32)]), b, e)
    np.testing.assert_array_equal(p, [1024, -8, 1, -1, 0, 1])
    (w,) = run_graph(graph1("pow", [((1,), I8), ((1,), I8)]), np.array([3], I8), np.array([5], I8))
    assert w[0] == np.int8(243 - 256)
    (r,) = run_graph(graph1("reciprocal", [((5,), I32)]), np.array([1, -1, 2, 0, -5], I32))
    np.testing.assert_array_equal(r, [1, -1, 0, 0, 0])


def test_nan_propagation() -> None:
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], F32)
    mx, = run_graph(graph1("reduce_max", [((2, 3), F32)], {"axes": (1,), "keepdims": False},
                           [((2,), F32)]), x)
    assert np.isnan(mx[0]) and mx[1] == 6
    am, = run_graph(graph1("argmax", [((2, 3), F32)], {"axis": 1, "keepdims": False},
                           [((2,), I32)]), x)
    np.testing.assert_array_equal(am, [1, 2])
    y = np.array([np.nan, 1.0], F32)
    m, = run_graph(graph1("maximum", [((2,), F32), ((2,), F32)]), y, y[::-1].copy())
    assert np.isnan(m).all()


def test_gather_indices_are_clamped() -> None:
    x = np.arange(5, dtype=F32)
    idx = np.array([-3, 0, 4, 9], I32)
    out, = run_graph(graph1("take", [((5,), F32), ((4,), I32)], {"axis": 0}, [((4,), F32)]), x, idx)
    np.testing.assert_array_equal(out, [0, 0, 4, 4])
    x2 = np.arange(6, dtype=F32).reshape(2, 3)
    i2 = np.array([[5], [-1]], I32)
    out, = run_graph(graph1("take_along_axis", [((2, 3), F32), ((2, 1), I32)], {"axis": 1},
                            [((2, 1), F32)]), x2, i2)
    np.testing.assert_array_equal(out, [[2], [3]])


def test_scatter_skips_out_of_range_and_last_write_wins() -> None:
    x = np.zeros(4, F32)
    idx = np.array([1, 7, 1, -1], I32)
    vals = np.array([10, 20, 30, 40], F32)
    g = graph1("put_along_axis", [((4,), F32), ((4,), I32), ((4,), F32)],
               {"axis": 0, "mode": "set"})
    np.testing.assert_array_equal(run_graph(g, x, idx, vals)[0], [0, 30, 0, 0])
    g = graph1("put_along_axis", [((4,), F32), ((4,), I32), ((4,), F32)],
               {"axis": 0, "mode": "add"})
    np.testing.assert_array_equal(run_graph(g, x + 1, idx, vals)[0], [1, 41, 1, 1])


def test_update_slice_clamps_starts() -> None:
    g = Graph("t")
    x = g.add_input("x", (5,), F32)
    u = g.add_input("u", (2,), F32)
    s = g.add_input("s", (), I32)
    n = g.add("update_slice", [x, u, s], {}, [((5,), F32)])
    g.outputs, g.output_names = [n.output], ["output0"]
    for start, expect in [(0, [9, 9, 0, 0, 0]), (4, [0, 0, 0, 9, 9]), (-2, [9, 9, 0, 0, 0])]:
        out, = run_graph(g, np.zeros(5, F32), np.full(2, 9, F32), np.int32(start))
        np.testing.assert_array_equal(out, expect)


def test_slice_with_negative_step_and_stop_minus_one() -> None:
    g = graph1("slice", [((5,), F32)], {"starts": (4,), "stops": (-1,), "steps": (-2,)},
               [((3,), F32)])
    np.testing.assert_array_equal(run_graph(g, np.arange(5, dtype=F32))[0], [4, 2, 0])


def test_topk_ties_and_nan() -> None:
    x = np.array([[3.0, 1.0, 3.0, np.nan, 2.0]], F32)
    g = graph1("topk", [((1, 5), F32)], {"k": 3, "axis": 1, "largest": True, "sorted": True},
               [((1, 3), F32), ((1, 3), I32)])
    v, i = run_graph(g, x)
    np.testing.assert_array_equal(i, [[3, 0, 2]])
    g = graph1("topk", [((1, 5), F32)], {"k": 2, "axis": 1, "largest": False, "sorted": True},
               [((1, 2), F32), ((1, 2), I32)])
    v, i = run_graph(g, x)
    np.testing.assert_array_equal(v, [[1, 2]])


def test_collectives_duplicated_data_model() -> None:
    x = np.arange(4, dtype=F32).reshape(2, 2) + 1
    one = ((0,),)
    two = ((0, 1),)
    for groups, factor in [(one, 1), (two, 2)]:
        out, = run_graph(graph1("all_reduce", [((2, 2), F32)],
                                {"reduce_op": "add", "replica_groups": groups}), x)
        np.testing.assert_array_equal(out, x * factor)
    out, = run_graph(graph1("all_reduce", [((2, 2), F32)],
                            {"reduce_op": "multiply", "replica_groups": two}), x)
    np.testing.assert_array_equal(out, x ** 2)
    out, = run_graph(graph1("all_gather", [((2, 2), F32)], {"axis": 0, "replica_groups": two},
                            [((4, 2), F32)]), x)
    np.testing.assert_array_equal(out, np.concatenate([x, x]))
    out, = run_graph(graph1("reduce_scatter", [((2, 2), F32)],
                            {"axis": 1, "reduce_op": "maximum", "replica_groups": two},
                            [((2, 1), F32)]), x)
    np.testing.assert_array_equal(out, x[:, :1])
    out, = run_graph(graph1("all_to_all", [((2, 2), F32)],
                            {"split_axis": 1, "concat_axis": 0, "replica_groups": two},
                            [((4, 1), F32)]), x)
    np.testing.assert_array_equal(out, np.concatenate(np.split(x, 2, axis=1), axis=0))


def test_run_graph_input_validation_and_aliases() -> None:
    g = graph1("neg", [((2,), F32)])
    with pytest.raises(TypeError, match="takes 1 inputs"):
        run_graph(g)
    with pytest.raises(ValueError, match="expected shape"):
        run_graph(g, np.zeros(3, F32))
    with pytest.raises(TypeError, match="expected dtype float32, got int32"):
        run_graph(g, np.zeros(2, I32))
    out, = run_graph(g, np.ones(2))  # float64 narrows
    assert out.dtype == F32 and out.flags.writeable
    g.aliases = {0: 0}
    x = np.ones(2, F32)
    run_graph(g, x, update_aliases=True)
    np.testing.assert_array_equal(x, [-1, -1])
    y = np.ones(2, F32)
    run_graph(g, y)
    np.testing.assert_array_equal(y, [1, 1])


def test_conv2d_matches_a_direct_loop() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(F32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(F32)
    g = Graph("c")
    xi, wi = g.add_input("x", x.shape, F32), g.add_input("w", w.shape, F32)
    n = g.add("conv2d", [xi, wi], {"stride": (2, 1), "padding": ((1, 0), (0, 2)),
                                   "dilation": (1, 2), "groups": 2}, [((1, 4, 2, 3), F32)])
    g.outputs, g.output_names = [n.output], ["output0"]
    out, = run_graph(g, x, w)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 2)))
    ref = np.zeros((1, 4, 2, 3))
    for o in range(4):
        c = o // 2
        for i in range(2):
            for j in range(3):
                for ki in range(3):
                    for kj in range(3):
                        ref[0, o, i, j] += xp[0, c, i * 2 + ki, j + 2 * kj] * w[o, 0, ki, kj]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
