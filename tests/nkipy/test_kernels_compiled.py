"""Whole kernels through the compiler and the device: the fused patterns a
model needs (softmax, layer norm, RMS norm, GELU MLP, attention, RoPE),
aliasing, the DeviceKernel / DeviceTensor / baremetal_jit API, and the
original's playground kernel. Tolerances: float32 rtol 1e-4 (fused kernels
reassociate sums), float16 2e-2 absolute on O(1) values."""
import numpy as np
import pytest

import nkipy.core.ops as ops
from nkipy.core.trace import trace
from nkipy.runtime import DeviceKernel, DeviceTensor, baremetal_jit

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels_cache")


def run_kernel(fn, *arrays, cache_dir, **kwargs):
    k = DeviceKernel.compile_and_load(fn, *arrays, build_dir=cache_dir, **kwargs)
    names = [v.name for v in k.graph.inputs]
    outs = k(inputs={n: DeviceTensor.from_numpy(a) for n, a in zip(names, arrays)})
    return k, [outs[n].numpy() for n in k.graph.output_names]


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def layer_norm(x, w, b):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def gelu_mlp(x, w1, w2):
    h = x @ w1
    h = 0.5 * h * (1.0 + np.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    return h @ w2


def attention(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) * (1.0 / np.sqrt(q.shape[-1]))
    return softmax(s) @ v


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = np.concatenate([-x2, x1], axis=-1)
    return x * cos + rotated * sin


@pytest.mark.parametrize("name,fn,args", [
    ("softmax", softmax, (f32(64, 257),)),
    ("layer_norm", layer_norm, (f32(33, 128), f32(128), f32(128))),
    ("rms_norm", rms_norm, (f32(17, 300), f32(300))),
    ("gelu_mlp", gelu_mlp, (f32(16, 64), f32(64, 256) * 0.1, f32(256, 64) * 0.1)),
    ("attention", attention, (f32(2, 4, 16, 32), f32(2, 4, 16, 32), f32(2, 4, 16, 32))),
    ("rope", rope, (f32(2, 8, 64), f32(8, 64), f32(8, 64))),
])
def test_fused_kernels_match_numpy(name, fn, args, cache):
    _, (out,) = run_kernel(fn, *args, cache_dir=cache, name=name)
    np.testing.assert_allclose(out, fn(*args), rtol=1e-4, atol=1e-5)


def test_softmax_is_one_fused_row_loop(cache):
    k, _ = run_kernel(softmax, f32(8, 64), cache_dir=cache, name="softmax_fused")
    c = k.c_source
    assert c.count("env->parallel_for(") == 1 and "static void rows" in c


def test_nkipy_ops_softmax_rms_norm_topk(cache):
    x = f32(6, 40)
    w = f32(40)
    _, (s,) = run_kernel(lambda x: ops.softmax(x, axis=-1), x, cache_dir=cache, name="ops_softmax")
    np.testing.assert_allclose(s, softmax(x), rtol=1e-5, atol=1e-6)
    _, (r,) = run_kernel(lambda x, w: ops.rms_norm(x, w, eps=1e-6), x, w, cache_dir=cache,
                         name="ops_rms")
    np.testing.assert_allclose(r, rms_norm(x, w), rtol=1e-5, atol=1e-5)
    _, (vals, idx) = run_kernel(lambda x: ops.topk(x, 3, axis=1), x, cache_dir=cache,
                                name="ops_topk")
    ref_idx = np.argsort(-x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(vals, np.take_along_axis(x, ref_idx, 1))


def test_half_precision_kernel(cache):
    x = RNG.standard_normal((32, 48)).astype(np.float16)
    w = RNG.standard_normal((48,)).astype(np.float16)
    _, (out,) = run_kernel(rms_norm, x, w, cache_dir=cache, name="rms_f16")
    assert out.dtype == np.float16
    ref = rms_norm(x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(out.astype(np.float32), ref, atol=2e-2, rtol=2e-2)


def test_setitem_on_input_aliases_output(cache):
    def kernel(x, y):
        x[1:3] = y * 2.0
        return x.sum(axis=0)

    x, y = f32(4, 5), f32(2, 5)
    k = DeviceKernel.compile_and_load(kernel, x, y, build_dir=cache, name="alias_k")
    assert k.graph.aliases and "x" in k.output_tensors_info
    assert k.output_tensors_info["x"].alias_of == "x"
    tx, ty = DeviceTensor.from_numpy(x), DeviceTensor.from_numpy(y)
    outs = k(inputs={"x": tx, "y": ty})
    expected = x.copy()
    total = kernel(expected, y)
    np.testing.assert_allclose(outs["output0"].numpy(), total, rtol=1e-5)
    np.testing.assert_allclose(tx.numpy(), expected)  # updated in place on the device


def test_in_place_elementwise_update(cache):
    def bump(x):
        x[...] = x + 1.0
        return x

    x = f32(3, 7)
    k = DeviceKernel.compile_and_load(bump, x, build_dir=cache, name="bump")
    tx = DeviceTensor.from_numpy(x)
    k(inputs={"x": tx})
    k(inputs={"x": tx})
    np.testing.assert_allclose(tx.numpy(), x + 2.0, rtol=1e-6)


def test_playground_kernel_float16(cache):
    def nkipy_kernel(A, B):
        A = A.transpose(1, 0)
        return A @ B

    A = RNG.standard_normal((1024, 1024)).astype(np.float16)
    B = RNG.standard_normal((1024, 1024)).astype(np.float16)
    k = DeviceKernel.compile_and_load(nkipy_kernel, A, B, name="simple_kernel", build_dir=cache)
    out = DeviceTensor.from_numpy(np.zeros((1024, 1024), np.float16))
    inputs = {"A": DeviceTensor.from_numpy(A), "B": DeviceTensor.from_numpy(B)}
    k(inputs=inputs, outputs={"output0": out})
    ref = A.T.astype(np.float32) @ B.astype(np.float32)
    np.testing.assert_allclose(out.numpy().astype(np.float32), ref, atol=0.1, rtol=1e-2)
    result = k.benchmark(inputs=inputs, outputs={"output0": out}, warmup_iter=1, benchmark_iter=3)
    assert result.iterations == 3 and result.min_ms > 0
    assert "matmul" in k.ir_text and "gemm_batched_lowp" in k.c_source


def test_compile_and_load_reuses_loaded_kernel(cache):
    x = f32(4, 4)
    a = DeviceKernel.compile_and_load(lambda x: np.exp(x), x, build_dir=cache, name="exp_reuse")
    b = DeviceKernel.compile_and_load(lambda x: np.exp(x), x, build_dir=cache, name="exp_reuse")
    assert a is b  # the loaded kernel is shared, not loaded twice


def test_baremetal_jit(cache):
    @baremetal_jit(build_dir=str(cache))
    def scaled_add(a, b, scale=2.0):
        return a * scale + b

    a, b = f32(5, 6), f32(5, 6)
    np.testing.assert_allclose(scaled_add(a, b), a * 2.0 + b, rtol=1e-6)
    np.testing.assert_allclose(scaled_add(a, b, scale=3.0), a * 3.0 + b, rtol=1e-6)

    @baremetal_jit(build_dir=str(cache))
    def two(a):
        return a + 1, a.max()

    first, second = two(a)
    np.testing.assert_allclose(first, a + 1)
    np.testing.assert_allclose(second, a.max())

    @baremetal_jit(build_dir=str(cache))
    def update(a):
        a[0] = 0.0

    c = a.copy()
    assert update(c) is None
    np.testing.assert_array_equal(c[0], 0.0)
    np.testing.assert_array_equal(c[1:], a[1:])


def test_device_tensor_torch_round_trip():
    torch = pytest.importorskip("torch")
    t = torch.randn(3, 4).to(torch.bfloat16)
    d = DeviceTensor.from_torch(t)
    assert d.numpy().dtype.name == "bfloat16"
    assert torch.equal(d.torch(), t)
