"""Hybrid execution: ops without a registry entry run on the CPU, the rest on the device."""
import logging
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from torch_to_nkipy import init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"),
                   log_level=logging.INFO)


def f(x, w):
    h = torch.tanh(x @ w)                 # device kernel 1
    h = torch.special.bessel_j0(h)        # not in the registry: eager PyTorch on the CPU
    return torch.softmax(h * 2, dim=-1)   # device kernel 2


compiled = torch.compile(f, backend="nkipy", fullgraph=True)
x, w = torch.randn(4, 16), torch.randn(16, 8)
out = compiled(x, w)
print("max abs difference vs eager:", (out - f(x, w)).abs().max().item())
assert torch.allclose(out, f(x, w), atol=1e-5)
