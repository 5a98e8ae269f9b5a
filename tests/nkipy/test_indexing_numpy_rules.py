"""Advanced indexing follows NumPy's placement rule: the broadcast index
dimensions replace the advanced indices where those are next to each other,
and go first when anything separates them -- a slice, a new axis, or an
ellipsis even when it stands for no dimension (``a[:, 1, ..., i]`` on a 3-D
array is (len(i), 4), not (4, len(i))). Every index of a small grammar over a
3-D array, read and written, traced and checked against NumPy."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from nkipy.core.interp import run_graph
from nkipy.core.trace import trace

A = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
I = np.array([3, 1], dtype=np.int32)
PARTS = {":": slice(None), "1": 1, "-1": -1, "i": "I", "None": None, "...": Ellipsis,
         "1::2": slice(1, None, 2)}


def _indices():
    for n in range(1, 5):
        for combo in itertools.product(PARTS, repeat=n):
            if "i" not in combo:
                continue
            index = tuple(I if PARTS[c] == "I" else PARTS[c] for c in combo)
            try:
                np.empty((4, 5, 6))[index]
            except IndexError:
                continue
            yield "a[" + ", ".join(combo) + "]", index


CASES = list(_indices())


def test_the_grammar_has_the_cases_of_the_rule():
    names = {name for name, _ in CASES}
    assert {"a[:, 1, ..., i]", "a[1, ..., i]", "a[i, None, i]", "a[i, :, i]"} <= names
    assert len(CASES) > 300


@pytest.mark.parametrize("name, index", CASES, ids=[n for n, _ in CASES])
def test_getitem_and_setitem_place_dimensions_as_numpy(name, index):
    def read(a, i):
        return a[tuple(i if x is I else x for x in index)]

    want = A[index]
    (got,) = run_graph(trace(read, A, I), A, I)
    assert got.shape == want.shape, name
    np.testing.assert_array_equal(got, want)

    def write(a, i, v):
        a[tuple(i if x is I else x for x in index)] = v
        return a

    v = -np.arange(want.size, dtype=np.float32).reshape(want.shape) - 1
    ref = A.copy()
    ref[index] = v
    (got_w,) = run_graph(trace(write, A.copy(), I, v), A.copy(), I, v)
    np.testing.assert_array_equal(got_w, ref)
