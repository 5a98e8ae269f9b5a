"""Compiled conv2d (the runtime's convolution routine, env->lib->conv2d) against
torch: 1x1 (the direct GEMM), 3x3, strided, padded, dilated, grouped,
depthwise, with and without bias, odd sizes, batches; a following ReLU /
ReLU6 fused into the convolution's output write; float16 / bfloat16 inputs.
Tolerances: float32 1e-4 (the GEMM reassociates sums); float16 / bfloat16
results compared with torch's float32 convolution of the same (rounded)
inputs, within the output's rounding."""
import numpy as np
import pytest

import nkipy.core.ops as ops
from nkipy.compiler import codegen
from nkipy.core.trace import trace
from nkipy.runtime import baremetal_jit

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def torch_conv(x, w, b, **kw):
    return F.conv2d(torch.from_numpy(np.asarray(x, np.float32)),
                    torch.from_numpy(np.asarray(w, np.float32)),
                    None if b is None else torch.from_numpy(np.asarray(b, np.float32)),
                    **kw).numpy()


# (name, input shape, out channels, kernel, conv2d keywords)
CASES = [
    ("1x1", (1, 16, 9, 11), 24, (1, 1), {}),
    ("1x1-batch3", (3, 7, 5, 6), 5, (1, 1), {}),
    ("1x1-stride2", (2, 8, 13, 9), 12, (1, 1), dict(stride=2)),
    ("3x3", (1, 6, 10, 12), 8, (3, 3), {}),
    ("3x3-padded", (2, 6, 10, 12), 8, (3, 3), dict(padding=1)),
    ("3x3-strided", (2, 5, 17, 15), 7, (3, 3), dict(stride=2, padding=1)),
    ("3x3-stride-1x2-pad-2x1", (1, 4, 9, 14), 6, (3, 3), dict(stride=(1, 2), padding=(2, 1))),
    ("dilated", (2, 4, 14, 13), 6, (3, 3), dict(padding=2, dilation=2)),
    ("dilated-2x3", (1, 3, 11, 16), 5, (3, 2), dict(dilation=(2, 3), padding=(1, 2))),
    ("grouped", (2, 12, 9, 9), 18, (3, 3), dict(groups=3, padding=1)),
    ("depthwise", (2, 16, 12, 11), 16, (3, 3), dict(groups=16, padding=1)),
    ("depthwise-strided", (1, 8, 15, 15), 8, (3, 3), dict(groups=8, stride=2, padding=1)),
    ("depthwise-x2-5x5", (1, 6, 9, 10), 12, (5, 5), dict(groups=6, padding=2)),
    ("odd-7x7-stride2", (1, 3, 23, 19), 10, (7, 7), dict(stride=2, padding=3)),
    ("kernel-wider-than-input", (1, 2, 3, 3), 4, (5, 5), dict(padding=2)),
    ("few-positions-many-channels", (2, 64, 7, 7), 256, (3, 3), dict(padding=1)),
    ("many-positions", (1, 32, 40, 40), 48, (3, 3), dict(padding=1)),
]


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("name,xshape,cout,k,kw", CASES, ids=[c[0] for c in CASES])
def test_conv2d_compiled_matches_torch(tmp_path, name, xshape, cout, k, kw, with_bias):
    groups = kw.get("groups", 1)
    x, w = f32(*xshape), f32(cout, xshape[1] // groups, *k)
    b = f32(cout) if with_bias else None

    if with_bias:
        @baremetal_jit(build_dir=str(tmp_path))
        def conv(x, w, b):
            return ops.conv2d(x, w, b, **kw)
        got = conv(x, w, b)
    else:
        @baremetal_jit(build_dir=str(tmp_path))
        def conv(x, w):
            return ops.conv2d(x, w, **kw)
        got = conv(x, w)
    want = torch_conv(x, w, b, **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _relu(y):
    return np.maximum(y, np.zeros((), np.float32))


def _relu6(y):
    return np.minimum(np.maximum(y, np.float32(0)), np.float32(6))


def _clamp_reversed(y):     # max(min(y, 1), -0.5): the same clamp, the other order
    return np.maximum(np.minimum(y, np.float32(1)), np.float32(-0.5))


@pytest.mark.parametrize("act,torch_act,kind", [
    (_relu, torch.relu, "NKRT_ACT_RELU"),
    (_relu6, F.relu6, "NKRT_ACT_CLAMP"),
    (_clamp_reversed, lambda t: torch.clamp(t, -0.5, 1.0), "NKRT_ACT_CLAMP"),
], ids=["relu", "relu6", "clamp"])
@pytest.mark.parametrize("groups", [1, 8], ids=["dense", "depthwise"])
def test_following_clamp_is_fused_into_the_convolution(tmp_path, act, torch_act, kind, groups):
    x, w, b = f32(2, 8, 10, 9) * 3, f32(8, 8 // groups, 3, 3), f32(8)
    x[0, 0, 0, :3] = np.nan       # NaN stays NaN, as np.maximum / np.minimum keep it

    def conv_act(x, w, b):
        return act(ops.conv2d(x, w, b, padding=1, groups=groups))

    src = codegen.generate_c(trace(conv_act, x, w, b, name="conv_act"))
    assert kind in src and src.count("for (") <= 2, src   # no elementwise pass after it
    got = baremetal_jit(build_dir=str(tmp_path))(conv_act)(x, w, b)
    want = torch_act(torch.from_numpy(torch_conv(x, w, b, padding=1, groups=groups))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).any()


def test_clamp_with_other_readers_is_not_fused(tmp_path):
    x, w = f32(1, 4, 6, 6), f32(4, 4, 3, 3)

    def conv_both(x, w):
        y = ops.conv2d(x, w, padding=1)
        return _relu(y), y * 2.0          # the raw result is read too: no fusion

    src = codegen.generate_c(trace(conv_both, x, w, name="conv_both"))
    assert "NKRT_ACT_NONE" in src
    r, y2 = baremetal_jit(build_dir=str(tmp_path))(conv_both)(x, w)
    want = torch_conv(x, w, None, padding=1)
    np.testing.assert_allclose(y2, want * 2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r, np.maximum(want, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_conv_computes_in_float32(tmp_path, dtype):
    import ml_dtypes  # noqa: F401  (bfloat16 as a NumPy dtype)
    dt = np.dtype(dtype)
    x, w, b = (f32(2, 6, 9, 8) * 0.5).astype(dt), (f32(4, 3, 3, 3) * 0.5).astype(dt), \
        f32(4).astype(dt)

    @baremetal_jit(build_dir=str(tmp_path))
    def conv(x, w, b):
        return ops.conv2d(x, w, b, padding=1, groups=2)

    got = conv(x, w, b)
    assert got.dtype == dt
    want = torch_conv(x.astype(np.float32), w.astype(np.float32), b.astype(np.float32),
                      padding=1, groups=2)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)
