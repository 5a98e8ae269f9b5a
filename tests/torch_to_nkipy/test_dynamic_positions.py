"""dynamic=True over many lengths equals eager: graphs whose values depend on
positions along the dynamic dimension (arange of its size, tril, cumulative
and reducing ops, flips, shifts, contractions) must not run as slices of
bucket-sized chunks. ``x + torch.arange(x.shape[0])[:, None]`` gave 0..15, 0
at length 17 (each slice restarted the positions at 0)."""
from __future__ import annotations

import pytest
import torch

CASES = {
    "arange_rows": lambda x: x + torch.arange(x.shape[0], dtype=x.dtype)[:, None],
    "arange_start_step": lambda x: x * torch.arange(1, 2 * x.shape[0] + 1, 2,
                                                    dtype=x.dtype)[:, None],
    "position_ids": lambda x: (torch.arange(x.shape[0]) * 3)[:, None] + x.sum(-1, keepdim=True),
    "tril_rows": lambda x: torch.tril(x),
    "triu_rows": lambda x: torch.triu(x, diagonal=-1),
    "cumsum_rows": lambda x: torch.cumsum(x, 0),
    "softmax_rows": lambda x: torch.softmax(x, 0),
    "sum_rows": lambda x: x.sum(0),
    "mean_rows": lambda x: x.mean(0, keepdim=True) + x,
    "flip_rows": lambda x: torch.flip(x, [0]),
    "roll_rows": lambda x: torch.roll(x, 1, 0),
    "shift_rows": lambda x: x[1:] - x[:-1],
    "contract_rows": lambda x: x.t() @ x,
    "size_as_value": lambda x: x * x.shape[0],
    "row_local": lambda x: torch.softmax(x, -1) * 2 + 1,      # sliceable: rows independent
    "gather_last_row": lambda x: x[-1],
    "argmax_rows": lambda x: x.argmax(0),
    "sort_rows": lambda x: torch.sort(x, 0).values,
}


@pytest.mark.parametrize("name", list(CASES))
def test_dynamic_lengths_equal_eager(backend, name):
    fn = CASES[name]
    torch._dynamo.reset()
    c = torch.compile(fn, backend="nkipy", dynamic=True)
    for n in (2, 5, 16, 17, 33, 100):
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(c(x), fn(x), rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{name}, length {n}: {m}")


def test_random_values_do_not_repeat_across_slices(backend):
    """Random ops draw each element's value at its position: slices would
    restart the positions, so the rows of a 17-row call would repeat rows 0..."""
    torch._dynamo.reset()
    c = torch.compile(lambda x: x + torch.rand_like(x), backend="nkipy", dynamic=True)
    c(torch.zeros(8, 4))
    r = c(torch.zeros(17, 4))
    assert r.shape == (17, 4) and not torch.equal(r[16], r[0])
    assert len({tuple(row.tolist()) for row in r}) == 17


@pytest.mark.parametrize("layout", ["contiguous", "step", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_outputs_that_are_views_of_inputs(backend, layout, dtype):
    """An output that is a view of an input (an expand of an unsqueeze) is
    rebuilt by AOTAutograd from the input with the returned tensor's strides;
    the dynamic path returned an unpadded contiguous copy, so the view came
    back with wrong values (or failed: 'setStorage ... out of bounds'). Found
    by the differential fuzzer."""
    f = lambda a: a.unsqueeze(0).expand(2, *a.shape)  # noqa: E731
    torch._dynamo.reset()
    c = torch.compile(f, backend="nkipy", dynamic=True)
    for n in (3, 9, 17):
        base = (torch.randn(2 * n, 7, 3) > 0) if dtype == torch.bool else torch.randn(2 * n, 7, 3)
        a = {"contiguous": base[:n], "step": base[::2],
             "transposed": base[:n].transpose(1, 2)}[layout]
        got, want = c(a), f(a)
        assert got.shape == want.shape and got.stride() == want.stride()
        assert torch.equal(got, want)
