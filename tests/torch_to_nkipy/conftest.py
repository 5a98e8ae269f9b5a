"""Shared set-up for the torch_to_nkipy tests: one backend config per session."""
from __future__ import annotations

import logging
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def nkipy_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("nkipy_cache"))


@pytest.fixture
def backend(nkipy_cache):
    """The backend initialised on a session cache, reset afterwards."""
    import torch._dynamo
    from torch_to_nkipy import init_nkipy_backend, reset_nkipy_backend

    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=nkipy_cache, log_level=logging.INFO)
    torch._dynamo.reset()
    yield nkipy_cache
    torch._dynamo.reset()
    reset_nkipy_backend()
