"""Registry entries for PyTorch's ``torch.special`` functions that
:mod:`aten_math` does not cover: Chebyshev polynomials (plain and shifted),
Bessel functions of the first and second kind (``bessel_j0/j1/y0/y1``),
modified Bessel functions of the second kind (``modified_bessel_k0/k1`` and
their scaled forms), the Airy function ``airy_ai``, ``ndtri`` and the Hurwitz
``zeta`` function.

Written like :mod:`aten_math` (NumPy code that is also nkipy kernel code).
Everything is computed in float64 and rounded once by the cast the code
generator puts around every node, so a float32 result is within a unit or
two of the exact value; PyTorch's own float32 kernels are the reference the
tests compare against, at float32's tolerances. The methods are textbook ones
(power series where they converge without cancellation, Hankel's asymptotic
expansions for large arguments, a trapezoidal rule on an integral
representation, Newton steps on the normal distribution function,
Euler-Maclaurin summation), each valid for every argument: none depends on a
bound on the input values.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkipy.core import ops

from .aten_math import _not_f64
from .registry import AtenOpRegistry

reg = AtenOpRegistry.register


_F64 = np.dtype(np.float64)
_EULER = 0.57721566490153286061


def _f64(x: Any) -> Any:
    """``x`` (a tensor or a Python number) as a float64 tensor."""
    if not hasattr(x, "dtype"):
        return ops.full((), float(x), _F64)
    return x if np.dtype(x.dtype) == _F64 else x.astype(_F64)


def _in_dtype(x: Any) -> Any:
    """The floating dtype eager computes a special function of ``x`` in."""
    d = np.dtype(x.dtype) if hasattr(x, "dtype") else _F64
    return d if d.kind == "f" or (d.kind == "V" and d.itemsize == 2) else np.dtype(np.float32)


# ---- Chebyshev polynomials -------------------------------------------------------------
#
# PyTorch truncates the degree n to an integer (static_cast<int64_t>), returns 0
# for n < 0 and evaluates by the three-term recurrence (or the trigonometric form
# for |x| < 1 and large n). The closed forms below are the same polynomials:
# with x = cos(t) (|x| <= 1) or x = cosh(t) (x >= 1) and the parity rules for x <= -1.
# Where the float recurrence overflows eager gets inf (the last step) or NaN
# (inf - inf, two steps later): the result at n - 2 overflowing the input dtype
# gives NaN here as well.

def _degree(n: Any):
    """(integer degree as float64, mask of degrees that are 0 by PyTorch's rules)."""
    nf = _f64(n)
    k = np.trunc(nf)
    # NaN, +-inf and degrees past int64 convert to INT64_MIN on x86: negative
    zero = ~(np.abs(nf) < 9.2e18) | (k < 0)
    return np.where(zero, 0.0, k), zero


def _cheb_closed(y, k, kind: str):
    """The Chebyshev polynomial of ``kind`` (t, u, v, w) of degree k at y (float64)."""
    a = np.abs(y)
    sgn = np.where(k - 2.0 * np.floor(k / 2.0) == 1.0, -1.0, 1.0)    # (-1)^k
    inside = a < 1.0
    th = np.arccos(np.clip(y, -1.0, 1.0))                     # y = cos(th), |y| < 1
    tt = np.arccosh(np.maximum(a, 1.0))                       # |y| = cosh(tt), |y| >= 1
    if kind == "t":
        trig = np.cos(k * th)
        pos = neg = np.cosh(k * tt)
    elif kind == "u":
        s = np.sin(th)
        trig = np.where(s == 0, (k + 1.0) * np.cos((k + 1.0) * th),
                        np.sin((k + 1.0) * th) / np.where(s == 0, 1.0, s))
        sh = np.sinh(tt)
        pos = neg = np.where(sh == 0, k + 1.0, np.sinh((k + 1.0) * tt) / np.where(sh == 0, 1.0, sh))
    else:
        if kind == "v":
            c = np.cos(th / 2.0)
            lim = sgn * (2.0 * k + 1.0)
            num = np.cos((k + 0.5) * th)
        else:
            c = np.sin(th / 2.0)
            lim = np.where(y > 0, 2.0 * k + 1.0, sgn)
            num = np.sin((k + 0.5) * th)
        trig = np.where(c == 0, lim, num / np.where(c == 0, 1.0, c))
        # y >= 1: V = cosh((k+1/2)t)/cosh(t/2), W = sinh((k+1/2)t)/sinh(t/2);
        # y <= -1: V_k(y) = (-1)^k W_k(-y), W_k(y) = (-1)^k V_k(-y)
        vpos = np.cosh((k + 0.5) * tt) / np.cosh(tt / 2.0)
        sh = np.sinh(tt / 2.0)
        wpos = np.where(sh == 0, 2.0 * k + 1.0, np.sinh((k + 0.5) * tt) / np.where(sh == 0, 1.0, sh))
        pos, neg = (vpos, wpos) if kind == "v" else (wpos, vpos)
    return np.where(inside, trig, np.where(y > 0, pos, sgn * neg))


def _chebyshev(x, n, kind: str, shifted: bool):
    dtype = _in_dtype(x) if hasattr(x, "dtype") else _in_dtype(n)
    xf = _f64(x)
    if shifted and hasattr(x, "dtype"):     # eager evaluates at x + x - 1 in its dtype
        y = _f64(((x + x) - 1.0).astype(dtype))
    elif shifted:
        y = xf + xf - 1.0
    else:
        y = xf
    k, zero = _degree(n)
    r = _cheb_closed(y, k, kind)
    prev = _cheb_closed(y, np.maximum(k - 2.0, 0.0), kind)
    blown = (k >= 2.0) & (np.abs(y) >= 1.0) & np.isinf(prev.astype(dtype))
    r = np.where(blown | np.isnan(y), math.nan, r)
    r = np.where(k == 0.0, 1.0, r)
    return np.where(zero, 0.0, r)


def _reg_cheb(kind: str, shifted: bool):
    base = ("shifted_" if shifted else "") + "chebyshev_polynomial_" + kind
    names = [f"aten.special_{base}.{o}" for o in ("default", "x_scalar", "n_scalar")]

    def fn(x, n):
        return _chebyshev(x, n, kind, shifted)

    fn.__name__ = base
    fn.__qualname__ = base
    reg(*names)(fn)
    globals()[base] = fn


for _kind in "tuvw":
    _reg_cheb(_kind, False)
    _reg_cheb(_kind, True)


# ---- Bessel functions J0, J1, Y0, Y1 ------------------------------------------------------
#
# |x| <= 12: the power series (the largest term at x = 12 is ~4e3, so float64
# keeps ~1e-12); |x| > 12: Hankel's asymptotic expansions, whose smallest term
# there is below 1e-9 of the result. The phase x - (2 nu + 1) pi / 4 is formed
# from cos(x) and sin(x), exact for every float x.

_BESSEL_SWITCH = 12.0
_SERIES_TERMS = 34
_ASYMPTOTIC_TERMS = 20


def _hankel_pq(x, nu: int):
    """Hankel's P and Q for order ``nu`` at x > 0 (float64)."""
    mu = 4.0 * nu * nu
    p, q, a = 1.0, 0.0, 1.0
    inv8x = 1.0 / (8.0 * x)
    for k in range(1, _ASYMPTOTIC_TERMS + 1):
        a = a * (mu - (2 * k - 1) ** 2) * inv8x / k
        if k % 2:
            q = q + (a if k % 4 == 1 else -a)
        else:
            p = p + (a if k % 4 == 0 else -a)
    return p, q


def _bessel_big(x, nu: int):
    """(J_nu(x), Y_nu(x)) for x > 0 large, by Hankel's expansion."""
    p, q = _hankel_pq(x, nu)
    c, s = np.cos(x), np.sin(x)
    r = math.sqrt(0.5)
    if nu == 0:            # chi = x - pi/4
        cc, sc = r * (c + s), r * (s - c)
    else:                  # chi = x - 3 pi/4
        cc, sc = r * (s - c), -r * (s + c)
    amp = np.sqrt(2.0 / (math.pi * x))
    return amp * (p * cc - q * sc), amp * (p * sc + q * cc)


def _bessel_small(x, nu: int, second: bool):
    """J_nu(x) and, when ``second``, Y_nu(x) by their power series (0 < x <= 12 for Y)."""
    z = -(x * x) / 4.0
    term = ops.full((), 1.0, _F64) * (x / 2.0 if nu else 1.0)
    jsum, ysum, h = term, None, 0.0            # h: harmonic number H_k
    if second:   # Y0: sum_{k>=1} H_k t_k;  Y1: sum_k (psi(k+1) + psi(k+2)) t_k
        ysum = term * (1.0 - 2.0 * _EULER) if nu else 0.0 * term
    for k in range(1, _SERIES_TERMS):
        term = term * z / (k * (k + nu))
        jsum = jsum + term
        h += 1.0 / k
        if second:
            ysum = ysum + term * (h if not nu else 2.0 * h + 1.0 / (k + 1) - 2.0 * _EULER)
    if not second:
        return jsum, None
    lg = np.log(x / 2.0)
    if nu == 0:
        y = (2.0 / math.pi) * ((lg + _EULER) * jsum - ysum)
    else:
        y = -2.0 / (math.pi * x) + (2.0 / math.pi) * lg * jsum - ysum / math.pi
    return jsum, y


def _bessel_j(x, nu: int):
    xf = _f64(x)
    a = np.abs(xf)
    small = a <= _BESSEL_SWITCH
    js, _ = _bessel_small(np.where(small, a, 1.0), nu, False)
    jb, _ = _bessel_big(np.where(small, 1.0, a), nu)
    j = np.where(small, js, jb)                # NaN at +-inf, as eager
    return np.where(xf < 0, -j, j) if nu else j


def _bessel_y(x, nu: int):
    xf = _f64(x)
    small = xf <= _BESSEL_SWITCH
    _, ys = _bessel_small(np.where(small & (xf > 0), xf, 1.0), nu, True)
    _, yb = _bessel_big(np.where(small, _BESSEL_SWITCH + 1.0, xf), nu)
    y = np.where(small, ys, yb)
    return np.where(xf < 0, math.nan, np.where(xf == 0, -math.inf, y))


@reg("aten.special_bessel_j0.default", supports=_not_f64)
def bessel_j0(x):
    return _bessel_j(x, 0)


@reg("aten.special_bessel_j1.default", supports=_not_f64)
def bessel_j1(x):
    return _bessel_j(x, 1)


@reg("aten.special_bessel_y0.default", supports=_not_f64)
def bessel_y0(x):
    return _bessel_y(x, 0)


@reg("aten.special_bessel_y1.default", supports=_not_f64)
def bessel_y1(x):
    return _bessel_y(x, 1)


# ---- modified Bessel functions of the second kind K0, K1 --------------------------------
#
# exp(x) K_nu(x): x <= 2 the series in I_nu and log(x/2) (no cancellation there);
# 2 < x <= 12 the trapezoidal rule on exp(-x (cosh t - 1)) cosh(nu t) over
# t >= 0 (exponentially accurate for this even, analytic integrand; step 1/8
# to t = 6); x > 12 the asymptotic expansion (smallest term below 1e-10).

_K_STEP = 0.125
_K_NODES = 49


def _bessel_k_scaled(x, nu: int):
    xf = _f64(x)
    lo = xf <= 2.0
    mid = (xf > 2.0) & (xf <= _BESSEL_SWITCH)
    # series (0 < x <= 2)
    xs = np.where(lo & (xf > 0), xf, 1.0)
    z = xs * xs / 4.0
    term = ops.full((), 1.0, _F64) + 0.0 * xs
    isum = term
    h = 0.0
    if nu == 0:
        ssum = 0.0 * xs                                     # sum_{k>=1} H_k t_k
    else:
        ssum = term * (1.0 - 2.0 * _EULER)                  # sum_k (psi(k+1) + psi(k+2)) t_k
    for k in range(1, 24):
        term = term * z / (k * (k + nu))
        isum = isum + term
        h += 1.0 / k
        ssum = ssum + term * (h if nu == 0 else 2.0 * h + 1.0 / (k + 1) - 2.0 * _EULER)
    lg = np.log(xs / 2.0)
    if nu == 0:
        ks = -(lg + _EULER) * isum + ssum
    else:
        ks = 1.0 / xs + lg * (xs / 2.0) * isum - (xs / 4.0) * ssum
    ks = ks * np.exp(xs)
    # trapezoidal rule (2 < x <= 12)
    xm = np.where(mid, xf, 4.0)
    km = 0.5 * (1.0 + 0.0 * xm)
    for j in range(1, _K_NODES):
        t = j * _K_STEP
        km = km + np.exp(-xm * (2.0 * math.sinh(t / 2.0) ** 2)) * math.cosh(nu * t)
    km = km * _K_STEP
    # asymptotic expansion (x > 12)
    xb = np.where(lo | mid, _BESSEL_SWITCH + 1.0, xf)
    mu = 4.0 * nu * nu
    a = 1.0 + 0.0 * xb
    kb = a
    for k in range(1, _ASYMPTOTIC_TERMS + 1):
        a = a * (mu - (2 * k - 1) ** 2) / (8.0 * k * xb)
        kb = kb + a
    kb = kb * np.sqrt(math.pi / (2.0 * xb))
    r = np.where(lo, ks, np.where(mid, km, np.where(xf == math.inf, 0.0, kb)))
    return np.where(xf < 0, math.nan, np.where(xf == 0, math.inf, r)), xf


def _bessel_k(x, nu: int, scaled: bool):
    r, xf = _bessel_k_scaled(x, nu)
    if scaled:
        return r
    big = xf == math.inf
    return np.where(big, 0.0, r * np.exp(-np.where(big, 0.0, xf)))


@reg("aten.special_modified_bessel_k0.default")
def modified_bessel_k0(x):
    return _bessel_k(x, 0, False)


@reg("aten.special_modified_bessel_k1.default")
def modified_bessel_k1(x):
    return _bessel_k(x, 1, False)


@reg("aten.special_scaled_modified_bessel_k0.default")
def scaled_modified_bessel_k0(x):
    return _bessel_k(x, 0, True)


@reg("aten.special_scaled_modified_bessel_k1.default")
def scaled_modified_bessel_k1(x):
    return _bessel_k(x, 1, True)


# ---- ndtri ---------------------------------------------------------------------------

@reg("aten.special_ndtri.default")
def ndtri(p):
    """The inverse of the standard normal distribution function: a rational
    first guess (|error| < 5e-4) refined by three Newton steps on the tail
    probability (erfc in float64 keeps its relative accuracy far out)."""
    pf = _f64(p)
    upper = pf > 0.5
    q = np.where(upper, 1.0 - pf, pf)                 # the smaller tail, <= 0.5
    qs = np.where((q > 0) & (q <= 0.5), q, 0.25)
    t = np.sqrt(-2.0 * np.log(qs))
    x = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) /
          (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))))       # x <= 0: Phi(x) = q
    for _ in range(3):
        phi = 0.5 * ops.erfc(-x * math.sqrt(0.5))
        dens = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        x = x - (phi - qs) / dens
    r = np.where(upper, -x, x)
    r = np.where(pf == 0, -math.inf, np.where(pf == 1, math.inf, r))
    return np.where((pf < 0) | (pf > 1) | np.isnan(pf), math.nan, r)


