"""Compiled equals eager for the registry entries of
spike_torch/lowering/aten_special.py (Chebyshev polynomials, Bessel functions
of the first and second kind, modified Bessel functions of the second kind,
ndtri, zeta), beyond OpInfo's samples: edges (0, +-1, poles, NaN, inf),
degrees where the recurrence overflows, and arguments on both sides of each
method's switch-over point. Helpers are shared with test_lowering_breadth.py.
"""
from __future__ import annotations

import pytest
import torch

from test_lowering_breadth import _aten_ops, check, lowered, rnd  # noqa: F401  (fixture)

_CHEB = [getattr(torch.special, ("shifted_" if s else "") + "chebyshev_polynomial_" + k)
         for s in (0, 1) for k in "tuvw"]


def chebyshev(x, n):
    return tuple(f(x, n) for f in _CHEB)


def chebyshev_scalar_degree(x):
    return tuple(f(x, 5) for f in _CHEB)


def _cheb_args():
    x = torch.tensor([-3.0, -1.0, -0.7, 0.0, 0.3, 0.5, 1.0, 1.2, 2.5, float("nan"), 0.9, -1.5,
                      40.0, -40.0, 0.2, 0.999, 1.0, -1.0, 0.0, 0.5, float("nan")])
    n = torch.tensor([3.0, 5.0, 9.0, 7.0, 12.0, 2.7, 8.0, 6.0, 10.0, 0.0, -1.0, 11.0,
                      25.0, 27.0, 30.0, 50.0, 9.0, 9.0, 8.0, float("nan"), 1.0])
    return x, n


def test_chebyshev_polynomials(lowered):
    x, n = _cheb_args()
    check(lowered, chebyshev, x, n)
    check(lowered, chebyshev_scalar_degree, rnd(3, 4, lo=-1.5, hi=1.5))


def test_chebyshev_polynomials_where_eager_overflows(lowered):
    """float32's recurrence overflows to inf, then inf - inf: NaN two degrees later."""
    x = torch.tensor([3.0, 3.0, 3.0, 3.0, -3.0, -3.0, 0.9])
    n = torch.tensor([79.0, 80.0, 81.0, 82.0, 81.0, 82.0, 60.0])
    check(lowered, chebyshev, x, n)


def bessel(x):
    s = torch.special
    return (s.bessel_j0(x), s.bessel_j1(x), s.bessel_y0(x), s.bessel_y1(x),
            s.modified_bessel_k0(x), s.modified_bessel_k1(x),
            s.scaled_modified_bessel_k0(x), s.scaled_modified_bessel_k1(x))


_BESSEL_EDGES = [0.0, -0.0, 1e-6, 1e-30, 2.0, 2.0001, 11.999, 12.0, 12.001, 1e4, 1e3,
                 -5.0, float("inf"), float("-inf"), float("nan"), 88.0, 700.0]


def test_bessel_functions_and_edges(lowered):
    """One compile (the eight functions' graph compiles in about 17 s on a
    loaded host) for the random values on [-30, 30] and [0, 3] and the edges
    (zeros, tiny, the series/asymptotic switch points, large, infinities, NaN),
    as a 2-D tensor of 15 x 7."""
    x = torch.cat([rnd(48, lo=-30.0, hi=30.0), rnd(40, lo=0.0, hi=3.0, seed=3),
                   torch.tensor(_BESSEL_EDGES)]).reshape(15, 7)
    check(lowered, bessel, x)


def ndtri_zeta(p, x, q):
    return torch.special.ndtri(p), torch.special.zeta(x, q), torch.special.zeta(x, 2.5)


def test_ndtri_and_zeta(lowered):
    p = torch.tensor([0.0, 1.0, -0.1, 1.1, 1e-30, 0.5, 1 - 1e-7, 1e-40, 0.02, 0.3, 0.97,
                      float("nan"), 0.6, 0.999])
    x = torch.tensor([2.0, 2.0, 1.0, 0.5, 3.0, 3.0, 3.0, 4.0, -2.0, 2.5, 1.5, 60.0, 3.0, 4.0])
    q = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.5, 0.0, -2.5, -3.5, 2.0, -1.5, 0.01, 3.0, -20.5,
                      -7.25])
    # the edges above and 30 random values in one compile
    check(lowered, ndtri_zeta, torch.cat([p, rnd(30, lo=0.0, hi=1.0)]),
          torch.cat([x, rnd(30, lo=1.1, hi=9.0, seed=1)]),
          torch.cat([q, rnd(30, lo=0.05, hi=20.0, seed=2)]))


def airy(x):
    return torch.special.airy_ai(x)


def test_airy_ai(lowered):
    x = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, 5.9, 6.1, 30.0, 100.0,
                      -7.9, -8.1, -30.0, -100.0, 1e4, 20.0, 1.0, -1.0, -3.3])
    check(lowered, airy, x)
    check(lowered, airy, rnd(40, lo=-12.0, hi=10.0))


def test_every_aten_special_entry_has_a_case():
    from spike_torch.lowering import aten_special
    from spike_torch.lowering.registry import _REGISTRY

    mine = {n for n, f in _REGISTRY.items() if getattr(f, "__module__", "") == aten_special.__name__}
    x, n = _cheb_args()
    seen = _aten_ops(chebyshev, (x, n)) | _aten_ops(chebyshev_scalar_degree, (x,))
    seen |= _aten_ops(bessel, (x,)) | _aten_ops(ndtri_zeta, (x.abs() / 50, x + 2, n + 1))
    seen |= _aten_ops(lambda a: torch.special.zeta(3.0, a), (n.abs() + 1,))
    seen |= _aten_ops(airy, (x,))
    # the x_scalar overloads (a Python number as x) are Dynamo-constant-folded away
    assert sorted(mine - seen) == sorted(
        f"aten.special_{p}chebyshev_polynomial_{k}.x_scalar" for p in ("", "shifted_")
        for k in "tuvw")
