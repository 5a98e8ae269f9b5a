"""A hand-written nkipy kernel as a torch custom op, inside a compiled graph."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from nkipy.core import ops  # noqa: E402
from torch_to_nkipy import NKIOpRegistry, init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))


@NKIOpRegistry.register("mylib::rms_norm")
def rms_norm_kernel(x, w):
    """A NumPy-style nkipy kernel (runs with NumPy, traces into the nkipy IR)."""
    return ops.rms_norm(x, w, eps=1e-6)


@torch.library.custom_op("mylib::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return rms_norm_kernel(x, w)          # eager calls compile and run it on the device


@rms_norm.register_fake
def _(x, w):
    return torch.empty_like(x)


def block(x, w, proj):
    return rms_norm(x, w) @ proj


compiled = torch.compile(block, backend="nkipy", fullgraph=True)
x, w, proj = torch.randn(8, 32), torch.rand(32) + 0.5, torch.randn(32, 16)
ref = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w) @ proj
out = compiled(x, w, proj)
print("eager custom op vs reference:", (rms_norm(x, w) @ proj - ref).abs().max().item())
print("compiled vs reference:", (out - ref).abs().max().item())
assert torch.allclose(out, ref, atol=1e-4)
