"""Counter-based random numbers: ``philox(seed, index)``, the four 32-bit
words of Philox4x32-10 (nkipy.core.philox) per element, as int64. Traced, each
word is one elementwise IR op (``philox0`` .. ``philox3``) whose C keeps the
ten rounds in registers; on NumPy arrays it is the reference itself."""
from __future__ import annotations

from typing import Any

import numpy as np

from nkipy.core.philox import philox_word
from nkipy.core.ops._builder import binary, cast
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