# ---- Hurwitz zeta ---------------------------------------------------------------------
#
# zeta(x, q) = sum_k (q + k)^-x for x > 1: nine terms, then Euler-Maclaurin's
# tail at a = q + 9 with twelve Bernoulli terms (q > 0). For q < 0 (defined for
# integer x only) the finite sum down to q is folded into three zetas of
# positive arguments: zeta(x, q) = zeta(x, f) + (-1)^x (zeta(x, 1 - f) -
# zeta(x, m + 1 - f)), f = q - floor(q), m = -floor(q).

_B2J = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6,
        -3617.0 / 510, 43867.0 / 798, -174611.0 / 330, 854513.0 / 138, -236364091.0 / 2730)


def _zeta_pos(x, q):
    """zeta(x, q) for x > 1, q > 0 (float64 tensors, already broadcast)."""
    s = 0.0 * x
    for k in range(9):
        s = s + np.power(q + k, -x)
    a = q + 9.0
    s = s + np.power(a, 1.0 - x) / (x - 1.0) + 0.5 * np.power(a, -x)
    # the Bernoulli terms, as ratios (x + i) / a: no overflow for large x
    fact, poch = 1.0, np.power(a, -x)              # poch: x (x+1) ... (x+2j-2) a^(-x-2j+1)
    tail = 0.0 * x
    for j in range(1, len(_B2J) + 1):
        poch = poch * ((x + (2 * j - 2)) / a) if j == 1 else \
            poch * ((x + (2 * j - 3)) / a) * ((x + (2 * j - 2)) / a)
        fact = fact * (2 * j - 1) * (2 * j) if j > 1 else 2.0
        tail = tail + (_B2J[j - 1] / fact) * poch
    return s + np.where(np.isinf(poch), 0.0, tail)


