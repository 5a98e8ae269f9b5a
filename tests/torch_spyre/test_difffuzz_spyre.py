"""A fixed-seed slice of the differential fuzzer (tests/difffuzz/difffuzz.py)
on the spyre device: random small programs over strided, transposed, offset,
expanded and 0-d inputs run eagerly, compiled with torch.compile's default
backend and through autograd, each compared with eager CPU (int64 results as
the device holds them: their low 32 bits). `python tools/fuzz_torch.py
--device spyre` runs the same for as long as asked."""
from __future__ import annotations

import logging
import os
import random
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.difffuzz import difffuzz as df  # noqa: E402

CASES = int(os.environ.get("NKIPY_DIFFFUZZ_CASES", "120")) // 2
SEEDS = (31, 32)


@pytest.fixture(scope="module")
def on_spyre():
    fake = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake.level
    fake.setLevel(logging.CRITICAL)
    limit = torch._dynamo.config.cache_size_limit
    torch._dynamo.config.cache_size_limit = 64
    df.use_device("spyre")
    yield
    df.use_device("nkipy")
    torch._dynamo.config.cache_size_limit = limit
    fake.setLevel(level)


@pytest.mark.parametrize("seed", SEEDS)
def test_fixed_seed_slice_has_no_silent_mismatch(on_spyre, seed):
    rng = random.Random(seed)
    new = []
    for _ in range(CASES // len(SEEDS)):
        case = df.generate(rng)
        assert set(case.modes) <= set(df.SPYRE_MODES)
        for f in df.run_case(case):
            if f.kind == "mismatch" and not df.known(f):
                new.append(str(f))
    assert not new, "silent mismatches against eager CPU:\n" + "\n".join(new)


def test_int64_results_are_compared_as_held(on_spyre):
    big = torch.tensor([2**40 + 7])
    assert df._as_held(big).tolist() == [7]
    assert df._as_held((big, torch.ones(1)))[0].tolist() == [7]


def test_device_switch_is_checked():
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        df.use_device("cuda")
