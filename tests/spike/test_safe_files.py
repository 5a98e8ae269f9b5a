"""spike.safe_files: atomic writes that never follow a planted file or symlink,
and child names that cannot leave their directory."""
from __future__ import annotations

import os
import stat

import pytest

from spike.safe_files import safe_child, write_atomic


def test_write_atomic_writes_and_replaces(tmp_path):
    p = tmp_path / "f.json"
    write_atomic(p, "one")
    assert p.read_text() == "one"
    write_atomic(p, b"two")
    assert p.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f.json"]      # no temporary left behind


def test_write_atomic_mode(tmp_path):
    p = tmp_path / "private"
    write_atomic(p, b"x", mode=0o600)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "default", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "default").stat().st_mode) == 0o640


def test_write_atomic_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "trace.json"
    target.symlink_to(victim)
    # the old writers' guessable temporary names, planted too
    for name in (f"trace.json.tmp{os.getpid()}", ".trace.json.tmp"):
        (tmp_path / name).symlink_to(victim)
    write_atomic(target, "new")
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_text() == "new"


def test_write_atomic_error_names_the_path(tmp_path):
    with pytest.raises(OSError, match="missing.*f.json"):
        write_atomic(tmp_path / "missing" / "f.json", b"x")
    d = tmp_path / "dir"
    d.mkdir()
    with pytest.raises(OSError, match=r"cannot write .*dir"):
        write_atomic(d, b"x")                       # a directory is in the way
    assert os.listdir(d) == [] and sorted(os.listdir(tmp_path)) == ["dir"]


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\0b"])
def test_safe_child_refuses_names_that_leave_the_directory(tmp_path, name):
    with pytest.raises(ValueError, match="refusing output name .* plain file name"):
        safe_child(tmp_path, name, "output")


def test_safe_child_accepts_plain_names(tmp_path):
    assert safe_child(tmp_path, "output0.npy") == os.path.join(tmp_path, "output0.npy")
    assert safe_child(tmp_path, "..hidden") == os.path.join(tmp_path, "..hidden")


def test_write_atomic_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    p = tmp_path / "trace.json"
    p.write_text("old")
    os.chmod(p, 0o600)
    write_atomic(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o600


def test_write_private_is_0600(tmp_path):
    from spike.safe_files import write_private

    p = tmp_path / "meta.json"
    write_private(p, "{}")
    assert p.read_text() == "{}" and stat.S_IMODE(p.stat().st_mode) == 0o600
