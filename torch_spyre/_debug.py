"""``TORCH_SPYRE_DEBUG`` and ``TORCH_SPYRE_DOWNCAST_WARN``: the device's
environment switches, read once at import."""
from __future__ import annotations

import os

_FALSE = {"0", "false", "off", "no", ""}


def _env_int(name: str) -> int:
    try:
        return int(os.environ.get(name, "0").strip() or "0")
    except ValueError:
        return 0


#: TORCH_SPYRE_DEBUG set to a nonzero integer: "[function] message" lines on stdout
ENABLED = _env_int("TORCH_SPYRE_DEBUG") != 0


def downcast_warning_default() -> bool:
    """TORCH_SPYRE_DOWNCAST_WARN: 0/false/off disable the int64 warning; 1/true/on,
    or unset, keep it."""
    value = os.environ.get("TORCH_SPYRE_DOWNCAST_WARN")
    return value is None or value.strip().lower() not in _FALSE


def log(fn: str, msg: str) -> None:
    """Prints ``[fn] msg`` when TORCH_SPYRE_DEBUG is on."""
    if ENABLED:
        print(f"[{fn}] {msg}", flush=True)
