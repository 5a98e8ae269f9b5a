"""The spiky tests' backend fixture: the backend on the session cache, stats reset."""
from __future__ import annotations

import logging

import pytest


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
