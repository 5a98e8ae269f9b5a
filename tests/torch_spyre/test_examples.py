"""examples/spyre: each runs as a user would run it, and checks itself
against the CPU."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(f for f in os.listdir(os.path.join(ROOT, "examples", "spyre"))
                  if f.endswith(".py"))


def test_every_issue_example_is_there():
    assert {"tensor_allocate.py", "softmax.py", "gelu.py", "softplus.py", "mean.py",
            "mul.py"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TORCH_SPYRE_TESTS", None)
    r = subprocess.run([sys.executable, os.path.join("examples", "spyre", name)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    if name == "tensor_allocate.py":
        assert r.stdout == "x device is spyre:0\n"
    if name == "softmax.py":
        assert "compiled == eager bit for bit: True" in r.stdout
