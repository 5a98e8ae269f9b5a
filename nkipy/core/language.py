"""nkipy-specific names kernels use: ``bfloat16`` (from ml_dtypes) and the dtypes."""
import numpy as np

from nkipy.core.ir import bfloat16 as _bf16
from nkipy.core.ir import float8_e4m3 as _f8e4m3

#: bfloat16 as a NumPy scalar type (``np.zeros(3, dtype=bfloat16)``, ``x.astype(bfloat16)``).
bfloat16 = _bf16.type if _bf16 is not None else None
float32 = np.float32
float16 = np.float16
int8 = np.int8
int16 = np.int16
int32 = np.int32
uint8 = np.uint8
uint16 = np.uint16
uint32 = np.uint32
bool_ = np.bool_
#: NKI's float8_e4m3 (ml_dtypes.float8_e4m3: with infinities, not the "fn" variant), as
#: the original defines it. NumPy computes with it on the host; kernels refuse it
#: (TypeError naming it): this device has no 8-bit float arithmetic.
float8_e4m3 = _f8e4m3.type if _f8e4m3 is not None else None

__all__ = ["bfloat16", "float32", "float16", "int8", "int16", "int32", "uint8", "uint16",
           "uint32", "bool_", "float8_e4m3"]
