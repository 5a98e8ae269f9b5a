"""Python kernels of the nkipy device: random fills through the device's
generators, copies of conjugate and negative views, group norm with float32
statistics, and device-tensor printing without CPU-fallback noise.

Metadata kernels, copies, fills and the CPU fallback are in C++
(csrc/storage_io.cpp, csrc/tensor_ops.cpp, csrc/cpu_fallback.cpp). Kernels
registered here override the fallback.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch._decomp

from . import device_module

_lib = device_module.Library("aten", "IMPL")  # kept alive; kernels never compiled by Dynamo


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


# ---- copies of conjugate / negative views --------------------------------------
#
# A complex result can carry the lazy conjugate bit (torch.fft.ifft's does) and
# any tensor the negative bit. PyTorch resolves those bits for an op it has no
# kernel for with a fallback that clones the input first; for a device whose
# copies go through aten::_copy_from, that clone is itself such a copy, and the
# fallback recursed until the stack overflowed (SIGSEGV). These kernels, on the
# Conjugate and Negative keys, copy the raw data of views without the bits and
# apply whatever conjugation or negation the two sides' bits differ by on the
# host, so no copy ever reaches the fallback.


def _raw(t: torch.Tensor) -> torch.Tensor:
    """A view of ``t``'s data with neither the conjugate nor the negative bit."""
    if t.is_conj():
        t = t.conj()
    if t.is_neg():
        t = t._neg_view()
    return t


def _copy_from_math_bits(self: torch.Tensor, dst: torch.Tensor,
                         non_blocking: bool = False) -> torch.Tensor:
    conj, neg = self.is_conj() != dst.is_conj(), self.is_neg() != dst.is_neg()
    src = _raw(self)
    if conj or neg:
        src = src.cpu()
        if conj:
            src = src.conj_physical()
        if neg:
            src = src.neg()
    _raw(dst).copy_(src, non_blocking=non_blocking)
    return dst


def _copy_from_and_resize_math_bits(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    dst.resize_(self.shape)
    return _copy_from_math_bits(self, dst)


for _key in ("Conjugate", "Negative"):
    _lib.impl("_copy_from", _copy_from_math_bits, _key)
    _lib.impl("_copy_from_and_resize", _copy_from_and_resize_math_bits, _key)


# ---- group norm ------------------------------------------------------------------
#
# PyTorch's native_group_norm has kernels for CPU and CUDA only; on other devices
# its composite form normalises through batch norm in the input's own dtype, so
# bfloat16 came out twice as far from float32 as CPU bfloat16. The reference
# decomposition computes mean and variance in float32 for half types, as the CPU
# kernel does.

_group_norm_decomposition = torch._decomp.decomposition_table[
    torch.ops.aten.native_group_norm.default]


def _native_group_norm(input: torch.Tensor, weight: Optional[torch.Tensor],
                       bias: Optional[torch.Tensor], n: int, c: int, hxw: int, group: int,
                       eps: float):
    return _group_norm_decomposition(input, weight, bias, n, c, hxw, group, eps)


_lib.impl("native_group_norm", _native_group_norm, "PrivateUse1")


# ---- printing ------------------------------------------------------------------

_orig_str = torch._tensor_str._str


def _str(self: torch.Tensor, *, tensor_contents: Optional[str] = None) -> str:
    """Prints an nkipy tensor from a host copy of its data (one D2H copy, no fallback ops)."""
    if tensor_contents is None and self.device.type == torch._C._get_privateuse1_backend_name() and type(self) in (
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
