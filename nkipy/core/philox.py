"""Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
easy as 1, 2, 3", SC'11) in NumPy: the reference of the IR's ``philox0`` ..
``philox3`` ops (one output word each) and of their C in the compiled kernels.

Each 32-bit word is held in an int64 and every product is split so that none
exceeds 2^48: the same code runs on Python ints and int64 arrays alike.
"""
from __future__ import annotations

from typing import Any

import numpy as np

#: Philox4x32 multipliers and Weyl key increments.
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10
MASK32 = 0xFFFFFFFF


def _mulhilo(a: Any, m: int) -> tuple:
    """(high, low) 32-bit words of ``a * m`` for ``a`` in [0, 2^32)."""
    mh, ml = m >> 16, m & 0xFFFF
    ph, pl = a * mh, a * ml
    return (ph + pl // 65536) // 65536, ((ph & 0xFFFF) * 65536 + pl) & MASK32


def philox4x32(k0: Any, k1: Any, c0: Any, c1: Any = 0, c2: Any = 0, c3: Any = 0) -> tuple:
    """Philox4x32-10 of counter (c0..c3) under key (k0, k1): four 32-bit words,
    each in an int64 (operands likewise: NumPy arrays or ints)."""
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & MASK32, (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = _mulhilo(c0, PHILOX_M0)
        hi1, lo1 = _mulhilo(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def philox_word(seed: Any, index: Any, word: int) -> np.ndarray:
    """Word ``word`` (0..3) of Philox4x32-10 of the counter (index mod 2^32,
    index >> 32, 0, 0) under the key (seed mod 2^32, (seed >> 32) mod 2^32),
    as int64 (``seed`` and ``index`` broadcast; both non-negative int64)."""
    seed = np.asarray(seed, dtype=np.int64)
    index = np.asarray(index, dtype=np.int64)
    w = philox4x32(seed & MASK32, (seed // 2 ** 32) & MASK32, index & MASK32, index // 2 ** 32)
    return np.asarray(w[word], dtype=np.int64)
