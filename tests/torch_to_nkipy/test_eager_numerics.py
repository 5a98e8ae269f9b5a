"""Results that must equal eager PyTorch's on the CPU, found by a review of the
spyre device (they hold for every device kernel): a Python scalar beside
float16/bfloat16 tensors in add/sub/mul/div is taken in float32, as the CPU
kernels take it (x * 1e-7 was 19 % off in float16); bfloat16 is a float type
to sign tests."""
from __future__ import annotations

import pytest
import torch

import spike_torch  # noqa: F401

F = torch.nn.functional


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,fn,single", [
    ("mul tiny", lambda x: x * 1e-7, True), ("mul", lambda x: x * 0.1, True),
    ("div", lambda x: x / 0.3, True), ("add", lambda x: x + 0.1, True),
    ("sub", lambda x: x - 0.1, True), ("rsub", lambda x: 0.7 - x, True),
    ("leaky_relu", lambda x: F.leaky_relu(-x, 1e-6), True),
    ("rdiv", lambda x: 0.3 / x, False), ("mul_", lambda x: x.clone().mul_(0.1), False),
    ("mul big int", lambda x: x * 70000 / 70000, False),
])
def test_half_with_a_python_scalar(backend, dtype, name, fn, single):
    """Eagerly, and compiled where the program is one op (a compiled graph of
    several keeps half intermediates in float32, as inductor does)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(257, generator=g) * 100 + 1).to(dtype)
    want = fn(x)
    assert torch.equal(fn(x.to("nkipy")).cpu(), want), name
    if single:
        assert torch.equal(torch.compile(fn, backend="nkipy")(x), want), name


def test_bfloat16_sign_tests(backend):
    x = torch.tensor([-0.0, 0.0, -1.5], dtype=torch.bfloat16)
    for fn in (torch.signbit, lambda t: torch.copysign(torch.ones_like(t), t)):
        want = fn(x)
        assert torch.equal(fn(x.to("nkipy")).cpu(), want)
        assert torch.equal(torch.compile(fn, backend="nkipy")(x), want)
