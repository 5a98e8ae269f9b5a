"""Calls the CPU refuses are refused on the nkipy device too, eager and
compiled, with the CPU's message (found by an adversarial probe; each once
computed a result): negative indices of index_add/index_copy, a non-int64
take index, a non-bool masked_select mask, a masked_scatter source shorter
than the mask's ones, subtraction with a bool, remainder/fmod of bools, a
fill value, clamp bound or exponent past the tensor's dtype, an integer to
a negative integer power."""
from __future__ import annotations

import re

import pytest
import torch

import spike_torch  # noqa: F401  (registers the device)

I8, F16 = torch.int8, torch.float16
OVERFLOW = "without overflow"

CASES = [
    # (name, fn, tensors, phrase of the CPU's message, compiled too)
    ("index_add_ negative index", lambda x, i, s: x.index_add_(0, i, s),
     [torch.zeros(5, 3), torch.tensor([-1, 2]), torch.ones(2, 3)], "out of bounds", True),
    ("index_copy negative index", lambda x, i, s: x.index_copy(0, i, s),
     [torch.zeros(5, 3), torch.tensor([-1, 2]), torch.ones(2, 3)], "out of bounds", True),
    ("take int32 index", lambda x, i: x.take(i),
     [torch.arange(5.0), torch.tensor([1, -1], dtype=torch.int32)],
     "take(): Expected a long tensor for index", True),
    ("masked_select uint8 mask", lambda x, m: x.masked_select(m),
     [torch.arange(5.0), torch.tensor([1, 0, 1, 0, 1], dtype=torch.uint8)],
     "expected BoolTensor for mask", False),
    ("masked_scatter short source", lambda x, m, s: x.masked_scatter(m, s),
     [torch.zeros(6), torch.ones(6, dtype=torch.bool), torch.tensor([1.0, 2.0])],
     "Number of elements of source < number of ones in mask", True),
    ("int - True", lambda t: t - True, [torch.tensor([5, 7])],
     "with a bool tensor is not supported", True),
    ("True - float", lambda t: True - t, [torch.tensor([5.0, 7.0])],
     "with a bool tensor is not supported", True),
    ("remainder of bools", lambda t: torch.remainder(t, True), [torch.tensor([True, False])],
     "not implemented for 'Bool'", False),
    ("fmod of bools", lambda t, u: torch.fmod(t, u),
     [torch.tensor([True, False]), torch.tensor([True, True])], "not implemented for 'Bool'",
     False),
    ("float16 ** 2**40", lambda t: t ** 2 ** 40, [torch.tensor([2.0, 3.0], dtype=F16)],
     OVERFLOW, False),
    ("int8 ** 300", lambda t: t ** 300, [torch.tensor([2, 3], dtype=I8)], OVERFLOW, False),
    ("float16 clamp(min=2**40)", lambda t: t.clamp(min=2 ** 40),
     [torch.tensor([2.0], dtype=F16)], OVERFLOW, False),
    ("int8 clamp(max=300)", lambda t: t.clamp(max=300), [torch.tensor([2], dtype=I8)],
     OVERFLOW, False),
    ("int8 masked_fill 300", lambda t: t.masked_fill(t > 0, 300),
     [torch.tensor([100, -100], dtype=I8)], OVERFLOW, False),
    ("int ** -1", lambda t: t ** -1, [torch.tensor([2, 3])],
     "Integers to negative integer powers are not allowed", True),
]


@pytest.mark.parametrize("name, fn, ts, phrase, compiled", CASES, ids=[c[0] for c in CASES])
def test_eager_refuses_as_the_cpu(name, fn, ts, phrase, compiled):
    with pytest.raises(Exception, match=re.escape(phrase)):
        fn(*[t.clone() for t in ts])
    for _ in range(2):     # the second call: whatever the first one cached
        with pytest.raises(Exception, match=re.escape(phrase)):
            fn(*[t.to("nkipy") for t in ts])


@pytest.mark.parametrize("name, fn, ts, phrase",
                         [c[:4] for c in CASES if c[4]], ids=[c[0] for c in CASES if c[4]])
def test_compiled_refuses_as_the_cpu(backend, name, fn, ts, phrase):
    compiled = torch.compile(fn, backend="nkipy")
    with pytest.raises(Exception, match=re.escape(phrase)):
        compiled(*[t.to("nkipy") for t in ts])


@pytest.mark.parametrize("name, fn, ts", [
    ("uint8 masked_fill -3", lambda t: t.masked_fill(t > 0, -3),
     [torch.tensor([1, 0], dtype=torch.uint8)]),
    ("int8 masked_fill 2.5", lambda t: t.masked_fill(t > 0, 2.5), [torch.tensor([1, 0], dtype=I8)]),
    ("float32 ** 1e39", lambda t: t ** 1e39, [torch.tensor([2.0, 0.5])]),
    ("float16 ** inf", lambda t: t ** float("inf"), [torch.tensor([2.0, 0.5], dtype=F16)]),
    ("int8 ** 2.5", lambda t: t ** 2.5, [torch.tensor([2, 3], dtype=I8)]),
    ("int8 clamp(max=2.5)", lambda t: t.clamp(max=2.5), [torch.tensor([2, 3], dtype=I8)]),
    ("int ** tensor(-1)", lambda t, e: t ** e, [torch.tensor([2, 1]), torch.tensor(-1)]),
])
def test_what_the_cpu_accepts_is_accepted(name, fn, ts):
    """The neighbours of the refusals above the CPU computes (a negative fill
    value of an unsigned tensor, a float bound or exponent of an integer
    tensor, float32 and infinite exponents), with the CPU's results."""
    want = fn(*ts)
    got = fn(*[t.to("nkipy") for t in ts])
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
