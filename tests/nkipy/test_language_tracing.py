"""Tracing: inputs, static arguments, outputs, aliasing, views, locations, IR printing,
64-bit narrowing and the CPU/trace modes."""
from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

import nkipy.core.ops as ops
from nkipy.core import language, tensor_apis
from nkipy.core.interp import run_graph
from nkipy.core.ir import OPS, bfloat16
from nkipy.core.tensor import NKIPyTensorRef
from nkipy.core.trace import NKIPyKernel, get_backend, input_arrays, is_tracing, trace

F32 = np.float32
THIS = os.path.basename(__file__)


def a(*shape: int, dtype=F32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)


# -- inputs -------------------------------------------------------------------

def test_inputs_named_after_parameters_and_static_args_baked_in() -> None:
    def k(x, scale, y, *, bias=1.0, flag=True):
        return x * scale + y + bias if flag else x

    g = trace(k, a(2, 3), 3, a(2, 3), bias=0.5)
    assert [v.name for v in g.inputs] == ["x", "y"]
    assert g.name == "k"
    (out,) = run_graph(g, a(2, 3), a(2, 3))
    np.testing.assert_array_equal(out, a(2, 3) * 3 + a(2, 3) + 0.5)


def test_var_args_and_kwargs_inputs_are_named() -> None:
    def k(*xs, **kw):
        return sum(xs) + kw["w"]

    g = trace(k, a(2), a(2), a(2), w=a(2))
    assert [v.name for v in g.inputs] == ["xs_0", "xs_1", "xs_2", "w"]
    assert list(input_arrays(k, a(2), a(2), a(2), w=a(2))) == ["xs_0", "xs_1", "xs_2", "w"]
    (out,) = run_graph(g, a(2), a(2), a(2), a(2))
    np.testing.assert_array_equal(out, 4 * a(2))


def test_name_override_and_bad_binding() -> None:
    g = trace(lambda x: x + 1, a(2), name="my_kernel")
    assert g.name == "my_kernel"
    assert trace(lambda x: x + 1, a(2)).name == "kernel"  # "<lambda>" is no identifier
    with pytest.raises(TypeError, match="cannot bind"):
        trace(lambda x: x, a(2), a(3))
    with pytest.raises(TypeError, match="callable"):
        trace(3, a(2))  # type: ignore[arg-type]


def test_lists_of_arrays_stay_static_constants() -> None:
    def k(x, ws):
        return x @ ws[0] + ws[1]

    ws = [a(3, 3), a(3)]
    g = trace(k, a(2, 3), ws)
    assert [v.name for v in g.inputs] == ["x"]
    (out,) = run_graph(g, a(2, 3))
    np.testing.assert_allclose(out, k(a(2, 3), ws))


@pytest.mark.parametrize("src,dst", [(np.float64, np.float32), (np.int64, np.int32),
                                     (np.uint64, np.uint32)])
def test_64bit_inputs_are_narrowed_with_a_warning(src, dst) -> None:
    x = np.arange(6, dtype=src).reshape(2, 3)
    with pytest.warns(UserWarning, match=r"Input tensor 'x' has dtype .*64.*casting it to .*32"):
        g = trace(lambda x: x + 1, x)
    assert g.inputs[0].dtype == np.dtype(dst)
    assert g.outputs[0].dtype == np.dtype(dst)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (out,) = run_graph(g, x)  # run_graph narrows too
        assert list(input_arrays(lambda x: x, x).values())[0].dtype == np.dtype(dst)
    np.testing.assert_array_equal(out, (x + 1).astype(dst))


def test_narrowing_warning_points_at_the_caller() -> None:
    with pytest.warns(UserWarning) as rec:
        trace(lambda x: x, np.zeros(2))
    assert os.path.basename(rec[0].filename) == THIS


@pytest.mark.parametrize("dtype", [np.complex64, np.float128 if hasattr(np, "float128") else
                                   np.complex128, "U3", object])
def test_unsupported_input_dtypes_are_rejected(dtype) -> None:
    x = np.zeros(2, dtype=dtype)
    with pytest.raises(TypeError, match="do not support dtype"):
        trace(lambda x: x, x)


