"""Shared by every Python test directory: the repository importable, one kernel
cache per test session."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def nkipy_cache(tmp_path_factory) -> str:
    """A torch_to_nkipy cache directory shared by the session's tests."""
    return str(tmp_path_factory.mktemp("nkipy_cache"))
