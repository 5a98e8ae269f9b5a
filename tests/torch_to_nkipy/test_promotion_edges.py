"""Results the CPU gives at the edges of type promotion, eager on the nkipy
device and compiled with the nkipy backend (found by an adversarial probe,
each once silently different):

- a Python int outside an integer tensor's dtype keeps its value in an op
  computing in floats (``uint8 200 / -3`` is -66.7) and is converted to the
  dtype, wrapping, in one computing in the integer type (``uint8 < -3``
  compares with 253, ``int8 + 300`` adds 44, also beside a 0-dim tensor,
  where the int promotes nothing);
- an integer tensor beside a float16/bfloat16 operand is rounded to the half
  type first (``int32 70000 * tensor(0.5, f16)`` is inf);
- ``int ** bool_tensor`` is an int64 power; ``searchsorted`` puts NaN last;
- ``mean(int_tensor, dtype=float16)`` sums in float32; ``relu(-0.0)`` is -0.0.

Exact comparisons throughout (the CPU's own results, dtype included)."""
from __future__ import annotations

import pytest
import torch

import spike_torch  # noqa: F401  (registers the device)

U8, I8, I16, I32 = torch.uint8, torch.int8, torch.int16, torch.int32
F16, BF16 = torch.float16, torch.bfloat16

CASES = [
    # (name, fn, tensors)
    ("uint8 / -3", lambda t: t / -3, [torch.tensor([200, 3], dtype=U8)]),
    ("int8 / 300", lambda t: t / 300, [torch.tensor([100, -7], dtype=I8)]),
    ("int32 / 2**40", lambda t: t / 2 ** 40, [torch.tensor([100], dtype=I32)]),
    ("copysign uint8 -3", lambda t: torch.copysign(t, -3), [torch.tensor([200], dtype=U8)]),
    ("xlogy int8 2**40", lambda t: torch.xlogy(t, 2 ** 40), [torch.tensor([3], dtype=I8)]),
    ("int8 + 300", lambda t: t + 300, [torch.tensor([100, -100], dtype=I8)]),
    ("int8 // 300", lambda t: t // 300, [torch.tensor([100, -100], dtype=I8)]),
    ("int8 fmod 300", lambda t: torch.fmod(t, 300), [torch.tensor([100, -100], dtype=I8)]),
    ("int8 & 258", lambda t: t & 258, [torch.tensor([2, 3], dtype=I8)]),
    ("0-dim uint8 + -3", lambda t: t + -3, [torch.tensor(200, dtype=U8)]),
    ("0-dim uint8 * 300", lambda t: t * 300, [torch.tensor(200, dtype=U8)]),
    ("0-dim uint8 - 300", lambda t: t - 300, [torch.tensor(200, dtype=U8)]),
    ("-3 - 0-dim uint8", lambda t: -3 - t, [torch.tensor(200, dtype=U8)]),
    ("0-dim uint8 // -3", lambda t: t // -3, [torch.tensor(200, dtype=U8)]),
    ("0-dim uint8 % -3", lambda t: t % -3, [torch.tensor(200, dtype=U8)]),
    ("0-dim uint8 / -3", lambda t: t / -3, [torch.tensor(200, dtype=U8)]),
    ("0-dim int8 * 300", lambda t: t * 300, [torch.tensor(-100, dtype=I8)]),
    ("0-dim int32 + 2**40", lambda t: t + 2 ** 40, [torch.tensor(7, dtype=I32)]),
    ("uint8 clamp(min=-3)", lambda t: torch.clamp(t, min=-3), [torch.tensor([0, 200, 255], dtype=U8)]),
    ("uint8 clamp(max=-3)", lambda t: torch.clamp(t, max=-3), [torch.tensor([0, 200, 255], dtype=U8)]),
    ("uint8 < -3", lambda t: t < -3, [torch.tensor([0, 200, 255], dtype=U8)]),
    ("uint8 == 456", lambda t: t == 456, [torch.tensor([0, 200, 255], dtype=U8)]),
    ("int8 < 300", lambda t: t < 300, [torch.tensor([100, 43, 45], dtype=I8)]),
    ("uint8 < tensor(-3)", lambda t, s: t < s, [torch.tensor([0, 200, 255], dtype=U8),
                                                torch.tensor(-3)]),
    ("uint8 max tensor(-3)", lambda t, s: torch.maximum(t, s.to(U8)),
     [torch.tensor([0, 200, 255], dtype=U8), torch.tensor(-3)]),
    ("int32 * f16 0-dim", lambda t, s: t * s, [torch.tensor([70000, 3], dtype=I32),
                                                torch.tensor(0.5, dtype=F16)]),
    ("int32 / f16 0-dim", lambda t, s: t / s, [torch.tensor([70000, 3], dtype=I32),
                                                torch.tensor(3.0, dtype=F16)]),
    ("int16 % f16 0-dim", lambda t, s: t % s, [torch.tensor([32767], dtype=I16),
                                                torch.tensor(3.0, dtype=F16)]),
    ("int16 fmod bf16", lambda t, s: torch.fmod(t, s), [torch.tensor([32767, 257], dtype=I16),
                                                        torch.tensor([3.0, 2.0], dtype=BF16)]),
    ("f16 + int32", lambda s, t: s + t, [torch.tensor([1.0, 2.0], dtype=F16),
                                          torch.tensor([70000, 2049], dtype=I32)]),
    ("2 ** bool", lambda t: 2 ** t, [torch.tensor([True, False])]),
    ("pow(3, bool)", lambda t: torch.pow(3, t), [torch.tensor([True, False])]),
    ("searchsorted nan", lambda s, v: torch.searchsorted(s, v),
     [torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([float("nan"), 0.5, -2.0])]),
    ("searchsorted right nan", lambda s, v: torch.searchsorted(s, v, right=True),
     [torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([float("nan"), 0.0, 1.0])]),
    ("bucketize nan", lambda v, s: torch.bucketize(v, s),
     [torch.tensor([float("nan"), 0.5]), torch.tensor([-1.0, 0.0, 1.0])]),
    ("mean int32 dtype f16", lambda t: t.mean(dtype=F16),
     [torch.tensor([100000, -100000], dtype=I32)]),
    ("mean int32 dim dtype bf16", lambda t: t.mean(0, dtype=BF16),
     [torch.tensor([[-200000, 1], [100000, 2], [1, 3]], dtype=I32)]),
]


def _check(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name, fn, ts", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_cpu(name, fn, ts):
    want = fn(*ts)
    for _ in range(2):     # planned in Python, then from the C++ call cache
        _check(fn(*[t.to("nkipy") for t in ts]), want)


@pytest.mark.parametrize("name, fn, ts", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_cpu(backend, name, fn, ts):
    want = fn(*ts)
    compiled = torch.compile(fn, backend="nkipy")
    _check(compiled(*[t.to("nkipy") for t in ts]), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_relu_keeps_negative_zero(backend, dtype):
    """relu(-0.0) is -0.0 on the CPU (x where it is not below zero); NaN stays."""
    x = torch.tensor([-0.0, 0.0, float("nan"), -1.0, 2.0], dtype=dtype)
    want = torch.relu(x)
    for fn in (torch.relu, torch.compile(torch.relu, backend="nkipy")):
        got = fn(x.to("nkipy")).cpu()
        assert torch.equal(got.signbit(), want.signbit())
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
