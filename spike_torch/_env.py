"""Environment switches of spike_torch (documented in docs/spike_torch.md)."""
from __future__ import annotations

import os

_FALSE = {"0", "false", "off", "no", ""}


def flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in _FALSE


def debug_enabled() -> bool:
    """SPIKE_TORCH_DEBUG=1: debug logging (Python logger and the C++ allocator/fallback)."""
    return flag("SPIKE_TORCH_DEBUG", False)


def fallback_warnings_enabled() -> bool:
    """SPIKE_TORCH_FALLBACK_WARN=0 silences the once-per-operator CPU-fallback warnings."""
    return flag("SPIKE_TORCH_FALLBACK_WARN", True)
