"""Integer settings read from the environment, refused with a message naming
the variable when they are not what they must be (``WORLD_SIZE=abc`` is an
error, never a silent default)."""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["env_int"]


def env_int(name: str, default: Optional[int] = None, minimum: Optional[int] = None) -> Optional[int]:
    """``int($name)``, or ``default`` when it is unset or blank.

    Raises ``ValueError`` naming the variable when the value is not a decimal
    integer or is below ``minimum``."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii():
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}")
    value = int(text)
    if minimum is not None and value < minimum:
        raise ValueError(f"environment variable {name} must be >= {minimum}, got {raw!r}")
    return value
