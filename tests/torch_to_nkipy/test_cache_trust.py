"""The torch_to_nkipy cache runs nothing and loads nothing it did not write.

Cached entries hold code that runs in the user's process (the generated
``nkipy_func.py``, the NEFF) and data it computes with (``.npy`` constants).
These tests plant a bytecode file, a NEFF with a constructor and wrong
constants where a victim's compile would find them, in (a) a world-writable
cache, (b) a cache owned by another uid, (c) a private cache whose entry
another uid owns, and (d) the user's own private cache (bytecode only): the
planted code never runs, the planted data is never used. The tests run as root
and hand files to another uid with os.chown."""
from __future__ import annotations

import logging
import os
import py_compile
import shutil
import subprocess
import textwrap

import pytest
import torch

from spike.safe_files import UntrustedPathError
from torch_to_nkipy import init_nkipy_backend, reset_nkipy_backend

OTHER_UID = 54321

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another uid")


def _f(x):
    return x * 2 + torch.tensor([1.0, 2.0, 3.0])


def _compile_in(cache: str) -> torch.Tensor:
    reset_nkipy_backend()
    torch._dynamo.reset()
    init_nkipy_backend(nkipy_cache=cache, log_level=logging.WARNING)
    try:
        return torch.compile(_f, backend="nkipy")(torch.ones(3))
    finally:
        torch._dynamo.reset()
        reset_nkipy_backend()


@pytest.fixture
def layout(tmp_path):
    """A real cache, compiled once: the entry names a victim's compile looks for."""
    ref = tmp_path / "ref"
    out = _compile_in(str(ref))
    torch.testing.assert_close(out, torch.tensor([3.0, 4.0, 5.0]))
    (entry,) = (ref / "rank_0").iterdir()
    (neff_entry,) = (entry / "neff").iterdir()
    return ref, entry.relative_to(ref), neff_entry.relative_to(ref)


def _plant(root, layout, marker):
    """Copies the reference cache to ``root`` and plants code and data in it."""
    ref, entry, neff_entry = layout
    shutil.copytree(ref, root)
    e = root / entry
    # constants the graph would compute with
    import numpy as np
    np.save(e / "v1.npy", np.array([100.0, 200.0, 300.0], np.float32))
    # bytecode for nkipy_func.py that Python's import system would run unchecked
    evil = e / "evil_src.py"
    evil.write_text(textwrap.dedent(f"""
        open({str(marker)!r}, "a").write("pyc ran\\n")
        def nkipy_func(*args):
            raise SystemExit("planted")
    """))
    pyc = e / "__pycache__" / f"nkipy_func.{__import__('sys').implementation.cache_tag}.pyc"
    pyc.parent.mkdir(exist_ok=True)
    py_compile.compile(str(evil), cfile=str(pyc), dfile=str(e / "nkipy_func.py"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    evil.unlink()
    # a NEFF whose constructor runs at load, recorded as valid in meta.json
    src = e / "evil.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
          FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("neff ran\\n", f); fclose(f); }}
        }}
    """))
    neff = root / neff_entry / "kernel.neff"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(neff)], check=True)
    src.unlink()
    import hashlib
    import json
    meta_path = root / neff_entry / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["neff_sha256"] = hashlib.sha256(neff.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta))


def _chown_tree(path, uid):
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            os.chown(name, uid, -1)


def test_world_writable_cache_refused(tmp_path, layout):
    root, marker = tmp_path / "shared", tmp_path / "marker"
    _plant(root, layout, marker)
    os.chmod(root, 0o777)
    with pytest.raises(UntrustedPathError, match=r"refusing the torch_to_nkipy cache directory "
                       r"'.*shared': its mode 0777 lets others write it.*chmod -R go-w"):
        _compile_in(str(root))
    assert not marker.exists()


def test_cache_of_another_uid_refused(tmp_path, layout):
    root, marker = tmp_path / "theirs", tmp_path / "marker"
    _plant(root, layout, marker)
    _chown_tree(root, OTHER_UID)
    with pytest.raises(UntrustedPathError, match=rf"'.*theirs': it belongs to uid {OTHER_UID}, "
                       r"not to you \(uid 0\).*chown -R 0"):
        _compile_in(str(root))
    assert not marker.exists()


def test_entry_of_another_uid_in_a_private_cache_refused(tmp_path, layout):
    root, marker = tmp_path / "mine", tmp_path / "marker"
    _plant(root, layout, marker)
    _chown_tree(root / layout[1], OTHER_UID)
    with pytest.raises(UntrustedPathError, match=rf"kernel cache entry '.*kernel_[0-9a-f]+': it "
                       rf"belongs to uid {OTHER_UID}"):
        _compile_in(str(root))
    assert not marker.exists()


def test_constant_of_another_uid_refused(tmp_path, layout):
    root, marker = tmp_path / "mine", tmp_path / "marker"
    _plant(root, layout, marker)
    os.chown(root / layout[1] / "v1.npy", OTHER_UID, -1)
    with pytest.raises(UntrustedPathError, match=r"cached constant '.*v1.npy': it belongs"):
        _compile_in(str(root))
    assert not marker.exists()


def test_own_cache_never_imports_bytecode(tmp_path, layout):
    """In the user's own cache a planted .pyc is never imported: the generated
    source runs from its text."""
    ref, entry, _ = layout
    root, marker = tmp_path / "mine", tmp_path / "marker"
    shutil.copytree(ref, root)
    e = root / entry
    evil = e / "evil_src.py"
    evil.write_text(f"open({str(marker)!r}, 'a').write('pyc ran')\n"
                    "def nkipy_func(*a):\n    raise SystemExit('planted')\n")
    pyc = e / "__pycache__" / f"nkipy_func.{__import__('sys').implementation.cache_tag}.pyc"
    pyc.parent.mkdir()
    py_compile.compile(str(evil), cfile=str(pyc), dfile=str(e / "nkipy_func.py"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    torch.testing.assert_close(_compile_in(str(root)), torch.tensor([3.0, 4.0, 5.0]))
    import torch_to_nkipy
    fn = torch_to_nkipy.load_func_from_file(str(e / "nkipy_func.py"))
    assert fn(torch.ones(3).numpy())[0].tolist() == [3.0, 4.0, 5.0]
    assert not marker.exists()


def test_default_cache_is_per_user(tmp_path, monkeypatch):
    from torch_to_nkipy.config import default_cache_dir, get_nkipy_backend_config

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    reset_nkipy_backend()
    init_nkipy_backend()
    try:
        cfg = get_nkipy_backend_config()
        assert default_cache_dir() == str(tmp_path / "xdg" / "torch_to_nkipy")
        assert cfg.nkipy_cache == os.path.join(default_cache_dir(), "rank_0")
        assert os.stat(cfg.nkipy_cache).st_mode & 0o777 == 0o700
    finally:
        reset_nkipy_backend()
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == os.path.expanduser("~/.cache/torch_to_nkipy")


def test_cache_files_are_private(tmp_path, layout):
    ref = layout[0]
    for dirpath, dirnames, filenames in os.walk(ref):
        assert os.stat(dirpath).st_mode & 0o777 == 0o700, dirpath
        for n in filenames:
            assert os.stat(os.path.join(dirpath, n)).st_mode & 0o077 == 0, (dirpath, n)
