"""In-place eager ops on the nkipy device update their tensor where it lies:
the kernel's output aliases the input it overwrites (``a.add_(b)``, and
``addcmul_``'s ``addcmul.out(self, ..., out=self)``), with no fresh buffer and
no copy afterwards, and the result of CPU eager -- also where the written
tensor is not contiguous, or is read through another argument too
(``a.add_(a)``, ``a.addmm_(a, a)``), where the kernel works on a copy. Each
case runs twice: the first call plans the kernel (Python), the second comes
from the C++ call cache."""
from __future__ import annotations

import pytest
import torch

import spike_torch
from spike_torch import _generic

DEV = "nkipy"
EXACT = dict(rtol=0, atol=0)
#: float32 products: the kernel's GEMM sums in another order than the CPU's
MATMUL = dict(rtol=1e-5, atol=1e-5)


#: (name, fn(self, other) updating self, tolerance); other is of self's shape
CASES = [
    ("add_", lambda a, b: a.add_(b), EXACT),
    ("sub_ alpha", lambda a, b: a.sub_(b, alpha=0.5), EXACT),
    ("mul_ scalar", lambda a, b: a.mul_(0.75), EXACT),
    ("div_", lambda a, b: a.div_(b.abs() + 1), EXACT),
    ("addcmul_", lambda a, b: a.addcmul_(b, b, value=0.25), EXACT),
    ("addcdiv_", lambda a, b: a.addcdiv_(b, b.abs() + 1, value=-0.5), EXACT),
    ("lerp_ scalar", lambda a, b: a.lerp_(b, 0.3), EXACT),
    # the CPU's vector loop fuses lerp's multiply-add (one rounding): an ulp apart
    ("lerp_ tensor", lambda a, b: a.lerp_(b, b.sigmoid()), dict(rtol=1.3e-6, atol=1e-5)),
    ("clamp_", lambda a, b: a.clamp_(-0.5, 0.5), EXACT),
    ("neg_", lambda a, b: a.neg_(), EXACT),
    ("exp_", lambda a, b: a.exp_(), dict(rtol=1.3e-6, atol=1e-5)),
    ("copy_ from float64", lambda a, b: a.copy_(b.double() * 3), EXACT),
    ("masked_fill_", lambda a, b: a.masked_fill_(b > 0, -2.0), EXACT),
    ("where out=self", lambda a, b: torch.where(b > 0, a, b, out=a), EXACT),
    ("cumsum_", lambda a, b: a.cumsum_(0), dict(rtol=1.3e-6, atol=1e-5)),
    ("index_add_", lambda a, b: a.index_add_(0, torch.tensor([2, 0, 2], device=a.device),
                                            b[:3]), EXACT),
    ("addmm_", lambda a, b: a.addmm_(b, b.t(), beta=0.5), MATMUL),
]


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("name, fn, tol", CASES, ids=[c[0] for c in CASES])
def test_inplace_matches_cpu(name, fn, tol, layout):
    torch.manual_seed(0)
    for n in (8, 33):       # a new shape: a second kernel
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(2):  # planned in Python, then from the C++ cache
            x, y = a.clone(), b.clone()
            dx, dy = a.to(DEV), b.to(DEV)
            if layout == "transposed":
                x, dx = x.t(), dx.t()
            want, got = fn(x, y), fn(dx, dy)
            assert got is dx
            torch.testing.assert_close(dx.cpu(), x, **tol)
            torch.testing.assert_close(dy.cpu(), y, **EXACT)


@pytest.mark.parametrize("name, fn", [
    ("add_", lambda a, b: a.add_(b)),
    ("mul_ scalar", lambda a, b: a.mul_(0.999)),
    ("addcmul_ (out=self)", lambda a, b: a.addcmul_(b, b, value=0.01)),
    ("lerp_ (out=self)", lambda a, b: a.lerp_(b, 0.1)),
    ("addcdiv_ (out=self)", lambda a, b: a.addcdiv_(b, b, value=0.01)),
])
def test_inplace_allocates_nothing(name, fn):
    """A warm in-place call on contiguous tensors writes the tensor itself: no
    result buffer, no copy's (only a small buffer of the call's Python
    scalars, where it has any: spike_torch._scalar_slots)."""
    a, b = torch.randn(4096).to(DEV), torch.rand(4096).add(1).to(DEV)
    want_a = a.cpu()
    for _ in range(2):
        fn(a, b)
        fn(want_a, b.cpu())
    before = torch.nkipy.memory_stats()["requested_bytes.all.allocated"]
    fn(a, b)
    fn(want_a, b.cpu())
    assert torch.nkipy.memory_stats()["requested_bytes.all.allocated"] - before <= 64
    torch.testing.assert_close(a.cpu(), want_a, **EXACT)


