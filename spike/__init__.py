"""spike: the Pythonic runtime layer of the NKIPy stack, over the nkrt device runtime.

High level: :class:`SpikeTensor` (device tensors with NumPy I/O) and
:class:`SpikeModel` (NEFFs called with name-keyed tensors), both using the
per-process runtime from :func:`get_spike_singleton`, configured with
:func:`configure` and closed with :func:`reset`.

Low level (advanced, testing): ``from spike._spike import Spike``.
"""
from __future__ import annotations

import logging
import os

from ._spike import (
    ModelTensorInfo,
    NrtError,
    NrtModel,
    NrtTensor,
    SpikeError,
    SpikeRuntimeError,
    SystemTraceSession,
    TensorMetadata,
)
from ._types import BenchmarkResult
from .spike_model import SpikeModel
from .spike_singleton import configure, get_spike_singleton, reset
from .spike_tensor import SpikeTensor

__all__ = [
    "SpikeModel",
    "SpikeTensor",
    "configure",
    "reset",
    "get_spike_singleton",
    "NrtError",
    "SpikeError",
    "SpikeRuntimeError",
    "SystemTraceSession",
    "BenchmarkResult",
    "ModelTensorInfo",
    "NrtModel",
    "NrtTensor",
    "TensorMetadata",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())


def get_include() -> str:
    """Absolute path of the nkrt C headers (the directory holding ``nkrt/``).

    Compilers of NEFFs pass it as ``-I``: generated kernels include
    ``nkrt/neff_abi.h``. Found relative to this package (``runtime/include``
    beside the ``spike`` directory).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (
        os.path.join(here, "include"),
        os.path.join(os.path.dirname(here), "runtime", "include"),
    ):
        if os.path.isfile(os.path.join(candidate, "nkrt", "neff_abi.h")):
            return candidate
    return os.path.join(os.path.dirname(here), "runtime", "include")
