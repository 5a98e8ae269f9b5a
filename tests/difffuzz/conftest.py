"""The differential fuzzer's fixtures: the nkipy device and the compile backend."""
from __future__ import annotations

import logging

import pytest


@pytest.fixture
def backend(nkipy_cache):
    """The backend initialised on the session cache (quiet), reset afterwards."""
    import torch._dynamo

    import spike_torch  # noqa: F401  (the nkipy device)
    from torch_to_nkipy import init_nkipy_backend, reset_nkipy_backend

    reset_nkipy_backend()
    init_nkipy_backend(nkipy_cache=nkipy_cache, log_level=logging.ERROR)
    torch._dynamo.reset()
    yield nkipy_cache
    torch._dynamo.reset()
    reset_nkipy_backend()
