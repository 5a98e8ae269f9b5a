"""spike_torch.dtypes, the one table of torch dtypes, their NumPy dtypes and the
runtime's dtype codes: every entry round-trips, the codes are nkrt_dtype_t's
(runtime/include/nkrt/neff_abi.h), and the conversions keep bits (bfloat16)
and share memory where they can."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from spike_torch import dtypes

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype", sorted(dtypes.TORCH_DTYPES, key=str))
def test_every_dtype_round_trips(dtype):
    name = dtypes.dtype_name(dtype)
    npd = dtypes.numpy_dtype(dtype)
    assert dtypes.torch_dtype(npd) is dtype
    assert dtypes.torch_dtype(name) is dtype
    assert npd.itemsize == torch.empty((), dtype=dtype).element_size()


def test_runtime_codes_are_the_abi_header_s():
    header = (ROOT / "runtime/include/nkrt/neff_abi.h").read_text()
    codes = {m.group(1).lower(): int(m.group(2))
             for m in re.finditer(r"NKRT_DTYPE_(\w+) = (\d+)", header)}
    for dtype, name in dtypes.TORCH_DTYPES.items():
        assert dtypes.runtime_code(dtype) == codes[name], name


def test_unsupported_dtypes():
    with pytest.raises(TypeError, match="dtype torch.complex64 is not supported by the nkipy "
                                        "backend"):
        dtypes.numpy_dtype(torch.complex64)
    with pytest.raises(TypeError, match="not supported by the nkipy backend"):
        dtypes.runtime_code(torch.complex64)
    assert dtypes.numpy_dtype(torch.complex64, strict=False) == np.complex64
    assert dtypes.torch_dtype(np.complex64) is torch.complex64


def test_conversions_keep_bits_and_share_memory():
    x = torch.tensor([1.5, -0.0, float("nan"), 3e38]).to(torch.bfloat16)
    a = dtypes.torch_to_numpy(x)
    assert a.dtype == dtypes.numpy_dtype(torch.bfloat16)
    back = dtypes.numpy_to_torch(a)
    assert back.dtype is torch.bfloat16
    assert torch.equal(back.view(torch.int16), x.view(torch.int16))
    f = torch.arange(6.0)
    v = dtypes.torch_to_numpy(f)
    v[0] = 7.0                                     # a contiguous CPU tensor: a view
    assert f[0] == 7.0
    t = dtypes.torch_to_numpy(f.view(2, 3).t())    # not contiguous: a C-contiguous copy
    assert t.flags.c_contiguous and t.tolist() == f.view(2, 3).t().tolist()
    assert dtypes.numpy_to_torch(np.arange(3, dtype=np.int16), torch.float32).dtype is torch.float32
