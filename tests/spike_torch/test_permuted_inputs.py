"""Transposed and permuted tensors reach eager kernels as they lie in memory
(no contiguous copy per call): the kernel is traced on the contiguous block
and permutes it itself. Results equal eager CPU's."""
from __future__ import annotations

import pytest
import torch

from spike_torch import _C, _generic

F32 = dict(rtol=1.3e-6, atol=1e-5)


def copies_in(fn) -> int:
    """How many clone/contiguous copies one call of ``fn`` makes."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name in ("aten::clone", "aten::contiguous"))


CASES = [
    ("mm of a transpose", lambda a, b, c: a.t() @ b),
    ("mm of two transposes", lambda a, b, c: b.t() @ a.t().t()),
    ("add of a transpose", lambda a, b, c: a.t() + 1.5),
    ("exp of a permute", lambda a, b, c: c.permute(2, 0, 1).exp()),
    ("sum over a permute", lambda a, b, c: c.permute(1, 2, 0).sum(-1)),
    ("a permuted and a contiguous operand", lambda a, b, c: a.t() * a.t().contiguous()),
    ("softmax of a transpose", lambda a, b, c: torch.softmax(c.transpose(0, 2), -1)),
]


@pytest.mark.parametrize("name, fn", CASES, ids=[c[0] for c in CASES])
def test_permuted_inputs_read_as_they_lie(name, fn):
    torch.manual_seed(0)
    a, b, c = torch.randn(64, 32), torch.randn(64, 48), torch.randn(5, 6, 7)
    d = [t.nkipy() for t in (a, b, c)]
    want = fn(a, b, c)
    fn(*d)                                  # built
    fast = _C.eager_cache.eager_stats()["fast_calls"]
    torch.testing.assert_close(fn(*d).cpu(), want, **F32)
    assert _C.eager_cache.eager_stats()["fast_calls"] > fast
    # at most the copies the CPU makes (.contiguous() in the program, the CPU softmax)
    assert copies_in(lambda: fn(*d)) <= copies_in(lambda: fn(a, b, c))


def test_layouts_not_permutations_are_copied_and_written_ones_are_exact():
    torch.manual_seed(1)
    a = torch.randn(16, 12)
    d = a.nkipy()
    # every other column: not a permutation of a block, copied contiguous
    torch.testing.assert_close(d[:, ::2].exp().cpu(), a[:, ::2].exp(), **F32)
    # an op writing a transposed tensor
    for _ in range(2):
        dd, aa = d.clone(), a.clone()
        dd.t().mul_(2.5).add_(1.0)
        aa.t().mul_(2.5).add_(1.0)
        torch.testing.assert_close(dd.cpu(), aa, rtol=0, atol=0)
    # the same shape transposed and contiguous are different kernels' inputs
    t1 = (d.t() * 2.0).cpu()
    t2 = (d.t().contiguous() * 2.0).cpu()
    torch.testing.assert_close(t1, t2, rtol=0, atol=0)


def test_perm_rule():
    x = torch.randn(2, 3, 4).nkipy()
    assert _generic._perm(x) is None
    assert _generic._perm(x.permute(2, 0, 1)) == (1, 2, 0)
    assert x.permute(2, 0, 1).permute(_generic._perm(x.permute(2, 0, 1))).is_contiguous()
    assert _generic._perm(x[:, ::2]) is None
    assert _generic._perm(x.transpose(0, 1)) == (1, 0, 2)
