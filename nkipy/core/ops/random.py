"""Counter-based random numbers: ``philox(seed, index)``, the four 32-bit
words of Philox4x32-10 (nkipy.core.philox) per element, as int64. Traced, each
word is one elementwise IR op (``philox0`` .. ``philox3``) whose C keeps the
ten rounds in registers; on NumPy arrays it is the reference itself.

Also ``fail_if(x, bad, message)``, a run-time check (IR op ``fail_if``): a
kernel whose result is only valid under a data-dependent condition (an
iteration that converged) fails its execution instead of returning it."""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core.philox import philox_word
from nkipy.core.ops._builder import binary, cast, fail_if as _fail_if
from nkipy.core.ops._core import nkipy_op, to_value, wrap

_I64 = np.dtype(np.int64)


def _philox_cpu(seed: Any, index: Any) -> tuple:
    return tuple(philox_word(seed, index, w) for w in range(4))


@nkipy_op(cpu=_philox_cpu)
def philox(seed: Any, index: Any) -> tuple:
    """The four Philox4x32-10 words (int64 in [0, 2^32)) of the counter
    (index mod 2^32, index >> 32, 0, 0) under the key made of ``seed``'s two
    32-bit halves; ``seed`` and ``index`` are non-negative int64, broadcast."""
    s, i = to_value(seed), to_value(index)
    s = s if s.dtype == _I64 else cast(s, _I64)
    i = i if i.dtype == _I64 else cast(i, _I64)
    return tuple(wrap(binary(f"philox{w}", s, i)) for w in range(4))


def _fail_if_cpu(x: Any, bad: Any, message: str) -> Any:
    if np.any(bad):
        raise RuntimeError(message)
    return x


@nkipy_op(cpu=_fail_if_cpu)
def fail_if(x: Any, bad: Any, message: str) -> Any:
    """``x`` unchanged, or a failed execution with ``message`` (RuntimeError
    on the CPU, the kernel's error on the device) where any element of the
    boolean ``bad`` (broadcast to x's shape) is true. Use it on a result that
    is only valid when a data-dependent condition holds, such as an
    iteration of fixed length that converged."""
    return wrap(_fail_if(to_value(bad), to_value(x), message))
