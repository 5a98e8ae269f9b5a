"""The torch_to_nkipy tests' backend fixture: one backend config per test."""
from __future__ import annotations

import logging

import pytest


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


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test taking more than ~10 s (multi-process); "
                                       "still run by make test")
