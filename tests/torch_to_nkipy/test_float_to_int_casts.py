"""Float to integer casts compiled equal eager's on the CPU (x86's truncating
conversion): NaN and values out of range give INT_MIN (int32, int64), narrower
integers convert through int32. Compiled `tensor([nan, 3e9, -1e20]).to(int32)`
gave [0, INT_MIN, INT_MIN] (a plain C cast of NaN is undefined; the kernels
mapped NaN to 0)."""
from __future__ import annotations

import pytest
import torch

VALUES = [float("nan"), 3e9, -1e20, 2.5, -2.5, 40000.0, 300.0, -2147483648.0, 2147483520.0,
          float("inf"), float("-inf"), -0.75, 65535.9]


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("dst", [torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("where", ["cpu", "nkipy"])
def test_float_to_int_cast_equals_eager(backend, src, dst, where):
    x = torch.tensor(VALUES, dtype=torch.float64).to(src)
    want = x.to(dst)
    torch._dynamo.reset()
    got = torch.compile(lambda t: (t * 1).to(dst), backend="nkipy")(x.to(where))
    assert torch.equal(got.cpu(), want), (got.cpu().tolist(), want.tolist())
    assert torch.equal(x.to(where).to(dst).cpu(), want)       # eager on the device too