@reg("aten.special_zeta.default", "aten.special_zeta.self_scalar",
     "aten.special_zeta.other_scalar")
def zeta(x, q):
    xf, qf = _f64(x), _f64(q)
    shape = np.broadcast_shapes(_shape(xf), _shape(qf))
    xf, qf = np.broadcast_to(xf, shape), np.broadcast_to(qf, shape)
    ok = xf > 1.0
    xs = np.where(ok, xf, 2.0)
    fl = np.floor(qf)
    neg = qf <= 0
    f = np.where(neg, qf - fl, 0.5)
    pos = _zeta_pos(xs, np.where(neg | np.isnan(qf), 1.0, qf))
    f = np.where(f == 0, 0.5, f)
    m = np.where(neg, -fl, 1.0)
    odd = xs - 2.0 * np.floor(xs / 2.0) == 1.0
    fold = _zeta_pos(xs, f) + np.where(odd, -1.0, 1.0) * (
        _zeta_pos(xs, 1.0 - f) - _zeta_pos(xs, m + 1.0 - f))
    r = np.where(neg, fold, pos)
    r = np.where(neg & (qf == fl), math.inf, r)                      # a pole
    r = np.where(neg & (qf != fl) & (xf != np.floor(xf)), math.nan, r)
    r = np.where(xf == 1.0, math.inf, np.where(xf < 1.0, math.nan, r))
    return np.where(np.isnan(xf) | np.isnan(qf), math.nan, r)