def test_bfloat16_and_all_supported_input_dtypes() -> None:
    for dt in ["float32", "float16", bfloat16, "int8", "int16", "int32", "uint8", "uint16",
               "uint32", "bool"]:
        x = np.ones((2, 2), dtype=dt)
        g = trace(lambda x: x, x)
        assert g.inputs[0].dtype == np.dtype(dt)
        np.testing.assert_array_equal(run_graph(g, x)[0], x)
    assert np.dtype(language.bfloat16) == bfloat16


# -- outputs ----------------------------------------------------------------------

def test_outputs_are_named_output0_n_and_nested_tuples_flatten() -> None:
    g = trace(lambda x: (x + 1, [x * 2, (x - 1,)]), a(3))
    assert g.output_names == ["output0", "output1", "output2"]
    outs = run_graph(g, a(3))
    np.testing.assert_array_equal(outs[2], a(3) - 1)


def test_returned_input_gets_a_copy() -> None:
    g = trace(lambda x, y: (x, y.copy(), x.reshape(3)), a(3), a(3))
    input_ids = {v.id for v in g.inputs}
    assert not any(v.id in input_ids for v in g.outputs)
    assert [n.op for n in g.nodes].count("copy") == 3
    outs = run_graph(g, a(3), a(3) + 1)
    np.testing.assert_array_equal(outs[1], a(3) + 1)


def test_repeated_output_values_are_distinct_buffers() -> None:
    def k(x):
        y = x + 1
        return y, y

    g = trace(k, a(3))
    assert g.outputs[0].id != g.outputs[1].id


def test_constant_outputs() -> None:
    g = trace(lambda x: (x + 1, 3, 2.5, np.arange(3), True), a(2))
    assert [v.dtype for v in g.outputs] == [np.float32, np.int32, np.float32, np.int32, np.bool_]
    outs = run_graph(g, a(2))
    assert outs[1] == 3 and outs[2] == 2.5 and outs[4]
    np.testing.assert_array_equal(outs[3], [0, 1, 2])


def test_none_return_has_no_outputs() -> None:
    g = trace(lambda x: None, a(2))
    assert g.outputs == [] and g.output_names == []


def test_unsupported_return_value() -> None:
    with pytest.raises(TypeError, match="returned value 1 is a str"):
        trace(lambda x: (x, "hello"), a(2))


# -- aliasing --------------------------------------------------------------------------

def test_setitem_on_input_appends_aliased_output() -> None:
    def k(x, y):
        x[0] = 5.0
        return y * 2

    g = trace(k, a(3), a(3))
    assert g.output_names == ["output0", "x"]
    assert g.aliases == {1: 0}
    x = a(3)
    outs = run_graph(g, x, a(3), update_aliases=True)
    np.testing.assert_array_equal(outs[1], [5, 1, 2])
    np.testing.assert_array_equal(x, [5, 1, 2])
    assert "x=%" in str(g) and "(aliases x)" in str(g)


def test_returned_mutated_input_is_aliased_in_place() -> None:
    def k(x, y):
        y[1] = -1
        x += 1
        return x, y.sum(), y

    g = trace(k, a(3), a(3))
    assert g.output_names == ["x", "output1", "y"]
    assert g.aliases == {0: 0, 2: 1}


def test_mutation_order_follows_inputs() -> None:
    def k(x, y, z):
        z[0] = 1
        x[0] = 1

    g = trace(k, a(2), a(2), a(2))
    assert g.output_names == ["x", "z"] and g.aliases == {0: 0, 1: 2}


def test_setitem_on_intermediate_is_functional() -> None:
    def k(x):
        y = x + 0
        y[1] = 7
        return y

    g = trace(k, a(3))
    assert g.aliases == {} and g.output_names == ["output0"]
    assert any(n.op == "set_slice" for n in g.nodes)


def test_self_assignment_still_aliases_with_a_copy() -> None:
    def k(x):
        x[...] = x

    g = trace(k, a(3))
    assert g.aliases == {0: 0}
    assert g.outputs[0].id != g.inputs[0].id


