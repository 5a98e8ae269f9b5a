"""Zero-element tensors given to or returned by compiled kernels.

A tensor with no elements has no memory: torch gives it a NULL data pointer
(or, for an empty slice, an address at the end of its storage). The runtime
used to refuse such an address ("its address is NULL"); each case here is
checked against eager PyTorch on the CPU, on the first call (compile) and on
the second (the cached per-call path).
"""
from __future__ import annotations

import pytest
import torch


def exp(x):
    return torch.exp(x)


def mm(a, b):
    return a @ b


def split_with_empty_part(x):
    return torch.split(x, [3, 0])


def new_zeros_plus_one(x):
    return x.new_zeros((0, 2)) + 1


def empty_linspace(x):
    return torch.linspace(0, 1, 0, device=x.device) + x.sum()


def empty_and_full(x, e):
    return x * 2, torch.exp(e)


CASES = [
    (exp, lambda: (torch.randn(0, 3),)),
    (mm, lambda: (torch.randn(0, 3), torch.randn(3, 4))),
    (split_with_empty_part, lambda: (torch.randn(3, 2),)),
    (new_zeros_plus_one, lambda: (torch.randn(3, 2),)),
    (empty_linspace, lambda: (torch.randn(3),)),
    (empty_and_full, lambda: (torch.randn(4, 5), torch.randn(2, 0))),
]


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@pytest.mark.parametrize("fn, make", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_matches_eager(backend, fn, make):
    torch.manual_seed(0)
    args = make()
    want = as_tuple(fn(*args))
    compiled = torch.compile(fn, backend="nkipy")
    dev_args = [a.to("nkipy") for a in args]
    for _ in range(2):  # compile, then the cached per-call path
        got = as_tuple(compiled(*dev_args))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.device.type == "nkipy"
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("fn, make", CASES[:2], ids=[fn.__name__ for fn, _ in CASES[:2]])
def test_cpu_inputs_match_eager(backend, fn, make):
    """CPU tensors are read and written where they lie (the host call): a 0-byte
    tensor's data pointer may be NULL there, and must work as well."""
    torch.manual_seed(0)
    args = make()
    want = as_tuple(fn(*args))
    compiled = torch.compile(fn, backend="nkipy")
    for _ in range(2):
        got = as_tuple(compiled(*args))
        for g, w in zip(got, want):
            assert g.shape == w.shape
            torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.bool,
                                   torch.int8, torch.float64, torch.int64],
                         ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0)])
@pytest.mark.parametrize("where", ["cpu", "nkipy"])
def test_empty_inputs_of_every_dtype(backend, dtype, shape, where):
    """0-element inputs and outputs of every dtype, compiled on CPU and device
    inputs; an empty bfloat16 nkipy tensor (it owns no memory: a NULL data
    pointer) was refused with 'address (nil) is not inside any live device
    allocation'."""
    def f(x):
        return x * 2, x.sum(-1)

    x = torch.zeros(shape, dtype=dtype)
    torch._dynamo.reset()
    got = torch.compile(f, backend="nkipy")(x.to(where))
    for g, w in zip(got, f(x)):
        assert g.shape == w.shape and g.dtype == w.dtype and torch.equal(g.cpu(), w)


@pytest.mark.parametrize("where", ["cpu", "nkipy"])
def test_stack_and_cat_of_empty_vectors(backend, where):
    """cat skips legacy 1-D empties; when every input is one the result is
    empty (the lowering concatenated nothing: 'need at least one array to
    concatenate', found by the differential fuzzer)."""
    a = torch.zeros(0, dtype=torch.int64)
    for fn in (lambda a: torch.stack([a.half(), a.half()], dim=0),
               lambda a: torch.cat([a.half(), a.half()])):
        torch._dynamo.reset()
        got = torch.compile(fn, backend="nkipy")(a.to(where))
        want = fn(a)
        assert got.shape == want.shape and got.dtype == want.dtype
