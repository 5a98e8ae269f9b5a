"""Python kernels of the nkipy device: random fills through the device's
generators, and device-tensor printing without CPU-fallback noise.

Metadata kernels, copies, fills and the CPU fallback are in C++
(csrc/nkipy_device.cpp). Kernels registered here override the fallback.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from . import device_module

_lib = torch.library.Library("aten", "IMPL")  # kept alive for the process


def _random_fill(method: str) -> Callable[..., torch.Tensor]:
    """A kernel running ``Tensor.<method>`` on a host copy with the nkipy generator's state."""

    def kernel(self: torch.Tensor, *args: Any, generator: Optional[torch.Generator] = None,
               **kwargs: Any) -> torch.Tensor:
        gen = generator if generator is not None else device_module.default_generator(
            self.device.index)
        host_gen = torch.Generator()
        host_gen.set_state(gen.get_state())
        args = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
        with torch.no_grad():
            host = torch.empty(self.shape, dtype=self.dtype)
            getattr(host, method)(*args, generator=host_gen, **kwargs)
            gen.set_state(host_gen.get_state())
            self.copy_(host)
        return self

    return kernel


for _name, _method in (
    ("normal_", "normal_"),
    ("uniform_", "uniform_"),
    ("random_", "random_"),
    ("random_.from", "random_"),
    ("random_.to", "random_"),
    ("bernoulli_.float", "bernoulli_"),
    ("bernoulli_.Tensor", "bernoulli_"),
    ("exponential_", "exponential_"),
    ("log_normal_", "log_normal_"),
    ("cauchy_", "cauchy_"),
    ("geometric_", "geometric_"),
):
    _lib.impl(_name, _random_fill(_method), "PrivateUse1")


# ---- printing ------------------------------------------------------------------

_orig_str = torch._tensor_str._str


def _str(self: torch.Tensor, *, tensor_contents: Optional[str] = None) -> str:
    """Prints an nkipy tensor from a host copy of its data (one D2H copy, no fallback ops)."""
    if tensor_contents is None and self.device.type == "nkipy" and type(self) in (
            torch.Tensor, torch.nn.Parameter) and not self.is_sparse:
        with torch.no_grad():
            host = self.detach().cpu()
        indent = len("tensor(") if type(self) is torch.Tensor else len("Parameter containing:\ntensor(")
        if host.numel() == 0 and host.dim() != 1:
            tensor_contents = "[]"
        else:
            tensor_contents = torch._tensor_str._tensor_str(host, len("tensor("))
        del indent
    return _orig_str(self, tensor_contents=tensor_contents)


torch._tensor_str._str = _str
