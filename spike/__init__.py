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
import sys

# Where the runtime looks for the GEMM library (MKL from PyPI installs into
# <prefix>/lib); read lazily at the first matrix product. See docs/gemm.md.
os.environ.setdefault("NKRT_GEMM_PATH", os.path.join(sys.prefix, "lib"))

from ._spike import (  # noqa: E402  (after the environment set-up above)
    ExecutionEvent,
    ModelTensorInfo,
    NrtError,
    NrtIndexError,
    NrtModel,
    NrtTensor,
    SpikeError,
    SpikeRuntimeError,
    SystemTraceSession,
    TensorMetadata,
)
from ._types import BenchmarkResult  # noqa: E402
from .spike_model import SpikeModel  # noqa: E402
from .spike_profiler import SpikeProfiler  # noqa: E402
from .spike_async import SpikeAsync, SpikeAsyncFuture, SpikeAsyncTask, SpikeStream  # noqa: E402
from .spike_singleton import configure, get_spike_singleton, reset  # noqa: E402
from .spike_tensor import SpikeTensor  # noqa: E402

__all__ = [
    "SpikeModel",
    "SpikeTensor",
    "SpikeProfiler",
    "SpikeAsync",
    "SpikeAsyncFuture",
    "SpikeAsyncTask",
    "SpikeStream",
    "configure",
    "reset",
    "get_spike_singleton",
    "NrtError",
    "NrtIndexError",
    "SpikeError",
    "SpikeRuntimeError",
    "SystemTraceSession",
    "BenchmarkResult",
    "ExecutionEvent",
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
