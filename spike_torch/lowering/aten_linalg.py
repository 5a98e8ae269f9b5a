"""Registry entries for LU-based dense linear algebra: the LU factorization
(``linalg_lu_factor_ex``, ``linalg_lu``, ``lu_unpack``), solves with it
(``linalg_lu_solve``, ``_linalg_solve_ex``) and the inverse
(``linalg_inv_ex``).

Like :mod:`aten_math`'s small linear algebra (Cholesky, triangular solves,
determinants), the factorization is unrolled over the static matrix size and
batched over leading dimensions, up to :data:`aten_math._LINALG_MAX` rows and
columns; larger matrices stay on the CPU. The LU pivots as LAPACK's getrf
(the first row of largest magnitude; a zero pivot column is left unscaled and
reported in ``info``). Float32 operands are factored and solved in float64
and rounded once, so results differ from LAPACK's float32 ones by about
LAPACK's own rounding error.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core import ops

from .aten_math import _LINALG_MAX, _arg, _lu_rect, _mT, _tri_solve, _val
from .registry import AtenOpRegistry

reg = AtenOpRegistry.register

_F64 = np.dtype(np.float64)
_I32 = np.dtype(np.int32)


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


def _f64(x: Any) -> Any:
    return x if np.dtype(x.dtype) == _F64 else x.astype(_F64)


def _small_float(*which: int, square: bool = True):
    """A ``supports`` predicate: the node's tensor arguments ``which`` are
    floating, at least 2-D (square when ``square``), no larger than
    _LINALG_MAX in their last two dimensions, and not empty."""
    def ok(node: Any) -> bool:
        for i in which:
            v = _val(node.args[i]) if len(node.args) > i else None
            if v is None or v.dim() < 2 or not v.is_floating_point() or v.numel() == 0:
                return False
            if max(v.shape[-2:]) > _LINALG_MAX or (square and v.shape[-1] != v.shape[-2]):
                return False
        return True
    return ok


def _jacobi_rotation(app, aqq, apq):
    """The Jacobi rotation (c, s) that zeroes the off-diagonal apq of the 2 x 2
    symmetric [[app, apq], [apq, aqq]] (the smaller angle; none when apq is 0):
    used on A^T A's columns by the one-sided SVD and on A by the eigenvalues."""
    skip = apq == 0
    tau = (aqq - app) / np.where(skip, 1.0, 2.0 * apq)
    t = np.where(tau >= 0, 1.0, -1.0) / (np.abs(tau) + np.sqrt(1.0 + tau * tau))
    t = np.where(skip, 0.0, t)
    c = 1.0 / np.sqrt(1.0 + t * t)
    return c, c * t


def _permutation(pivots, m: int):
    """The row order ``perm`` (..., m) that getrf's swaps give: A[perm] = L U."""
    k = _shape(pivots)[-1]
    idx = ops.arange(0, m, 1, dtype=np.int64)
    perm = np.broadcast_to(idx, _shape(pivots)[:-1] + (m,))
    piv = pivots.astype(np.int64) - 1
    for i in range(k):
        p = piv[..., i:i + 1]                                                    # (..., 1)
        vi = perm[..., i:i + 1]
        vp = np.take_along_axis(perm, p, axis=-1)
        perm = np.where(idx == i, vp, np.where(idx == p, vi, perm))
    return perm


def _perm_matrix(perm, m: int, dtype):
    """P with A = P L U: P[j, i] = 1 where perm[i] == j."""
    rows = np.reshape(ops.arange(0, m, 1, dtype=np.int64), (m, 1))
    return (np.expand_dims(perm, -2) == rows).astype(dtype)


def _unpack(lu, m: int, n: int):
    """Unit lower L (..., m, k) and upper U (..., k, n) of a packed LU."""
    k = min(m, n)
    r = np.reshape(ops.arange(0, m, 1, dtype=np.int64), (m, 1))
    c = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    low = np.where(r > c, lu, np.where(r == c, 1.0, 0.0))[..., :, :k]
    up = np.where(r <= c, lu, 0.0)[..., :k, :]
    return low.astype(lu.dtype), up.astype(lu.dtype)


def _lu_factor_ok(node: Any) -> bool:
    return _small_float(0, square=False)(node) and _arg(node, 1, "pivot", True) is True


