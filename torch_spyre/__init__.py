"""torch_spyre: IBM's ``spyre`` device for PyTorch, on the NKIPy stack's device
library (no Spyre hardware needed).

``import torch_spyre`` (or a bare ``import torch`` once the autoload entry point
is installed: ``make spyre-autoload``) makes PrivateUse1 the ``spyre`` device::

    x = torch.tensor([1, 2], dtype=torch.float16, device="spyre")
    y = torch.softmax(x, dim=0)          # an eager op: a compiled device kernel

Tensors lie in device memory in 128-byte sticks (:mod:`torch_spyre._layout`);
int64 is held as int32 (with a one-time warning), bool as float16. Eager ops
run through the compiler that ``torch.compile`` uses; ``arange``, ``sin`` and
``cos`` run on the CPU with a :class:`~torch_spyre.fallbacks.FallbackWarning`.
PyTorch has one PrivateUse1 device per process: ``spyre`` and spike_torch's
``nkipy`` cannot share one. See docs/spyre.md.
"""
from __future__ import annotations

import os

import torch

from .constants import DEVICE_NAME

__all__ = ["DEVICE_NAME"]

#: True while this package imports the device library (spike_torch then
#: serves the spyre device instead of registering its own).
_LOADING_DEVICE_LIBRARY = False


def _claim_privateuse1() -> None:
    holder = torch._C._get_privateuse1_backend_name()
    if holder == "nkipy":
        raise ImportError(
            f"torch_spyre: this process's PrivateUse1 device is already 'nkipy' (spike_torch); "
            f"the '{DEVICE_NAME}' device and the 'nkipy' device cannot share a process: use "
            f"'{DEVICE_NAME}' in a separate process")
    if holder not in ("privateuseone", DEVICE_NAME):
        raise ImportError(
            f"torch_spyre: this process's PrivateUse1 device is already '{holder}'; the "
            f"'{DEVICE_NAME}' device needs a separate process")
    if holder != DEVICE_NAME:
        torch.utils.rename_privateuse1_backend(DEVICE_NAME)


_claim_privateuse1()

import spike  # noqa: E402
from spike import spike_singleton  # noqa: E402

# One device, as on a Spyre card: the runtime shows one core unless the user
# chose cores (NEURON_RT_VISIBLE_CORES, LOCAL_RANK) or started it already.
if not spike_singleton.is_active() and "NEURON_RT_VISIBLE_CORES" not in os.environ and \
        "LOCAL_RANK" not in os.environ:
    spike.configure([0])

_LOADING_DEVICE_LIBRARY = True
try:
    import spike_torch  # noqa: E402,F401  (the device library, without the nkipy device)
    from spike_torch import _C as _device_lib  # noqa: E402
    from spike_torch import _generic  # noqa: E402
    from spike_torch import device_module as _lib_device  # noqa: E402
finally:
    _LOADING_DEVICE_LIBRARY = False

from . import _debug  # noqa: E402

_device_lib.set_personality(DEVICE_NAME, tiled=True)
_device_lib.lib.spike_torch_set_options(int(_debug.ENABLED), 0)
_device_lib.lib.spike_torch_downcast_warning(int(_debug.downcast_warning_default()))

from . import _C, _io, _kernels, _monkey_patch, device_module, fallbacks  # noqa: E402,F401

_kernel_lib = _lib_device.Library("aten", "IMPL")   # kept alive for the process
_io.install(_kernel_lib)
_generic.set_storage_policy(_kernels.TiledStorage())
if not hasattr(torch, DEVICE_NAME):
    torch._register_device_module(DEVICE_NAME, device_module)
_monkey_patch.install()


def _autoload() -> None:
    """The ``torch.backends`` entry point: importing this package did the work."""

from . import _inductor  # noqa: E402

_inductor.register()
