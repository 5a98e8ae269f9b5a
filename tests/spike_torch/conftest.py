"""Fixtures of the spike_torch tests.

spike_torch is imported lazily (by the session fixture, not at collection) so
that the other test directories see no runtime created at import time. The
runtime is configured with two visible cores (nkipy:0 and nkipy:1) and a small
arena per core so that out-of-memory paths are quick to reach.
"""
from __future__ import annotations

import os
import warnings
from typing import Iterator

import pytest

from spike_torch_helpers import CORE_MEMORY, quiet


def _configured() -> bool:
    """Whether the runtime is the one these tests configure (two cores, a
    small arena): tests of other directories that ran in between in the same
    process (pytest-xdist interleaves files) may have reset or reconfigured it."""
    from spike import spike_singleton

    return (spike_singleton.is_active() and
            os.environ.get("NEURON_RT_VISIBLE_CORES") == "0,1" and
            spike_singleton._options == {"core_memory_bytes": CORE_MEMORY})


def _configure() -> None:
    import spike
    import spike_torch

    quiet(spike_torch.reset)  # drops the state of an earlier runtime, then closes it
    spike.configure([0, 1], core_memory_bytes=CORE_MEMORY)
    spike.get_spike_singleton()


@pytest.fixture(scope="session")
def spike_torch_module():
    import spike
    from spike import spike_singleton

    saved = {k: os.environ.get(k) for k in ("NEURON_RT_VISIBLE_CORES",)}
    quiet(spike.reset)
    spike.configure([0, 1], core_memory_bytes=CORE_MEMORY)
    import spike_torch

    _configure()
    yield spike_torch
    spike_torch.empty_cache()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    spike_singleton._options.clear()


@pytest.fixture(autouse=True)
def nkipy(spike_torch_module) -> Iterator:
    """Every test: spike_torch imported, device 0 current, fallback warnings quiet
    unless a test asks for them."""
    if not _configured():
        _configure()
    spike_torch_module.set_device(0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="nkipy: operator")
        yield spike_torch_module
    spike_torch_module.set_device(0)
