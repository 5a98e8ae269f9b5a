"""Compiled equals eager for the registry entries of
spike_torch/lowering/aten_linalg.py (LU factorization, unpacking, LU solves,
linalg.solve_ex, linalg.inv_ex): square, wide and tall matrices, batches with
broadcasting, the vector right-hand side, and singular matrices (the zero
pivot reported in ``info``, as LAPACK). Helpers are shared with
test_lowering_breadth.py.
"""
from __future__ import annotations

import pytest
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
    a, w, s, h = _spectra_args()
    seen |= _aten_ops(singular_values, (a, s)) | _aten_ops(eigenvalues, (h,))
    seen |= _aten_ops(pseudo_inverses, (a, w, h))
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


def singular_values(a, s):
    return (torch.linalg.svdvals(a), torch.linalg.cond(s), torch.linalg.matrix_rank(a),
            torch.linalg.norm(s, "nuc"))


def eigenvalues(h):
    return (torch.linalg.eigvalsh(h), torch.linalg.eigvalsh(h, UPLO="U"),
            torch.linalg.matrix_rank(h, hermitian=True))


def pseudo_inverses(a, w, h):
    return (torch.linalg.pinv(a), torch.linalg.pinv(w), torch.linalg.pinv(h, hermitian=True),
            torch.pinverse(h), torch.linalg.pinv(a, atol=0.5))


def _spectra_args():
    # 3 columns: the least where cyclic sweeps interact (each rotation disturbs
    # the other pairs); compile time grows with the unrolled pairs (a 5x5
    # eigenvalue kernel compiles 3.4x slower than a 3x3 one)
    a = rnd(2, 5, 3)
    a[1, :, 2] = a[1, :, 0] * 2.0                   # rank 2
    h = rnd(2, 3, 3, seed=3)
    return a, rnd(2, 5, seed=1), rnd(3, 3, seed=2), h + h.mT


def test_singular_values_eigenvalues_pinv(lowered):
    """Jacobi compiles slowly (about 7 s a 3x3 op, 24 s a 5x5 one on a loaded
    host): few, small cases (tall, wide, rank-deficient, batched)."""
    a, w, s, h = _spectra_args()
    check(lowered, singular_values, a, s)
    check(lowered, eigenvalues, h)
    check(lowered, pseudo_inverses, a, w, h)


def vectors_used(a):
    return torch.linalg.svd(a), torch.linalg.eigh(a + a.mT)


def test_singular_vectors_run_on_the_cpu(lowered):
    check(lowered, vectors_used, rnd(4, 4), cpu=["aten._linalg_eigh.default",
                                                 "aten._linalg_svd.default"])


def _clustered_symmetric(n, b, seed):
    """Symmetric (b, n, n) float64 with eigenvalues clustered within 1e-9 and
    repeated, in random orthogonal bases."""
    g = torch.Generator().manual_seed(seed)
    w = torch.tensor([1.0 + 1e-9, 1.0 - 1e-9, 2.0, 2.0, 1.0, -3.0][:n], dtype=torch.float64)
    q = torch.linalg.qr(torch.randn(b, n, n, generator=g, dtype=torch.float64))[0]
    return (q * w) @ q.mT


def _ill_conditioned(m, n, b, seed):
    """(b, m, n) float64 with singular values 1 .. 1e-12 (condition 1e12)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(b, m, m, generator=g, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(b, n, n, generator=g, dtype=torch.float64))[0]
    k = min(m, n)
    s = torch.zeros(m, n, dtype=torch.float64)
    s[:k, :k] = torch.diag(torch.logspace(0, -12, k, dtype=torch.float64))
    return u @ s @ v.mT


def hard_spectra(a, h):
    return torch.linalg.svdvals(a), torch.linalg.eigvalsh(h)


def test_jacobi_converges_on_clustered_and_ill_conditioned_matrices(lowered):
    """Eigenvalues clustered within 1e-9 (and repeated) and singular values
    spanning 1e12, float64: within 1e-12 of the largest (the Jacobi check's
    bound; LAPACK's own error is of this order) of torch.linalg's."""
    a, h = _ill_conditioned(5, 4, 2, seed=0), _clustered_symmetric(4, 2, seed=1)
    (s, w), left = lowered(hard_spectra, a, h)
    assert left == []
    s_ref, w_ref = hard_spectra(a, h)
    torch.testing.assert_close(s, s_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, w_ref, rtol=0, atol=1e-12 * 2)


def test_jacobi_not_converged_fails_instead_of_returning(lowered, monkeypatch):
    """Too few sweeps for the off-diagonal residual to meet the tolerance: the
    kernel's execution fails with a message naming the problem rather than
    return inaccurate singular values or eigenvalues."""
    from spike_torch.lowering import aten_linalg

    monkeypatch.setattr(aten_linalg, "_SWEEPS", 1)
    a, h = _ill_conditioned(3, 3, 1, seed=2), _clustered_symmetric(3, 1, seed=3)
    for fn, x in ((torch.linalg.svdvals, a), (torch.linalg.eigvalsh, h)):
        with pytest.raises(Exception, match=r"the Jacobi (SVD|eigenvalue) iteration did not "
                                            r"converge in 1 sweeps"):
            lowered(fn, x)
    with pytest.raises(RuntimeError, match="iteration did not converge"):   # the CPU reference
        aten_linalg._singular_values(a.numpy())
