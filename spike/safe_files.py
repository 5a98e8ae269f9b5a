"""Files the stack writes and reads back, without trusting what lies at a path.

Every file the Python layers write for the user (profiles, NEFF copies beside
them, compiled artifacts) goes through :func:`write_atomic`: the bytes are
written to a fresh temporary file created exclusively (``O_CREAT | O_EXCL``,
mode 0600, so a planted file or symlink under a guessable name is never opened)
in the target's own directory, then renamed over the target. ``rename`` replaces
a symlink planted at the target instead of writing through it, and a reader
never sees a half-written file. See docs/security.md.

:func:`safe_child` checks a file name that came from outside (a NEFF's output
name, say) before it is joined under a directory.

Caches hold code that runs in this process (a NEFF is a shared object, a cached
``nkipy_func.py`` is Python), so whoever can write into a cache runs code as
its user. :func:`private_dir` creates a cache directory private (0700) or
checks an existing one, :func:`check_trusted` refuses a directory or file
that another user owns or that others may write, and :func:`check_ancestors`
refuses one below a directory where another user could rename it away and put
theirs in its place; each names the path and the fix (:class:`UntrustedPathError`). docs/security.md states the trust model.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import Optional, Union

__all__ = ["write_atomic", "write_private", "safe_child", "private_dir", "check_trusted",
           "check_ancestors", "UntrustedPathError"]


class UntrustedPathError(PermissionError):
    """A cache directory or file that another user owns or others may write."""


def _default_mode(path: str) -> int:
    """The mode of the regular file of the user's at ``path`` (a rewrite keeps
    a 0600 file private), else 0666 less the umask, read without changing it
    (``os.umask`` would open a window in which other threads create files with
    no mask)."""
    try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
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

    ``mode`` is the file's final permission bits (default: those of the file
    it replaces when that is a regular file of the user's, else 0666 less the
    umask, as ``open`` would give; pass 0o600 for private files). The temporary file
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
            os.fchmod(f.fileno(), _default_mode(path) if mode is None else mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, f"cannot write {path!r}: {exc.strerror}") from exc
        raise
    return path


def write_private(path: Union[str, os.PathLike], data: Union[bytes, str]) -> str:
    """:func:`write_atomic` with mode 0600: a file of a private cache."""
    return write_atomic(path, data, mode=0o600)


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


def check_trusted(path: Union[str, os.PathLike], what: str = "cache directory",
                  st: Optional[os.stat_result] = None) -> os.stat_result:
    """Refuses ``path`` unless the current user owns it and neither group nor
    others may write it (a symlink is judged by what it points to, which must
    pass the same test). Returns its ``stat``; raises
    :class:`UntrustedPathError` naming the path, the reason and the fix, or
    ``OSError`` if it cannot be read."""
    path = os.fspath(path)
    if st is None:
        st = os.stat(path)
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UntrustedPathError(
            f"refusing the {what} {path!r}: it belongs to uid {st.st_uid}, not to you "
            f"(uid {uid}). Whoever can write into a compile cache runs code in this process. "
            f"Use a directory of your own, or take it over: chown -R {uid} {path!r}")
    if st.st_mode & 0o022:
        raise UntrustedPathError(
            f"refusing the {what} {path!r}: its mode {stat.S_IMODE(st.st_mode):04o} lets "
            f"{'others' if st.st_mode & 0o002 else 'its group'} write it. Whoever can write "
            f"into a compile cache runs code in this process. Make it private: "
            f"chmod -R go-w {path!r}")
    return st


def check_ancestors(path: Union[str, os.PathLike], what: str = "cache directory") -> None:
    """Refuses ``path`` when a directory above it lets another user rename or
    replace what lies below: each must belong to the current user or root and
    be writable by no one else, unless it is sticky (as /tmp is: there only an
    entry's owner may rename it). Checked along the path as written and along
    the path its symlinks resolve to. Raises :class:`UntrustedPathError`."""
    _check_dirs_from(os.path.dirname(os.path.abspath(os.fspath(path))), path, what)


def _check_dirs_from(first: str, path: Union[str, os.PathLike], what: str) -> None:
    """check_ancestors' rule for ``first`` and every directory above it (along
    the path as written and as its symlinks resolve), naming ``path``."""
    uid = os.geteuid()
    absolute = os.path.abspath(os.fspath(path))
    seen = set()
    for start in (os.path.join(first, "."), os.path.join(os.path.realpath(first), ".")):
        parent = os.path.dirname(start)
        while parent not in seen:
            seen.add(parent)
            st = os.stat(parent)
            if st.st_uid not in (uid, 0) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
                who = (f"belongs to uid {st.st_uid}" if st.st_uid not in (uid, 0) else
                       f"has mode {stat.S_IMODE(st.st_mode):04o}")
                raise UntrustedPathError(
                    f"refusing the {what} {absolute!r}: the directory {parent!r} above it "
                    f"{who}, so another user could rename or replace what lies below it. Keep "
                    f"the {what} under directories only you (or root) can write, such as the "
                    f"default under ~/.cache")
            up = os.path.dirname(parent)
            if up == parent:
                break
            parent = up


def private_dir(path: Union[str, os.PathLike], what: str = "cache directory") -> str:
    """Creates ``path`` as a private directory (mode 0700; missing parents are
    made with default modes) or checks an existing one with
    :func:`check_trusted`. Returns the path. Nothing is created below a
    directory that fails :func:`check_ancestors`' rule (another user's home,
    say): the nearest existing directory above ``path`` is checked first."""
    path = os.fspath(path)
    existing = os.path.abspath(path)
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if existing != os.path.abspath(path):
        _check_dirs_from(existing, path, what)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    st = check_trusted(path, what)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"the {what} {path!r} is not a directory")
    check_ancestors(path, what)
    return path
