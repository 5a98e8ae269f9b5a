"""The one dtype table of the PyTorch side: torch dtypes, their NumPy dtypes (the
kernel language's and the generated NumPy source's) and the runtime's dtype
codes (``nkrt_dtype_t``), for eager kernels, compiled graphs and collectives.

The runtime's names and NumPy dtypes are :mod:`spike._dtypes`'s; this module
adds the torch column. bfloat16 and the 8-bit floats (float8_e4m3fn,
float8_e5m2) are ml_dtypes' types in NumPy. Kernels only store, convert and move
8-bit floats (``FLOAT8``; the lowering keeps them to the ops in
``spike_torch.lowering.codegen.FLOAT8_ATEN``), as PyTorch's CPU computes nothing
else on them either.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch

from spike._dtypes import DTYPE_NAMES, to_numpy_dtype

__all__ = ["TORCH_DTYPES", "FLOAT8", "dtype_name", "numpy_dtype", "torch_dtype", "runtime_code",
           "torch_to_numpy", "numpy_to_torch"]

#: torch dtype -> the runtime's name of it, for every dtype a kernel computes
#: exactly (int64 and float64 in 64 bits)
TORCH_DTYPES: Dict[torch.dtype, str] = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
    torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
    torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}

#: the 8-bit floats: stored, converted and moved by kernels, never computed on
FLOAT8 = frozenset({torch.float8_e4m3fn, torch.float8_e5m2})

_NUMPY = {t: to_numpy_dtype(name) for t, name in TORCH_DTYPES.items()}
_BY_NUMPY = {**{d: t for t, d in _NUMPY.items()}, **{n: t for t, n in TORCH_DTYPES.items()}}
#: dtypes whose CPU tensors NumPy views as they are (not bfloat16, not float8)
_DIRECT = frozenset(TORCH_DTYPES) - {torch.bfloat16} - FLOAT8
#: dtypes NumPy sees through an integer view of the same size
_VIA_BITS = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.uint8,
             torch.float8_e5m2: torch.uint8}


def dtype_name(dtype: torch.dtype) -> str:
    """The runtime's name of a torch dtype ("float32", "bfloat16", ...); TypeError
    for a dtype no kernel computes."""
    try:
        return TORCH_DTYPES[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} is not supported by the nkipy backend") from None


def numpy_dtype(dtype: torch.dtype, strict: bool = True) -> np.dtype:
    """The NumPy dtype of a torch dtype (bfloat16: ml_dtypes'). Not strict: a dtype
    no kernel computes gets the one NumPy gives its CPU tensors (complex64, ...)."""
    d = _NUMPY.get(dtype)
    if d is not None:
        return d
    if strict:
        dtype_name(dtype)       # raises
    return torch.empty(0, dtype=dtype).numpy().dtype


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a NumPy dtype or a runtime dtype name (bfloat16 included);
    any other NumPy dtype as ``torch.from_numpy`` takes it."""
    t = _BY_NUMPY.get(dtype)
    if t is not None:
        return t
    d = to_numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    t = _BY_NUMPY.get(d)
    return t if t is not None else torch.from_numpy(np.empty(0, d)).dtype


def runtime_code(dtype: torch.dtype) -> int:
    """The runtime's code of a torch dtype (``nkrt_dtype_t``: NKRT_DTYPE_FLOAT32 is 1)."""
    return DTYPE_NAMES.index(dtype_name(dtype)) + 1


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU, C-contiguous NumPy array of ``t`` (bfloat16 kept as ml_dtypes'): a view
    of a contiguous CPU tensor, else a copy."""
    t = t.detach()
    if t.dtype in _DIRECT and t.device.type == "cpu" and t.is_contiguous():
        return t.numpy()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    bits = _VIA_BITS.get(t.dtype)
    if bits is not None:
        return t.view(bits).numpy().view(_NUMPY[t.dtype])
    return t.numpy()


def numpy_to_torch(a: Any, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """A CPU torch tensor of ``dtype`` (default: the array's) from a NumPy array."""
    a = np.asarray(a)
    if not a.flags.c_contiguous:
        a = a.copy()
    via = _BY_NUMPY.get(a.dtype)
    if via in _VIA_BITS:
        bits = _VIA_BITS[via]
        t = torch.from_numpy(a.view(_NUMPY[bits])).view(via)
    else:
        t = torch.from_numpy(a)
    return t if dtype is None or t.dtype == dtype else t.to(dtype)
