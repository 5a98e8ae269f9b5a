"""Mapping between the runtime's dtype names and NumPy dtypes.

``bfloat16`` and the 8-bit floats (``float8_e4m3fn``, ``float8_e5m2``,
``float8_e4m3``) need the optional ``ml_dtypes`` package; it is imported only
when such a tensor is met.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DTYPE_NAMES", "to_numpy_dtype", "dtype_name"]

#: Every dtype name the runtime knows, in the order of nkrt_dtype_t.
DTYPE_NAMES = (
    "float32",
    "float16",
    "bfloat16",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3",
)


#: runtime dtype names that are ml_dtypes' types in NumPy
_ML_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3"})


def _ml_dtype(name: str) -> np.dtype:
    try:
        import ml_dtypes  # noqa: PLC0415  (optional dependency, imported lazily)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TypeError(
            f"dtype {name!r} needs the ml_dtypes package (pip install ml_dtypes)"
        ) from exc
    return np.dtype(getattr(ml_dtypes, name))


def to_numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype for a runtime dtype name or anything np.dtype accepts.

    Raises TypeError for a dtype the runtime does not support.
    """
    if isinstance(dtype, str) and dtype in _ML_DTYPES:
        return _ml_dtype(dtype)
    try:
        result = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(
            f"unsupported dtype {dtype!r}; expected one of {', '.join(DTYPE_NAMES)}"
        ) from exc
    dtype_name(result)  # validates
    return result


def dtype_name(dtype: Any) -> str:
    """The runtime's name ("float32", "bfloat16", ...) of a NumPy dtype.

    Raises TypeError for a dtype the runtime does not support.
    """
    name = np.dtype(dtype).name
    if name not in DTYPE_NAMES:
        raise TypeError(
            f"unsupported dtype {name!r}; expected one of {', '.join(DTYPE_NAMES)}"
        )
    return name
