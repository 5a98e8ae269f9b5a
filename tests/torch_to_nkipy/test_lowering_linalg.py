"""Compiled equals eager for the registry entries of
spike_torch/lowering/aten_linalg.py (LU factorization, unpacking, LU solves,
linalg.solve_ex, linalg.inv_ex): square, wide and tall matrices, batches with
broadcasting, the vector right-hand side, and singular matrices (the zero
pivot reported in ``info``, as LAPACK). Helpers are shared with
test_lowering_breadth.py.
"""
from __future__ import annotations

import torch

from test_lowering_breadth import _aten_ops, check, lowered, rnd  # noqa: F401  (fixture)


def lu_family(a, w, t, b, v):
    lu, piv, info = torch.linalg.lu_factor_ex(a)
    return (lu, piv, info, torch.linalg.lu(w), torch.linalg.lu(t), torch.lu(w, get_infos=True),
            torch.lu_unpack(*torch.linalg.lu_factor_ex(t)[:2]),
            torch.linalg.lu_solve(lu, piv, b), torch.lu_solve(b, lu, piv),
            torch.linalg.lu_solve(lu, piv, b, adjoint=True),
            torch.linalg.lu_solve(lu, piv, b.mT, left=False),
            torch.linalg.lu_solve(lu, piv, b.mT, left=False, adjoint=True),
            torch.linalg.solve_ex(a, b), torch.linalg.solve_ex(a, v), torch.linalg.inv_ex(a))


def _well_conditioned(*shape, seed=0):
    n = shape[-1]
    return rnd(*shape, seed=seed) + 4 * torch.eye(n)


def test_lu_solve_inverse(lowered):
    a = _well_conditioned(2, 5, 5)
    check(lowered, lu_family, a, rnd(3, 5, seed=1), rnd(2, 6, 4, seed=2), rnd(2, 5, 3, seed=3),
          rnd(2, 5, seed=4))


def singular(a, b):
    return torch.linalg.lu_factor_ex(a), torch.linalg.inv_ex(a)[1], torch.linalg.solve_ex(a, b)[1]


def test_singular_matrices_report_the_zero_pivot(lowered):
    a = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]],
                      [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    check(lowered, singular, a, rnd(2, 3, 1))


def big(a):
    return torch.linalg.inv_ex(a)


def test_matrices_past_the_size_limit_run_on_the_cpu(lowered):
    check(lowered, big, _well_conditioned(40, 40), cpu=["aten.linalg_inv_ex.default"])


def test_every_aten_linalg_entry_has_a_case():
    from spike_torch.lowering import aten_linalg
    from spike_torch.lowering.registry import _REGISTRY

    mine = {n for n, f in _REGISTRY.items() if getattr(f, "__module__", "") == aten_linalg.__name__}
    a = _well_conditioned(2, 5, 5)
    seen = _aten_ops(lu_family, (a, rnd(3, 5, seed=1), rnd(2, 6, 4, seed=2), rnd(2, 5, 3, seed=3),
                                 rnd(2, 5, seed=4)))
    seen |= _aten_ops(qr_family, _qr_args())
    assert sorted(mine - seen) == []


def qr_family(a, t, c, cr):
    packed, tau = torch.geqrf(a)
    pt, taut = torch.geqrf(t)
    return (packed, tau, torch.linalg.qr(a), torch.linalg.qr(t), torch.linalg.qr(t, mode="complete"),
            torch.linalg.qr(a.mT, mode="r")[1], torch.linalg.householder_product(pt, taut),
            torch.ormqr(packed, tau, c), torch.ormqr(packed, tau, c, transpose=True),
            torch.ormqr(packed, tau, cr, left=False),
            torch.ormqr(packed, tau, cr, left=False, transpose=True))


def test_householder_qr(lowered):
    a = rnd(2, 5, 4)
    a[1, 1:, 0] = 0.0                   # a column already reduced: tau = 0
    check(lowered, qr_family, a, rnd(6, 3, seed=1), rnd(2, 5, 3, seed=2), rnd(2, 3, 5, seed=3))


def _qr_args():
    return rnd(2, 5, 4), rnd(6, 3, seed=1), rnd(2, 5, 3, seed=2), rnd(2, 3, 5, seed=3)