@reg("aten.linalg_lu_factor_ex.default", supports=_lu_factor_ok)
def linalg_lu_factor_ex(a, pivot=True, check_errors=False):
    return _lu_rect(_f64(a))[:3]


@reg("aten.linalg_lu.default", supports=_lu_factor_ok)
def linalg_lu(a, pivot=True):
    m, n = _shape(a)[-2:]
    lu, piv, _, _ = _lu_rect(_f64(a))
    low, up = _unpack(lu, m, n)
    return _perm_matrix(_permutation(piv, m), m, lu.dtype), low, up


def _lu_unpack_ok(node: Any) -> bool:
    return _small_float(0, square=False)(node) and _arg(node, 2, "unpack_data", True) is True \
        and _arg(node, 3, "unpack_pivots", True) is True


@reg("aten.lu_unpack.default", supports=_lu_unpack_ok)
def lu_unpack(lu_data, lu_pivots, unpack_data=True, unpack_pivots=True):
    m, n = _shape(lu_data)[-2:]
    low, up = _unpack(lu_data, m, n)
    piv = np.broadcast_to(lu_pivots, _shape(lu_data)[:-2] + _shape(lu_pivots)[-1:])
    return _perm_matrix(_permutation(piv, m), m, lu_data.dtype), low, up


def _solve_lu(lu, perm, b):
    """x with A x = b from A's packed LU and row order (b: (..., n, k), batch
    dims already broadcast)."""
    bp = np.take_along_axis(b, np.broadcast_to(np.expand_dims(perm, -1), _shape(b)), axis=-2)
    y = _tri_solve(lu, bp, upper=False, unit=True)
    return _tri_solve(lu, y, upper=True)


def _broadcast_batch(a, b):
    shape = np.broadcast_shapes(_shape(a)[:-2], _shape(b)[:-2])
    return np.broadcast_to(a, shape + _shape(a)[-2:]), np.broadcast_to(b, shape + _shape(b)[-2:])


def _lu_solve_ok(node: Any) -> bool:
    return _small_float(0)(node) and _small_float(2, square=False)(node)


def _solve_lu_adjoint(lu, perm, b):
    """x with A^T x = b (real A = P L U): U^T z = b, L^T w = z, x = P w."""
    n = _shape(lu)[-1]
    z = _tri_solve(_mT(lu), b, upper=False)
    w = _tri_solve(_mT(lu), z, upper=True, unit=True)
    return np.matmul(_perm_matrix(perm, n, w.dtype), w)


@reg("aten.linalg_lu_solve.default", supports=_lu_solve_ok)
def linalg_lu_solve(lu, pivots, b, left=True, adjoint=False):
    n = _shape(lu)[-1]
    bf = _f64(b) if left else _mT(_f64(b))          # x A = b  <=>  A^T x^T = b^T
    luf, bf = _broadcast_batch(_f64(lu), bf)
    piv = np.broadcast_to(pivots, _shape(luf)[:-2] + _shape(pivots)[-1:])
    perm = _permutation(piv, n)
    transposed = adjoint if left else not adjoint
    x = _solve_lu_adjoint(luf, perm, bf) if transposed else _solve_lu(luf, perm, bf)
    return x if left else _mT(x)


def _solve_ok(node: Any) -> bool:
    a = _val(node.args[0]) if node.args else None
    b = _val(node.args[1]) if len(node.args) > 1 else None
    return _small_float(0)(node) and b is not None and b.is_floating_point() and \
        b.numel() > 0 and b.dim() >= 1 and a.shape[-1] <= _LINALG_MAX and \
        node.kwargs.get("left", True) is True


@reg("aten._linalg_solve_ex.default", supports=_solve_ok)
def linalg_solve_ex(a, b, left=True, check_errors=False):
    n = _shape(a)[-1]
    sa, sb = _shape(a), _shape(b)
    # PyTorch's vector case: b of shape (n,) or a's batch shape + (n,)
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    lu, piv, info, _ = _lu_rect(_f64(a))
    bf = np.expand_dims(_f64(b), -1) if vector else _f64(b)
    luf, bf = _broadcast_batch(lu, bf)
    pv = np.broadcast_to(piv, _shape(luf)[:-2] + (n,))
    x = _solve_lu(luf, _permutation(pv, n), bf)
    if vector:
        x = x[..., 0]
    return x, lu, piv, info


