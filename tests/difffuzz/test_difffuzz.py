"""A fixed-seed slice of the differential fuzzer (difffuzz.py): random small
programs run eagerly on the device, compiled on CPU and device inputs, with
dynamic shapes and through autograd, each compared with eager CPU. Any silent
mismatch that is not in difffuzz.KNOWN fails with its reproducer. `make
fuzz-torch` runs the same for as long as asked (tools/fuzz_torch.py)."""
from __future__ import annotations

import logging
import os
import random

import pytest
import torch

from tests.difffuzz import difffuzz as df

CASES = int(os.environ.get("NKIPY_DIFFFUZZ_CASES", "120"))
SEEDS = (11, 12, 13)


@pytest.fixture(scope="module")
def quiet():
    fake = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake.level
    fake.setLevel(logging.CRITICAL)     # invalid draws make fake tensors log their meta errors
    limit = torch._dynamo.config.cache_size_limit
    torch._dynamo.config.cache_size_limit = 64
    yield
    torch._dynamo.config.cache_size_limit = limit
    fake.setLevel(level)


@pytest.mark.parametrize("seed", SEEDS)
def test_fixed_seed_slice_has_no_silent_mismatch(backend, quiet, seed):
    rng = random.Random(seed)
    new = []
    ran = 0
    for _ in range(CASES // len(SEEDS)):
        case = df.generate(rng)
        ran += 1
        for f in df.run_case(case):
            if f.kind == "mismatch" and not df.known(f):
                new.append(str(f))
    assert ran == CASES // len(SEEDS)
    assert not new, "silent mismatches against eager CPU:\n" + "\n".join(new)


def test_compare_and_shrink_find_what_they_should():
    """The comparison catches a wrong value, a wrong dtype and a missing error;
    shrinking keeps a failing case failing while making it smaller."""
    assert df.compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])) is None
    assert "differs" in df.compare(torch.tensor([1, 2]), torch.tensor([1, 3]))
    assert "float16" in df.compare(torch.tensor([1.0]).half(), torch.tensor([1.0]))
    assert df.compare(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    assert "float32" in df.compare(torch.tensor([1.0]), torch.tensor([1.1]))
    case = df.Case([df.Input((8, 17), "float32", "transposed", 1)],
                   [("exp", {"d": 0, "k": False}), ("sum", {"d": -1, "k": True})], ("eager",))
    small = df.shrink(case, lambda c: any(op == "sum" for op, _ in c.ops))
    assert small.ops == [("sum", {"d": -1, "k": True})]
    assert small.inputs[0].shape == (1, 1) and small.inputs[0].layout == "contiguous"
    assert "check('lambda a: a.sum(dim=-1, keepdim=True)'" in small.repro()


def test_a_planted_mismatch_is_reported(backend, monkeypatch):
    """The fuzzer's own check: a device op made wrong on purpose is found."""
    case = df.Case([df.Input((4, 5), "float32", "contiguous", 3)],
                   [("mul_scalar", {"d": 0, "k": False})], ("eager", "compiled"))
    assert df.run_case(case) == []
    bad = dict(df.OPS_BY_NAME)
    bad["mul_scalar"] = df.Op("mul_scalar", "(({a} * 3) if {a}.device.type == 'cpu' "
                                            "else ({a} * 3.001))")
    monkeypatch.setattr(df, "OPS_BY_NAME", bad)
    found = df.run_case(case)
    assert [f.mode for f in found] == ["eager"] and found[0].kind == "mismatch"


def test_a_reproducer_fails_alone_in_every_mode(backend):
    """check() runs each mode a finding can name (a reproducer that skipped
    dynamic or grad would pass while the bug is there), and a reproducer is
    written for the failing mode and, when dynamic, at the failing length."""
    x = "[_rand([5, 3], torch.float32, 1)]"
    planted = {
        "eager": "lambda a: a * (3 if a.device.type == 'cpu' else 3.001)",
        "compiled": "lambda a: a * (3 if not torch.compiler.is_compiling() else 3.001)",
        "compiled_device": "lambda a: a * (3 if a.device.type == 'cpu' else 3.001)",
        "dynamic": "lambda a: a * (3 if not torch.compiler.is_compiling() else 3.001)",
        "grad": "lambda a: a * (3 if a.device.type == 'cpu' else 3.001)",
    }
    for mode, program in planted.items():
        case = f"check({program!r}, {x}, modes=[{mode!r}])"
        with pytest.raises(AssertionError, match=f"^{mode}: "):
            exec(case, {"torch": torch, "_rand": df._rand, "check": df.check})
        df.check(program.replace("3.001", "3"), [df._rand([5, 3], torch.float32, 1)], [mode])
    with pytest.raises(ValueError, match="unknown mode 'dynamc'"):
        df.check("lambda a: a", [torch.ones(2)], ["dynamc"])

    case = df.Case([df.Input((8, 3), "float32", "step", 4), df.Input((8, 3), "float32", "offset", 5)],
                   [("add", {"d": 0, "k": False})], df.MODES)
    small = df.reproducer(df.Finding(case, "dynamic(n=9)", "mismatch", ""))
    assert small.modes == ("dynamic",)
    assert [i.shape for i in small.inputs] == [(9, 3), (9, 3)]
    assert "modes=['dynamic']" in small.repro() and "_rand([18, 3]" in small.repro()
    assert not df.reproduces(small)


# Reproducers of mismatches the fuzzer found, kept after their fixes (the
# first two: a row group's member read a reduction's result along the row,
# and a flip across rows of a product the group had computed).
FOUND = [
    ("lambda a, b: a.sum(-1) + b",
     "[_rand([2, 2], torch.float32, 1), _rand([2, 1], torch.float32, 2)]"),
    ("lambda a, b: torch.flip(a * b, [0]) - torch.flip(a * b, [0]).sum(1, keepdim=True)",
     "[_rand([2, 1], torch.float32, 3), _rand([2], torch.float32, 4)]"),
    ("lambda a, b: torch.log_softmax(torch.flip(a * b, [0]), -1)",
     "[_rand([3, 1], torch.float32, 5), _rand([4], torch.float32, 6)]"),
    ("lambda a, b: torch.amax(a, -1) * b",
     "[_rand([3, 3], torch.float32, 7), _rand([3, 1], torch.float32, 8)]"),
    # atan2 of bool or int8 operands computed in float16 (NumPy's promotion)
    ("lambda a, b: torch.atan2(a, b)",
     "[_rand([1, 3, 1], torch.bool, 690248440), _rand([1, 1, 1], torch.bool, 830012302)]"),
    # atan2(NaN, 0) gave -pi/2
    ("lambda a, b: torch.atan2(torch.remainder(a, b), b)",
     "[_rand([1, 1], torch.bfloat16, 739078096), _rand([1, 3], torch.bfloat16, 387616602)]"),
]


@pytest.mark.parametrize("program,inputs", FOUND, ids=range(len(FOUND)))
def test_found_mismatches_stay_fixed(backend, program, inputs):
    df.check(program, eval(inputs, {"torch": torch, "_rand": df._rand}))  # noqa: S307