# ---- Airy function Ai -----------------------------------------------------------------
#
# -8 <= x <= 6: the Maclaurin series Ai = Ai(0) f - |Ai'(0)| g (its largest term at
# either end is below 1e7 of the result's scale); beyond: the asymptotic expansions
# in zeta = 2/3 |x|^(3/2) (exponentially small for x > 6, oscillating for x < -8),
# whose smallest terms there are below 1e-8 relative. NaN at +-inf, as eager.

_AI0 = 0.355028053887817239
_AIP0 = 0.258819403792806798


def _airy_u(k: int) -> float:
    u = 1.0
    for j in range(1, k + 1):
        u *= (6 * j - 5) * (6 * j - 3) * (6 * j - 1) / ((2 * j - 1) * 216.0 * j)
    return u


@reg("aten.special_airy_ai.default", supports=_not_f64)
def airy_ai(x):
    xf = _f64(x)
    mid = (xf >= -8.0) & (xf <= 6.0)
    xs = np.where(mid, xf, 0.0)
    x3 = xs * xs * xs
    t, u = 1.0 + 0.0 * xs, xs
    f, g = t, u
    for k in range(1, 41):
        t = t * x3 / ((3 * k - 1) * (3 * k))
        u = u * x3 / ((3 * k) * (3 * k + 1))
        f, g = f + t, g + u
    series = _AI0 * f - _AIP0 * g
    a = np.where(mid, 7.0, np.abs(xf))
    a = np.where(np.isinf(a) | np.isnan(a), 7.0, a)
    zeta = (2.0 / 3.0) * a * np.sqrt(a)
    quarter = np.sqrt(np.sqrt(a))
    # x > 6: e^-zeta / (2 sqrt(pi) x^1/4) sum (-1)^k u_k / zeta^k
    acc, zk = 1.0 + 0.0 * a, 1.0 + 0.0 * a
    for k in range(1, 16):
        zk = zk * zeta
        acc = acc + ((-1.0) ** k) * _airy_u(k) / zk
    pos = np.exp(-zeta) / (2.0 * math.sqrt(math.pi) * quarter) * acc
    # x < -8: (sin(zeta + pi/4) P - cos(zeta + pi/4) Q) / (sqrt(pi) |x|^1/4)
    p, q, zk = 1.0 + 0.0 * a, 0.0 * a, 1.0 + 0.0 * a
    for k in range(1, 24):
        zk = zk * zeta
        term = _airy_u(k) / zk
        if k % 2:
            q = q + (term if k % 4 == 1 else -term)
        else:
            p = p + (term if k % 4 == 0 else -term)
    ph = zeta + math.pi / 4.0
    neg = (np.sin(ph) * p - np.cos(ph) * q) / (math.sqrt(math.pi) * quarter)
    r = np.where(mid, series, np.where(xf > 0, pos, neg))
    return np.where(np.isinf(xf) | np.isnan(xf), math.nan, r)


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))
