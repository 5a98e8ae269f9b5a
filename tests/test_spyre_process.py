"""The spyre device's tests (tests/torch_spyre) in a pytest process of their
own: PyTorch has one PrivateUse1 device per process, and this one's is nkipy
(see tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_spyre_device_suite():
    env = dict(os.environ, TORCH_SPYRE_TESTS="1", NKIPY_SLOWEST_FILES="0")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join("tests", "torch_spyre")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    assert r.returncode == 0, f"{summary}\n{r.stdout[-20000:]}\n{r.stderr[-4000:]}"
    assert " passed" in summary and "failed" not in summary, summary
