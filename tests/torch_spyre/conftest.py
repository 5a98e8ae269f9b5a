"""The spyre device's tests: this process's PrivateUse1 device is spyre
(tests/conftest.py runs this directory in a pytest process of its own)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Optional

import pytest

import torch_spyre  # noqa: F401  (registers the device before any test runs)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_python(code: str, env: Optional[Dict[str, str]] = None,
               timeout: int = 300) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter with the repository importable."""
    full = dict(os.environ)
    full.pop("TORCH_SPYRE_TESTS", None)
    full["PYTHONPATH"] = ROOT + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, cwd=ROOT, timeout=timeout)


@pytest.fixture
def run_python():
    """``run_python(code, env=None)``: runs code in a fresh interpreter (a
    CompletedProcess with text stdout and stderr)."""
    return _run_python


@pytest.fixture
def spyre():
    """The spyre device."""
    import torch

    return torch.device("spyre")