def test_mutation_through_a_view_of_an_input() -> None:
    def k(cache, new, pos):
        layer = cache[1]            # a view
        layer[:, pos] = new         # writes through into the input
        return cache[1, 0].sum()

    cache = a(2, 3, 4)
    g = trace(k, cache, np.ones(3, F32), 2)
    assert g.output_names == ["output0", "cache"]
    ref = cache.copy()
    expected = k(ref, np.ones(3, F32), 2)
    x = cache.copy()
    outs = run_graph(g, x, np.ones(3, F32), update_aliases=True)
    np.testing.assert_array_equal(x, ref)
    assert outs[0] == expected


def test_copy_breaks_the_view() -> None:
    def k(x):
        y = x[0].copy()
        y[0] = 100

    assert trace(k, a(2, 2)).aliases == {}


def test_inplace_ops_on_views_are_not_written_twice() -> None:
    def k(x):
        x[1:] += 1

    g = trace(k, a(4))
    assert [n.op for n in g.nodes].count("set_slice") == 1


# -- views and staleness -------------------------------------------------------------

def test_sibling_views_see_writes() -> None:
    def k(x):
        v1 = x[0]
        v2 = x[:, 0]
        v1[0] = 50
        return v2 + 0

    g = trace(k, a(2, 2))
    np.testing.assert_array_equal(run_graph(g, a(2, 2))[0], [50, 2])


def test_views_of_intermediates_follow_inplace_ops() -> None:
    def k(x):
        y = x * 1
        v = y[1:]
        y += 10
        return v

    np.testing.assert_array_equal(run_graph(trace(k, a(3)), a(3))[0], [11, 12])


# -- locations and printing ------------------------------------------------------------

def test_nodes_record_user_source_location() -> None:
    def k(x):
        y = np.exp(x)  # marker-line
        return y

    g = trace(k, a(3))
    exp_node = next(n for n in g.nodes if n.op == "exp")
    src = open(__file__).read().splitlines()
    line = next(i + 1 for i, s in enumerate(src) if "marker-line" in s and "np.exp" in s)
    assert exp_node.location == f"{THIS}:{line}"


def test_graph_printing_is_readable() -> None:
    def attention(q, k, v):
        s = q @ k.T / np.sqrt(q.shape[-1])
        return ops.softmax(s, axis=-1) @ v

    g = trace(attention, a(4, 8), a(6, 8), a(6, 8))
    text = str(g)
    lines = text.splitlines()
    assert lines[0] == ("kernel attention(q: %{}:float32[4, 8], k: %{}:float32[6, 8], "
                        "v: %{}:float32[6, 8]) {{").format(*[v.id for v in g.inputs])
    assert lines[-1] == "}" and lines[-2].startswith("  return output0=%")
    assert any(re.match(r"  %\d+:float32\[4, 6\] = matmul\(%\d+, %\d+\)  # test_language_tracing"
                        r"\.py:\d+$", ln) for ln in lines)
    assert "reduce_max(" in text and "axes=(1,), keepdims=True" in text
    assert "transpose(" in text and "perm=(1, 0)" in text
    assert len(lines) == len(g.nodes) + 3
    # big constants are summarised, small ones shown
    g2 = trace(lambda x: x + np.arange(100, dtype=np.float32) + 2.0, a(100))
    assert "array<float32[100]>" in str(g2) and "value=2.0" in str(g2)


def test_nkipy_kernel_wrapper() -> None:
    @NKIPyKernel.trace
    def k(x):
        return x * 2

    assert k.__name__ == "k"
    np.testing.assert_array_equal(k(a(2)), a(2) * 2)  # plain call: NumPy
    g = k.specialize(a(2))
    assert g is k.graph and g.name == "k"
    assert "NKIPyKernel" in repr(k)


# -- CPU and trace modes ------------------------------------------------------------

def test_cpu_mode_runs_plain_numpy() -> None:
    seen = []

    def k(x):
        seen.append((type(x), get_backend(), is_tracing()))
        return ops.softmax(x) + ops.exp(x)

    out = k(a(2, 3))
    assert isinstance(out, np.ndarray)
    assert seen[-1] == (np.ndarray, "cpu", False)
    trace(k, a(2, 3))
    assert seen[-1] == (NKIPyTensorRef, "trace", True)
    assert get_backend() == "cpu"


