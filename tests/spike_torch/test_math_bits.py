"""Tensors with the lazy conjugate or negative bit on the nkipy device.

torch.fft.ifft (and hfft, ihfft, their 2-D and n-D forms) returns a conjugate
view; copying or cloning one used to recurse through PyTorch's conjugate
fallback until the process died with SIGSEGV."""
from __future__ import annotations

import pytest
import torch

DEV = "nkipy"


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["ifft", "hfft", "ihfft", "ifft2", "hfft2", "ihfft2",
                                  "ifftn", "hfftn", "ihfftn", "fft", "rfft", "irfft"])
def test_fft_family_runs_and_matches_cpu(name):
    g = torch.Generator().manual_seed(0)
    real = name.startswith(("ihfft", "rfft"))
    x = torch.randn(4, 6, generator=g, dtype=torch.float32 if real else torch.complex64)
    fn = getattr(torch.fft, name)
    _close(fn(x.to(DEV)), fn(x))


@pytest.mark.parametrize("view", ["conj", "neg", "conj_neg"])
def test_copies_of_math_bit_views_both_ways(view):
    x = torch.randn(5, 3, dtype=torch.complex64)

    def make(t):
        if "conj" in view:
            t = t.conj()
        if "neg" in view:
            t = t._neg_view()
        return t

    want = make(x).resolve_conj().resolve_neg()
    _close(make(x).to(DEV), want)                        # host view -> device
    d = make(x.to(DEV))
    _close(d, want)                                       # device view -> host
    _close(d.clone(), want)                               # device view -> device
    out = torch.empty(5, 3, dtype=torch.complex64, device=DEV)
    out.copy_(d)
    _close(out, want)
    host_view = make(torch.zeros(5, 3, dtype=torch.complex64))
    host_view.copy_(x.to(DEV))                            # device -> host view
    torch.testing.assert_close(host_view.resolve_conj().resolve_neg(), x)


def test_op_on_a_device_conjugate_view():
    x = torch.randn(8, dtype=torch.complex64)
    y = torch.fft.ifft(x.to(DEV))
    _close(y * 2, torch.fft.ifft(x) * 2)
    _close(y.abs(), torch.fft.ifft(x).abs())


def test_writes_through_real_imag_and_complex_views_reach_the_tensor():
    """view_as_real / view_as_complex ran through the CPU fallback, which
    returned copies: y.real.copy_(...) left y unchanged."""
    y = torch.zeros(2, 3, dtype=torch.complex64, device=DEV)
    y.real.copy_(torch.ones(2, 3))
    y.imag.fill_(2.0)
    _close(y, torch.full((2, 3), 1 + 2j, dtype=torch.complex64))
    y.conj().imag.copy_(torch.full((2, 3), 5.0))
    _close(y, torch.full((2, 3), 1 - 5j, dtype=torch.complex64))
    z = torch.randn(2, 3, 2, device=DEV)
    torch.view_as_complex(z).mul_(2)
    want = z.cpu()
    assert torch.view_as_real(torch.view_as_complex(z)).data_ptr() == z.data_ptr()
    _close(torch.view_as_real(torch.view_as_complex(z)), want)


def test_view_ops_without_a_device_kernel_are_refused_not_copied():
    import spike_torch

    lib = torch.library.Library("nkipy_test_views", "DEF")
    lib.define("myview(Tensor(a) self) -> Tensor(a)")
    lib.impl("myview", lambda t: t.view(t.shape), "CPU")
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match=r"operator 'nkipy_test_views::myview' returns a view "
                       r"of its input, which the CPU fallback can only return as a copy"):
        torch.ops.nkipy_test_views.myview(x)
    del spike_torch
