"""Shared set-up for the spiky tests: the backend on a session cache, stats reset."""
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
    """spiky.torch's backend initialised (defaults), dynamo and stats reset around."""
    import torch._dynamo

    import spiky
    from spiky.torch import init_nkipy_backend, reset_nkipy_backend

    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=nkipy_cache, log_level=logging.INFO)
    torch._dynamo.reset()
    spiky.reset_stats()
    yield nkipy_cache
    spiky.flush()
    torch._dynamo.reset()
    reset_nkipy_backend()