@reg("aten.linalg_inv_ex.default", supports=_small_float(0))
def linalg_inv_ex(a, check_errors=False):
    n = _shape(a)[-1]
    lu, piv, info, _ = _lu_rect(_f64(a))
    eye = np.broadcast_to(ops.eye(n, dtype=_F64), _shape(lu))
    return _solve_lu(lu, _permutation(piv, n), eye), info


# ---- Householder QR ------------------------------------------------------------------
#
# As LAPACK's geqr2 / larfg: the k-th reflector H = I - tau v v^T has v[k] = 1,
# beta = -sign(alpha) * ||(alpha, x)||, tau = (beta - alpha) / beta and
# v = x / (alpha - beta); a column already zero below the diagonal gets tau = 0.
# Q = H_0 H_1 ... H_{k-1} (orgqr applies them to the identity, last first).

def _geqrf(a):
    """(packed reflectors and R, tau (..., min(m, n))) of a float64 (..., m, n)."""
    m, n = _shape(a)[-2:]
    r = np.reshape(ops.arange(0, m, 1, dtype=np.int64), (m, 1))
    c = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    taus = []
    for k in range(min(m, n)):
        col = a[..., :, k:k + 1]                                             # (..., m, 1)
        alpha = a[..., k:k + 1, k:k + 1]
        xn2 = np.sum(np.where(r > k, col * col, 0.0), axis=-2, keepdims=True)
        zero = xn2 == 0
        beta = -np.where(alpha >= 0, 1.0, -1.0) * np.sqrt(alpha * alpha + xn2)
        beta = np.where(zero, alpha, beta)
        tau = np.where(zero, 0.0, (beta - alpha) / np.where(zero, 1.0, beta))
        scale = np.where(zero, 1.0, 1.0 / np.where(zero, 1.0, alpha - beta))
        v = np.where(r == k, 1.0, np.where(r > k, col * scale, 0.0))          # (..., m, 1)
        w = np.sum(v * a, axis=-2, keepdims=True)                            # (..., 1, n)
        a = np.where(c > k, a - tau * v * w, a)
        a = np.where(c == k, np.where(r == k, beta, np.where(r > k, v, a)), a)
        taus.append(tau[..., 0])
    return a, np.concatenate(taus, axis=-1)


def _reflector(a, i: int):
    m = _shape(a)[-2]
    r = np.reshape(ops.arange(0, m, 1, dtype=np.int64), (m, 1))
    return np.where(r == i, 1.0, np.where(r > i, a[..., :, i:i + 1], 0.0))     # (..., m, 1)


def _apply_left(a, tau, c, order):
    """H_i c for i in ``order`` (each reflector applied to the running result)."""
    for i in order:
        v = _reflector(a, i)
        t = np.expand_dims(tau[..., i:i + 1], -1)
        c = c - t * v * np.sum(v * c, axis=-2, keepdims=True)
    return c


def _apply_right(a, tau, c, order):
    """c H_i for i in ``order``."""
    for i in order:
        v = _mT(_reflector(a, i))                                              # (..., 1, m)
        t = np.expand_dims(tau[..., i:i + 1], -1)
        c = c - t * np.sum(c * v, axis=-1, keepdims=True) * v
    return c


def _q(a, tau, ncols: int):
    """The first ``ncols`` columns of Q = H_0 ... H_{k-1}."""
    m = _shape(a)[-2]
    k = _shape(tau)[-1]
    eye = np.broadcast_to(ops.eye(m, ncols, dtype=_F64), _shape(a)[:-2] + (m, ncols))
    return _apply_left(a, tau, eye, range(k - 1, -1, -1))


def _qr_ok(node: Any) -> bool:
    return _small_float(0, square=False)(node)


@reg("aten.geqrf.default", supports=_qr_ok)
def geqrf(a):
    return _geqrf(_f64(a))


def _hp_ok(node: Any) -> bool:
    v = _val(node.args[0])
    t = _val(node.args[1])
    return _small_float(0, square=False)(node) and t is not None and t.is_floating_point() and \
        v.shape[-1] <= v.shape[-2] and t.shape[-1] <= v.shape[-1] and t.dim() == v.dim() - 1


@reg("aten.linalg_householder_product.default", supports=_hp_ok)
def linalg_householder_product(a, tau):
    af = _f64(a)
    tf = np.broadcast_to(_f64(tau), _shape(af)[:-2] + _shape(tau)[-1:])
    return _q(af, tf, _shape(af)[-1])


