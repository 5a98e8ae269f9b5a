"""The nkipy extras called on NumPy arrays (CPU mode) against independent formulas."""
from __future__ import annotations

import math

import numpy as np
import pytest

import nkipy.core.ops as ops
import nkipy.distributed as dist
from nkipy.distributed import collectives as cc

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 5)).astype(np.float32)


def test_softmax_log_softmax_rms_norm() -> None:
    x = X.astype(np.float64)
    sm = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(ops.softmax(X), sm, rtol=1e-5)
    np.testing.assert_allclose(ops.softmax(X, axis=0), np.exp(x) / np.exp(x).sum(0), rtol=1e-5)
    np.testing.assert_allclose(ops.log_softmax(X), np.log(sm), rtol=1e-5, atol=1e-6)
    w = np.linspace(0.5, 1.5, 5).astype(np.float32)
    rms = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(ops.rms_norm(X, w), rms, rtol=1e-5)
    assert ops.softmax(X.astype(np.float16)).dtype == np.float16


def test_topk_cpu() -> None:
    x = np.array([[5, 1, 5, 3], [0, 2, 2, 9]], np.float32)
    v, i = ops.topk(x, 2, axis=1)
    np.testing.assert_array_equal(v, [[5, 5], [9, 2]])
    np.testing.assert_array_equal(i, [[0, 2], [3, 1]])
    assert i.dtype == np.uint32
    v, i = ops.topk(x, 1, axis=0, is_ascend=True)
    np.testing.assert_array_equal(v, [[0, 1, 2, 3]])
    with pytest.raises(ValueError):
        ops.topk(x, 5, axis=1)


def _conv_ref(x, w, b, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), pad[0], pad[1]))
    oh = (xp.shape[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for bn in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    patch = xp[bn, g * cg:(g + 1) * cg, i * stride[0]:i * stride[0] + dil[0] * (kh - 1) + 1:dil[0],
                               j * stride[1]:j * stride[1] + dil[1] * (kw - 1) + 1:dil[1]]
                    out[bn, oc, i, j] = (patch * w[oc]).sum() + (b[oc] if b is not None else 0)
    return out


@pytest.mark.parametrize("kw,groups", [({}, 1), ({"stride": 2, "padding": 1}, 1),
                                       ({"dilation": 2, "padding": (2, 1)}, 2),
                                       ({"padding": ((0, 1), (2, 0))}, 4)])
def test_conv2d_cpu(kw, groups) -> None:
    x = RNG.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((8, 4 // groups, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    st = kw.get("stride", 1)
    st = (st, st) if isinstance(st, int) else st
    dl = kw.get("dilation", 1)
    dl = (dl, dl) if isinstance(dl, int) else dl
    p = kw.get("padding", 0)
    if isinstance(p, int):
        p = ((p, p), (p, p))
    elif isinstance(p[0], int):
        p = ((p[0], p[0]), (p[1], p[1]))
    out = ops.conv2d(x, w, b, groups=groups, **kw)
    np.testing.assert_allclose(out, _conv_ref(x, w, b, st, p, dl, groups), rtol=1e-4, atol=1e-4)


def test_conv3d_cpu_matches_sum_of_conv2d() -> None:
    x = RNG.standard_normal((1, 2, 3, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 2, 3, 3)).astype(np.float32)
    out = ops.conv3d(x, w, padding=(0, 1, 1))
    ref = np.zeros((1, 3, 2, 5, 5), np.float64)
    for d in range(2):
        for kd in range(2):
            ref[:, :, d] += _conv_ref(x[:, :, d + kd], w[:, :, kd], None, (1, 1), ((1, 1), (1, 1)),
                                      (1, 1), 1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_indexing_extras_cpu() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = ops.dynamic_update_slice(x, np.ones((2, 2), np.float32), [2, 3])  # clamped to (1, 2)
    ref = x.copy()
    ref[1:3, 2:4] = 1
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(x, np.arange(12).reshape(3, 4))  # functional
    out = ops.scatter_strided(x, -1, [[0, 2], [1, 3]])
    ref = x.copy()
    ref[np.ix_([0, 2], [1, 3])] = -1
    np.testing.assert_array_equal(out, ref)
    out = ops.scatter_along_axis(x, np.array([2, 0]), np.zeros((2, 4), np.float32), 0)
    ref = x.copy()
    ref[[2, 0]] = 0
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(ops.static_slice(x, [0, 1], [3, 4], [2, 2], [ ]), x[0:3:2, 1:4:2])
    np.testing.assert_array_equal(ops.put_along_axis(x, np.array([[0], [1], [2]]), 9, 1)[:, :3],
                                  [[9, 1, 2], [4, 9, 6], [8, 9, 9]])


def test_math_extras_cpu() -> None:
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    np.testing.assert_allclose(ops.sigmoid(x), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(ops.erf(x), [math.erf(v) for v in x], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ops.rsqrt(np.abs(x) + 1), 1 / np.sqrt(np.abs(x) + 1.0), rtol=1e-6)
    assert ops.sigmoid(np.arange(3, dtype=np.int8)).dtype == np.float16
    assert ops.erf(np.zeros(0, np.float32)).shape == (0,)


def test_creation_cpu() -> None:
    assert ops.zeros((2, 3), np.int8).dtype == np.int8
    assert ops.zeros((2,)).dtype == np.float32
    np.testing.assert_array_equal(ops.full((2,), 7, np.int32), [7, 7])
    np.testing.assert_array_equal(ops.constant([1, 2], np.float16), np.array([1, 2], np.float16))


def test_collectives_cpu_world_size_one_are_identities() -> None:
    for fn in (lambda x: cc.all_reduce(x, replica_groups=[[0]]),
               lambda x: cc.all_gather(x, 0, replica_groups=[[0]]),
               lambda x: cc.reduce_scatter(x, 1, replica_groups=[[0]]),
               lambda x: cc.all_to_all(x, 0, 1, replica_groups=[[0]]),
               lambda x: dist.all_reduce(x)):
        np.testing.assert_array_equal(fn(X), X)


def test_collectives_cpu_duplicated_data_model() -> None:
    g = [[0, 1]]
    np.testing.assert_array_equal(cc.all_reduce(X, g), 2 * X)
    np.testing.assert_array_equal(cc.all_reduce(X, g, reduce_op=np.maximum), X)
    np.testing.assert_array_equal(cc.all_gather(X, 1, g), np.concatenate([X, X], axis=1))
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(cc.reduce_scatter(x, 0, g), 2 * x[:2])
    np.testing.assert_array_equal(cc.all_to_all(x, 0, 1, g), np.concatenate([x[:2], x[2:]], 1))


def test_world_size_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert dist.get_world_size() == 4
    assert cc.normalize_replica_groups(None) == ((0, 1, 2, 3),)
    np.testing.assert_array_equal(cc.all_reduce(X), 4 * X)
    monkeypatch.setenv("WORLD_SIZE", "junk")                # refused by name, never 1
    with pytest.raises(ValueError, match="environment variable WORLD_SIZE must be an integer"):
        dist.get_world_size()
    monkeypatch.delenv("WORLD_SIZE")
    assert dist.get_world_size() == 1
    assert cc.normalize_reduce_op("SUM") == "add" and cc.normalize_reduce_op(np.minimum) == "minimum"
