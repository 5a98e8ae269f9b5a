"""torch_to_nkipy: the ``torch.compile(backend="nkipy")`` backend.

``init_nkipy_backend()`` then ``torch.compile(model, backend="nkipy")``: FX graphs
are lowered through the ATen op registry to NumPy source, compiled by nkipy
and run on the device; unsupported ops run on the CPU. Importing it also
registers the ``torch.distributed`` backend ``"nkipy"`` (:mod:`.distributed`).
"""
from .config import (NKIPyBackendConfig, get_nkipy_backend_config, init_nkipy_backend,
                     is_nkipy_backend_initialized, reset_nkipy_backend,
                     reset_nkipy_backend_config, set_nkipy_backend_config)
from .lowering import AtenOpRegistry
from .kernel import NKIPyKernel, load_func_from_file, save_string_to_file
from .custom_ops import NKIOpRegistry, NKIPyCustomKernelError, mark_subgraph_identity
from . import backend  # noqa: F401  (registers "nkipy" with dynamo)
from .backend import gm_split_and_wrap
from . import distributed
from . import threads

threads.install()        # one thread's compile no longer fails the others' calls

distributed.register()   # torch.distributed.init_process_group("nkipy")

__all__ = ["init_nkipy_backend", "is_nkipy_backend_initialized", "reset_nkipy_backend",
           "get_nkipy_backend_config", "set_nkipy_backend_config", "reset_nkipy_backend_config",
           "NKIPyBackendConfig", "AtenOpRegistry", "NKIPyKernel",
           "load_func_from_file", "save_string_to_file", "gm_split_and_wrap", "NKIOpRegistry", "NKIPyCustomKernelError",
           "mark_subgraph_identity"]
