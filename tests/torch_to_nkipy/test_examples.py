"""Every example in examples/torch_to_nkipy runs (in a fresh process) and passes its own checks."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "torch_to_nkipy", "*.py")))


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    env = dict(os.environ, NKIPY_EXAMPLE_CACHE=str(tmp_path / "cache"))
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.startswith("SKIPPED"):
        pytest.skip(r.stdout.strip())
    assert "difference" in r.stdout or "vs reference" in r.stdout