@pytest.mark.parametrize("name, fn, tol", [
    ("add_ self", lambda a: a.add_(a), EXACT),
    ("mul_ self", lambda a: a.mul_(a), EXACT),
    ("addcmul_ self", lambda a: a.addcmul_(a, a, value=0.5), EXACT),
    ("lerp_ self weight", lambda a: a.lerp_(a * 2, a.sigmoid()), dict(rtol=1.3e-6, atol=1e-5)),
    ("copy_ own transpose", lambda a: a.copy_(a.t().contiguous()), EXACT),
])
def test_written_tensor_read_through_another_argument(name, fn, tol):
    """The tensor written is also another argument: the kernel reads the
    values before the call, as the CPU does."""
    torch.manual_seed(1)
    a = torch.randn(16, 16)
    for _ in range(2):
        x, dx = a.clone(), a.to(DEV)
        fn(x)
        fn(dx)
        torch.testing.assert_close(dx.cpu(), x, **tol)


@pytest.mark.parametrize("name, fn, want", [
    ("mm out=self", lambda a, b: torch.mm(a, b, out=a), lambda a, b: a @ b),
    ("mm out=other operand", lambda a, b: torch.mm(a, b, out=b), lambda a, b: a @ b),
    ("addmm_ self", lambda a, b: a.addmm_(a, a), lambda a, b: a + a @ a),
])
def test_product_written_over_its_operand(name, fn, want):
    """A product written over one of its operands is the product of the
    values before the call (the kernel reads a copy). The CPU's BLAS call
    writes while it reads there, giving results that depend on the size
    (``torch.mm(a, b, out=a)`` at 8 x 8 is not ``a @ b``): the mathematical
    result is the reference."""
    torch.manual_seed(3)
    for n in (8, 33):
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(2):
            da, db = a.to(DEV), b.to(DEV)
            out = fn(da, db)
            torch.testing.assert_close(out.cpu(), want(a, b), **MATMUL)


def test_out_of_another_tensor_is_not_updated_in_place():
    """A kernel built for ``addcmul(a, ..., out=a)`` writes into its input;
    the next call with ``out=`` a different tensor is another kernel (the
    cache key says which argument the written tensor is): the input stays."""
    torch.manual_seed(2)
    a, b, c = torch.randn(64), torch.randn(64), torch.randn(64)
    da, db, dc = a.to(DEV), b.to(DEV), c.to(DEV)
    for _ in range(2):
        torch.addcmul(da, db, db, value=0.5, out=da)
    out = torch.empty(64, device=DEV)
    for _ in range(2):
        torch.addcmul(dc, db, db, value=0.5, out=out)
        torch.testing.assert_close(dc.cpu(), c, **EXACT)
        torch.testing.assert_close(out.cpu(), torch.addcmul(c, b, b, value=0.5), **EXACT)
    want = a.clone()
    for _ in range(2):
        want.addcmul_(b, b, value=0.5)
    torch.testing.assert_close(da.cpu(), want, **EXACT)


def test_inplace_plan_aliases_the_written_input():
    """The plan of an in-place op says which kernel input each written
    tensor is updated in (the kernel's output aliases it)."""
    a, b = torch.randn(8).to(DEV), torch.randn(8).to(DEV)
    _generic.clear_cache()
    a.add_(b)
    torch.addcmul(a, b, b, out=a)
    torch.add(b, 1.0, out=a)        # a is not read: written, not updated in place
    plans = {p.info.name: p for p in _generic._cache.values() if hasattr(p, "inplace")}
    assert plans["aten::add_.Tensor"].inplace == [0]
    assert plans["aten::addcmul.out"].inplace == [0]
    assert plans["aten::add.out"].inplace == [-1]


@pytest.mark.parametrize("name, fn, error", [
    ("index_put_ out of range", lambda a: a.index_put_((torch.tensor([100], device=a.device),),
                                                       torch.tensor([-1], device=a.device)),
     IndexError),
    ("floor_divide_ by zero", lambda a: a.floor_divide_(torch.zeros_like(a)), RuntimeError),
])
def test_a_failing_kernel_leaves_its_argument(name, fn, error):
    """A kernel that can fail (an index check, an integer division by zero)
    does not update in place: when it fails the argument is as it was, as on
    the CPU."""
    a = torch.arange(1, 9)
    with pytest.raises(error):
        fn(a.clone())
    d = a.to(DEV)
    for _ in range(2):
        with pytest.raises(error):
            fn(d)
        torch.testing.assert_close(d.cpu(), a, **EXACT)
    plans = [p for p in _generic._cache.values() if hasattr(p, "inplace") and p.mutations]
    assert plans and all(j == -1 for p in plans[-1:] for j in p.inplace)