def _linalg_qr_ok(node: Any) -> bool:
    return _qr_ok(node) and _arg(node, 1, "mode", "reduced") in ("reduced", "complete", "r")


@reg("aten.linalg_qr.default", supports=_linalg_qr_ok)
def linalg_qr(a, mode="reduced"):
    m, n = _shape(a)[-2:]
    k = min(m, n)
    packed, tau = _geqrf(_f64(a))
    rr = np.reshape(ops.arange(0, m, 1, dtype=np.int64), (m, 1))
    cc = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    r_full = np.where(rr <= cc, packed, 0.0)
    if mode == "complete":
        return _q(packed, tau, m), r_full
    if mode == "r":
        return ops.zeros((0,), _F64), r_full[..., :k, :]
    return _q(packed, tau, k), r_full[..., :k, :]


def _ormqr_ok(node: Any) -> bool:
    a, t, c = (_val(node.args[i]) if len(node.args) > i else None for i in range(3))
    if not (_small_float(0, square=False)(node) and _small_float(2, square=False)(node)):
        return False
    if t is None or not t.is_floating_point() or t.dim() != a.dim() - 1:
        return False
    left = _arg(node, 3, "left", True)
    m = c.shape[-2] if left else c.shape[-1]
    return a.shape[-2] == m and t.shape[-1] <= min(a.shape[-2:]) and \
        a.shape[:-2] == c.shape[:-2] == t.shape[:-1]


@reg("aten.ormqr.default", supports=_ormqr_ok)
def ormqr(a, tau, c, left=True, transpose=False):
    af, tf, cf = _f64(a), _f64(tau), _f64(c)
    k = _shape(tf)[-1]
    up, down = range(k), range(k - 1, -1, -1)
    if left:     # Q c = H_0 (... (H_{k-1} c)); Q^T c = H_{k-1} ... H_0 c
        return _apply_left(af, tf, cf, up if transpose else down)
    # c Q = ((c H_0) H_1) ...; c Q^T = c H_{k-1} ... H_0
    return _apply_right(af, tf, cf, down if transpose else up)


# ---- singular values, symmetric eigenvalues, pseudo-inverses (Jacobi) -----------------
#
# Cyclic Jacobi in float64 with a fixed number of sweeps (quadratic convergence:
# eight sweeps leave off-diagonal mass far below float64's rounding for the small
# sizes served, up to _JACOBI_MAX columns). A kernel has no data-dependent loop,
# so convergence is checked after the sweeps instead: the off-diagonal residual
# (two-sided: ||offdiag(A)||_F against ||A||_F; one-sided: each pair's
# |a_p . a_q| against ||a_p|| ||a_q||) above _JACOBI_TOL fails the execution
# (ops.fail_if) with _NOT_CONVERGED rather than return inaccurate values: the
# eigenvalue error is at most the off-diagonal norm (Weyl), so passing the check
# bounds it by _JACOBI_TOL * ||A||_F. Singular vectors and eigenvectors
# are determined only up to sign (and rotation within repeated values), unlike
# LAPACK's, so an entry serves a node only when the graph uses none of them:
# singular values / eigenvalues alone (svdvals, cond, matrix_rank, the nuclear
# norm, eigvalsh), or pinv, which does not depend on that choice.

_JACOBI_MAX = 6
_SWEEPS = 8
_JACOBI_TOL = 1e-12
_NOT_CONVERGED = ("linalg: the Jacobi {what} iteration did not converge in {sweeps} sweeps "
                  "(off-diagonal residual above {tol:g} of the norm), so its result would be "
                  "inaccurate; compute this op on a CPU tensor instead")


def _not_converged(what: str) -> str:
    return _NOT_CONVERGED.format(what=what, sweeps=_SWEEPS, tol=_JACOBI_TOL)


def _orthogonality_failed(cols):
    """(..., 1, 1) bool: whether some pair of the columns is not orthogonal to
    _JACOBI_TOL relative to their norms (zero columns are orthogonal to all)."""
    n = len(cols)
    norms = [np.sum(c * c, axis=-2, keepdims=True) for c in cols]
    bad = None
    for p in range(n):
        for q in range(p + 1, n):
            ga = np.abs(np.sum(cols[p] * cols[q], axis=-2, keepdims=True))
            b = ga > _JACOBI_TOL * (np.sqrt(norms[p]) * np.sqrt(norms[q]))
            bad = b if bad is None else np.logical_or(bad, b)
    return bad


