"""Writing files the stack produces without trusting what already lies at the path.

Every file the Python layers write for the user (profiles, NEFF copies beside
them, compiled artifacts) goes through :func:`write_atomic`: the bytes are
written to a fresh temporary file created exclusively (``O_CREAT | O_EXCL``,
mode 0600, so a planted file or symlink under a guessable name is never opened)
in the target's own directory, then renamed over the target. ``rename`` replaces
a symlink planted at the target instead of writing through it, and a reader
never sees a half-written file. See docs/security.md.

:func:`safe_child` checks a file name that came from outside (a NEFF's output
name, say) before it is joined under a directory.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Optional, Union

__all__ = ["write_atomic", "safe_child"]


def _default_mode() -> int:
    """0666 less the umask, read without changing it (``os.umask`` would open a
    window in which other threads create files with no mask)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, str],
                 mode: Optional[int] = None) -> str:
    """Writes ``data`` to ``path`` atomically and returns the path.

    ``mode`` is the file's final permission bits (default: 0666 less the umask,
    as ``open`` would give; pass 0o600 for private files). The temporary file
    is created with ``O_EXCL`` in the same directory and removed if anything
    fails; errors are ``OSError`` naming ``path``.
    """
    path = os.fspath(path)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create a temporary file in {directory!r} to write "
                                 f"{path!r}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            os.fchmod(f.fileno(), _default_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, f"cannot write {path!r}: {exc.strerror}") from exc
        raise
    return path


def safe_child(directory: Union[str, os.PathLike], name: str, what: str = "file") -> str:
    """``directory/name`` where ``name`` must be one plain path component.

    Refuses (``ValueError`` naming it) an empty name, ``.``, ``..``, a name with
    a path separator or a NUL byte: such a name would land outside
    ``directory``.
    """
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name
            or (os.sep != "/" and os.sep in name) or (os.altsep and os.altsep in name)):
        raise ValueError(f"refusing {what} name {name!r}: it must be a plain file name, "
                         f"without '/', '..' or NUL, so it stays inside {os.fspath(directory)!r}")
    return os.path.join(os.fspath(directory), name)