def test_tensor_apis_and_ops_exports_match_the_original() -> None:
    for name in ["constant", "topk", "rms_norm", "softmax", "conv2d", "conv3d", "zeros", "full"]:
        assert getattr(tensor_apis, name) is getattr(ops, name)
    original = """add subtract multiply divide power maximum minimum bitwise_and bitwise_or
        bitwise_xor equal not_equal greater greater_equal less less_equal logical_and logical_or
        logical_xor logaddexp remainder floor_divide abs exp log sqrt square negative reciprocal
        sin cos tan arctan tanh ceil floor rint trunc sign invert bitwise_not logical_not clip
        log1p log2 expm1 round_ isnan isfinite constant zeros full zeros_like ones_like empty_like
        full_like tril triu diag dot matmul norm outer trace sum max min mean any var std argmax
        argmin cumsum prod count_nonzero reshape transpose expand_dims concatenate split copy
        repeat broadcast_to copyto astype squeeze pad swapaxes stack diff flip tile roll softmax
        topk rms_norm conv2d conv3d where take take_along_axis put_along_axis scatter_along_axis
        static_slice dynamic_update_slice scatter_strided all_gather all_reduce reduce_scatter
        all_to_all""".split()
    missing = [n for n in original if not callable(getattr(ops, n, None))]
    assert not missing


def test_tracer_properties() -> None:
    def k(x):
        assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2
        assert x.dtype == np.float32 and x.itemsize == 4 and x.nbytes == 24
        assert x.T.shape == (3, 2) and np.shape(x) == (2, 3) and np.ndim(x) == 2
        assert np.size(x) == 6 and np.size(x, 1) == 3
        assert np.result_type(x, 1.0) == np.float32
        assert "NKIPyTensorRef(shape=(2, 3)" in repr(x)
        assert {x: 1}[x] == 1  # hashable by identity
        rows = list(x)
        assert len(rows) == 2 and rows[0].shape == (3,)
        return rows[1]

    np.testing.assert_array_equal(run_graph(trace(k, a(2, 3)), a(2, 3))[0], a(2, 3)[1])


def test_every_ir_op_is_produced_by_some_case() -> None:
    from op_cases import ALL_CASES
    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in ALL_CASES:
            try:
                g = trace(case.fn, *case.args, **case.kwargs)
            except Exception:
                continue
            seen.update(n.op for n in g.nodes)
    assert not set(OPS) - seen, sorted(set(OPS) - seen)


def test_tracer_strides_are_numpys_or_refused() -> None:
    from nkipy.core.ops._core import NKIPyUnsupportedError

    a = np.zeros((3, 4, 5), np.float16)
    seen = {}

    def k(x):
        for expr in ("x", "x[1:3]", "x[1]", "x.reshape(12, 5)", "x[2, 1:3]", "x.T.copy()"):
            seen[expr] = eval(expr).strides  # noqa: S307  (test-local expressions)
        for expr in ("x.T", "x[:, ::2]", "x[:, 1]"):
            with pytest.raises(NKIPyUnsupportedError, match="strides of a non-contiguous view"):
                eval(expr).strides  # noqa: S307
        return x + 1

    trace(k, a)
    for expr, strides in seen.items():
        assert strides == eval(expr.replace("x", "a")).strides, expr  # noqa: S307


def test_float8_e4m3_is_the_originals_and_kernels_store_it() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f8 = language.float8_e4m3
    assert f8 is ml_dtypes.float8_e4m3 and np.dtype(f8).itemsize == 1
    # the NKI variant: with infinities (not float8_e4m3fn), max finite 240
    assert np.array_equal(np.array([1.3, 240, 500], np.float32).astype(f8).astype(np.float32),
                          [1.25, 240, np.inf])
    # inputs, casts and constants of it trace (tests/nkipy/test_float8.py runs them);
    # arithmetic on it is refused
    ones32 = np.ones(3, np.float32)
    g = trace(lambda x, y: (x.astype(np.float32) + y).astype(f8), np.ones(3, f8), ones32)
    assert g.outputs[0].dtype == np.dtype(f8)
    trace(lambda x: np.concatenate([x.astype(f8), np.zeros(3, f8)]), ones32)
    with pytest.raises(TypeError, match=r"do not compute on float8_e4m3 \(add\)"):
        trace(lambda x: x + 1, np.ones(3, f8))
