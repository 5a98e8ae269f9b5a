"""Matrix-vector and vector-matrix products in float16/bfloat16, compiled, on
CPU and `nkipy` inputs, against eager CPU. torch.mv and `a @ b` with a 1-D `b`
decompose into a cast, a broadcast multiply and a last-axis sum; the half
variants were off by ~20 at 33x33 (the cast vector was read once per row)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

PRODUCTS = {
    "mv": lambda a, b, m, v: torch.mv(a, b),
    "matmul_1d": lambda a, b, m, v: a @ b,
    "vecmat": lambda a, b, m, v: b @ a,
    "addmv": lambda a, b, m, v: torch.addmv(v, a, b, beta=0.5, alpha=2.0),
    "dot": lambda a, b, m, v: torch.dot(b, v),
    "inner": lambda a, b, m, v: torch.inner(a, b),
    "outer": lambda a, b, m, v: torch.outer(b, v),
    "batched_1d": lambda a, b, m, v: m @ b,
    "bmm_size1": lambda a, b, m, v: torch.bmm(m[:, :1], m.transpose(1, 2)),
    "linear_1d_input": lambda a, b, m, v: F.linear(b, a, v),
    "linear_vector_weight": lambda a, b, m, v: F.linear(a, b),
}
# |error| <= atol + rtol * |eager|; the two sum 33-64 products in different orders
TOL = {torch.float16: dict(atol=0.05, rtol=1e-2), torch.bfloat16: dict(atol=0.4, rtol=4e-2)}


@pytest.mark.parametrize("n", [4, 33])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", list(PRODUCTS))
@pytest.mark.parametrize("where", ["cpu", "nkipy"])
def test_half_products_compiled_equal_eager(backend, name, dtype, n, where):
    torch.manual_seed(n)
    args = (torch.randn(n, n), torch.randn(n), torch.randn(3, n, n), torch.randn(n))
    args = tuple(t.to(dtype) for t in args)
    fn = PRODUCTS[name]
    want = fn(*args)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="nkipy")(*(t.to(where) for t in args))
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu().float(), want.float(), **TOL[dtype])
