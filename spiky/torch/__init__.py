"""``spiky.torch``: the ``torch.compile`` backend ``"nkipy"`` (importing registers it).

The same implementation as ``torch_to_nkipy`` (one backend, one config)::

    from spiky.torch import init_nkipy_backend
    init_nkipy_backend()          # cache: ~/.cache/torch_to_nkipy (docs/security.md)
    compiled = torch.compile(model, backend="nkipy")
"""
from torch_to_nkipy.config import (NKIPyBackendConfig, get_nkipy_backend_config,
                                   init_nkipy_backend, is_nkipy_backend_initialized,
                                   reset_nkipy_backend, reset_nkipy_backend_config,
                                   set_nkipy_backend_config)
from torch_to_nkipy import backend as _backend  # noqa: F401  (registers "nkipy")
from torch_to_nkipy.options import ExecOptions, OPTION_TYPES

import spike_torch as _spike_torch

current_device = _spike_torch.current_device
set_device = _spike_torch.set_device
device_count = _spike_torch.device_count

__all__ = ["init_nkipy_backend", "is_nkipy_backend_initialized", "reset_nkipy_backend",
           "get_nkipy_backend_config", "set_nkipy_backend_config", "reset_nkipy_backend_config",
           "NKIPyBackendConfig", "ExecOptions", "OPTION_TYPES",
           "current_device", "set_device", "device_count"]