def _one_sided_jacobi(a):
    """Hestenes' one-sided Jacobi on the columns of a (..., m, n): (columns
    a V, mutually orthogonal, as a list of (..., m, 1); V as a list of (..., n, 1))."""
    n = _shape(a)[-1]
    cols = [a[..., :, i:i + 1] for i in range(n)]
    eye = ops.eye(n, dtype=_F64)
    vs = [np.broadcast_to(eye[:, i:i + 1], _shape(a)[:-2] + (n, 1)) for i in range(n)]
    for _ in range(_SWEEPS):
        for p in range(n):
            for q in range(p + 1, n):
                ap, aq = cols[p], cols[q]
                al = np.sum(ap * ap, axis=-2, keepdims=True)
                be = np.sum(aq * aq, axis=-2, keepdims=True)
                ga = np.sum(ap * aq, axis=-2, keepdims=True)
                c, s = _jacobi_rotation(al, be, ga)
                cols[p], cols[q] = c * ap - s * aq, s * ap + c * aq
                vp, vq = vs[p], vs[q]
                vs[p], vs[q] = c * vp - s * vq, s * vp + c * vq
    return cols, vs


def _checked_singular_values(cols):
    """The column norms (..., n) of one-sided Jacobi's columns, failing the
    execution unless the columns converged to orthogonal ones."""
    s = np.concatenate([np.sqrt(np.sum(c * c, axis=-2)) for c in cols], axis=-1)
    bad = _orthogonality_failed(cols)
    if bad is None:                                  # a single column
        return s
    return ops.fail_if(s, bad[..., 0], _not_converged("SVD"))


def _singular_values(a):
    """Singular values (..., k), descending, of a float64 (..., m, n)."""
    m, n = _shape(a)[-2:]
    if m < n:
        a = _mT(a)
    cols, _ = _one_sided_jacobi(a)
    s = _checked_singular_values(cols)
    return ops.topk(s, _shape(s)[-1], axis=-1, is_ascend=False)[0]


def _sym(a, upper: bool):
    """The symmetric matrix of a's lower (or upper) triangle."""
    n = _shape(a)[-1]
    r = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (n, 1))
    c = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    keep = (r <= c) if upper else (r >= c)
    return np.where(keep, a, _mT(a))


def _jacobi_eigh(a, vectors: bool):
    """Eigenvalues (..., n) (unsorted) and, when ``vectors``, eigenvectors of a
    symmetric float64 (..., n, n) by cyclic two-sided Jacobi rotations."""
    n = _shape(a)[-1]
    r = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (n, 1))
    cidx = np.reshape(ops.arange(0, n, 1, dtype=np.int64), (1, n))
    v = np.broadcast_to(ops.eye(n, dtype=_F64), _shape(a)) if vectors else None
    for _ in range(_SWEEPS):
        for p in range(n):
            for q in range(p + 1, n):
                apq = a[..., p:p + 1, q:q + 1]
                app = a[..., p:p + 1, p:p + 1]
                aqq = a[..., q:q + 1, q:q + 1]
                c, s = _jacobi_rotation(app, aqq, apq)
                # A <- J^T A J with J the rotation in the (p, q) plane
                rp, rq = a[..., p:p + 1, :], a[..., q:q + 1, :]
                a = np.where(r == p, c * rp - s * rq, np.where(r == q, s * rp + c * rq, a))
                cp, cq = a[..., :, p:p + 1], a[..., :, q:q + 1]
                a = np.where(cidx == p, c * cp - s * cq, np.where(cidx == q, s * cp + c * cq, a))
                if vectors:
                    vp, vq = v[..., :, p:p + 1], v[..., :, q:q + 1]
                    v = np.where(cidx == p, c * vp - s * vq, np.where(cidx == q, s * vp + c * vq, v))
    flat = np.reshape(a, _shape(a)[:-2] + (n * n,))
    w = flat[..., ::n + 1]
    if n > 1:
        big = np.max(np.abs(a), axis=(-2, -1), keepdims=True)     # scaled: no over/underflow
        sc = a / np.where(big == 0, 1.0, big)
        sq = sc * sc
        off = np.sum(np.where(r != cidx, sq, 0.0), axis=(-2, -1))
        bad = off > (_JACOBI_TOL * _JACOBI_TOL) * np.sum(sq, axis=(-2, -1))
        w = ops.fail_if(w, np.expand_dims(bad, -1), _not_converged("eigenvalue"))
    return w, v


