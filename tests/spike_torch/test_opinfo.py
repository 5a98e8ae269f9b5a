"""PyTorch's own OpInfo samples (torch.testing._internal op_db) run on the nkipy
device for every op with a native (nkipy-compiled) eager kernel, compared with
eager CPU. float32: rtol 1e-4, atol 1e-5; float16/bfloat16: rtol/atol 1e-2."""
from __future__ import annotations

import pytest
import torch

# op_db is imported lazily (inside the tests): importing torch.testing._internal
# changes process-wide torch state (disable_global_flags, ScriptFunction hooks),
# which must not leak into the other test directories at collection time.

NATIVE = {
    ("abs", ""), ("add", ""), ("sub", ""), ("mul", ""), ("div", "no_rounding_mode"),
    ("maximum", ""), ("minimum", ""), ("neg", ""), ("exp", ""), ("log", ""), ("sqrt", ""),
    ("rsqrt", ""), ("tanh", ""), ("sigmoid", ""), ("nn.functional.relu", ""), ("sin", ""),
    ("cos", ""), ("sum", ""), ("mean", ""), ("amax", ""), ("mm", ""), ("bmm", ""),
    ("softmax", ""), ("nn.functional.layer_norm", ""), ("addmm", ""),
}
F32_ONLY = {"nn.functional.layer_norm"}  # native for float32, CPU path for f16/bf16

_ops_cache: list = []


def ops() -> list:
    if not _ops_cache:
        pytest.importorskip("expecttest")
        from torch.testing._internal.common_methods_invocations import op_db

        _ops_cache.extend(o for o in op_db if (o.name, o.variant_test_name) in NATIVE)
    return _ops_cache


def get_op(key):
    return next(o for o in ops() if (o.name, o.variant_test_name) == key)


KEYS = sorted(NATIVE)
TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


def to_device(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("nkipy")
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(a) for a in x)
    return x


def test_all_native_ops_found():
    assert len(ops()) == len(NATIVE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("key", KEYS, ids=lambda k: k[0] + ("_" + k[1] if k[1] else ""))
def test_opinfo_samples(key, dtype):
    from spike_torch import _eager

    op = get_op(key)

    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"{op.name} has no CPU {dtype} support")
    rtol, atol = TOL[dtype]
    before = _eager.stats["device_calls"]
    n = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
        expected = op(sample.input, *sample.args, **sample.kwargs)
        got = op(to_device(sample.input), *to_device(sample.args), **to_device(sample.kwargs))
        assert got.device.type == "nkipy"
        torch.testing.assert_close(got.cpu(), expected, rtol=rtol, atol=atol, equal_nan=True)
        n += 1
    assert n > 0
    if dtype == torch.float32 or op.name not in F32_ONLY:
        assert _eager.stats["device_calls"] > before, "no sample ran on the device"


@pytest.mark.parametrize("name", ["mul", "exp", "tanh", "sum", "mm", "softmax", "sigmoid",
                                  "nn.functional.layer_norm"])
def test_opinfo_backward(name):
    op = get_op((name, ""))
    for sample in list(op.sample_inputs("cpu", torch.float32, requires_grad=True))[:3]:
        if not isinstance(sample.input, torch.Tensor) or sample.input.numel() == 0:
            continue
        expected = op(sample.input, *sample.args, **sample.kwargs)
        expected.sum().backward()
        x = sample.input.detach().to("nkipy").requires_grad_()
        got = op(x, *to_device(sample.args), **to_device(sample.kwargs))
        got.sum().backward()
        torch.testing.assert_close(x.grad.cpu(), sample.input.grad, rtol=1e-4, atol=1e-5)