def _only_outputs(node: Any, used: set) -> bool:
    """Whether the node's tuple outputs that the graph reads are among ``used``."""
    import operator

    for u in node.users:
        if u.op != "call_function" or u.target is not operator.getitem or u.args[1] not in used:
            return False
    return True


def _jacobi_sized(node: Any) -> bool:
    v = _val(node.args[0])
    return v is not None and v.dim() >= 2 and v.is_floating_point() and v.numel() > 0 and \
        min(v.shape[-2:]) <= _JACOBI_MAX and max(v.shape[-2:]) <= _LINALG_MAX


def _svd_ok(node: Any) -> bool:
    return _jacobi_sized(node) and _only_outputs(node, {1})


@reg("aten._linalg_svd.default", supports=_svd_ok)
def linalg_svd(a, full_matrices=False, compute_uv=True, driver=None):
    """Singular values only (see _svd_ok); U and Vh are placeholders of the
    right shapes, never read."""
    m, n = _shape(a)[-2:]
    k = min(m, n)
    s = _singular_values(_f64(a))
    if not compute_uv:
        return ops.zeros((0,), _F64), s, ops.zeros((0,), _F64)
    um, vn = (m, n) if full_matrices else (k, k)
    batch = _shape(a)[:-2]
    return ops.zeros(batch + (m, um), _F64), s, ops.zeros(batch + (vn, n), _F64)


def _eigh_ok(node: Any) -> bool:
    return _jacobi_sized(node) and _small_float(0)(node) and _only_outputs(node, {0})


@reg("aten._linalg_eigh.default", supports=_eigh_ok)
def linalg_eigh(a, UPLO="L", compute_v=True):
    """Eigenvalues only, ascending (see _eigh_ok); the eigenvector output is a
    placeholder, never read."""
    w, _ = _jacobi_eigh(_sym(_f64(a), UPLO == "U"), False)
    w = ops.topk(w, _shape(w)[-1], axis=-1, is_ascend=True)[0]
    if not compute_v:
        return w, ops.zeros((0,), _F64)
    return w, ops.zeros(_shape(a), _F64)


def _pinv_ok(node: Any) -> bool:
    if not _jacobi_sized(node):
        return False
    if node.kwargs.get("hermitian", False) and not _small_float(0)(node):
        return False
    return True


def _eps(dtype) -> float:
    return float(np.finfo(np.float64 if np.dtype(dtype) == _F64 else np.float32).eps)


@reg("aten.linalg_pinv.atol_rtol_tensor", supports=_pinv_ok)
def linalg_pinv(a, atol=None, rtol=None, hermitian=False):
    m, n = _shape(a)[-2:]
    af = _f64(a)
    at = ops.full((), 0.0, _F64) if atol is None else _f64(atol)
    if rtol is None:
        default = _eps(a.dtype) * max(m, n)
        rt = ops.full((), default, _F64) if atol is None else np.where(at > 0, 0.0, default)
    else:
        rt = _f64(rtol)
    at = np.expand_dims(at, -1)
    rt = np.expand_dims(rt, -1)
    if hermitian:
        w, v = _jacobi_eigh(_sym(af, False), True)                      # (..., n), (..., n, n)
        big = np.max(np.abs(w), axis=-1, keepdims=True)
        tol = np.maximum(at, rt * big)
        inv = np.where(np.abs(w) > tol, 1.0 / np.where(w == 0, 1.0, w), 0.0)
        return np.matmul(v * np.expand_dims(inv, -2), _mT(v))
    tall = m >= n
    x = af if tall else _mT(af)
    cols, vs = _one_sided_jacobi(x)
    s = _checked_singular_values(cols)                                              # (..., k)
    big = np.max(s, axis=-1, keepdims=True)
    tol = np.maximum(at, rt * big)
    keep = s > tol
    inv2 = np.where(keep, 1.0 / np.where(s == 0, 1.0, s * s), 0.0)                 # 1 / s^2
    u_s = np.concatenate(cols, axis=-1)                                             # U S
    v = np.concatenate(vs, axis=-1)
    p = np.matmul(v * np.expand_dims(inv2, -2), _mT(u_s))                          # V S^-1 U^T
    return p if tall else _mT(p)
