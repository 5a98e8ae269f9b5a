"""nkipy's compile cache loads no NEFF it did not build for the user.

A cached NEFF is a shared object: loading it runs its constructors in this
process. These tests plant a NEFF with a constructor (recorded as valid in its
meta.json) where compile_graph would find it, in (a) a world-writable cache,
(b) a cache of another uid, (c) the user's private cache with an entry of
another uid, (d) the same with only the NEFF file of another uid: each is
refused with a message naming the path and the fix, and the constructor never
runs. They run as root and hand files to another uid with os.chown."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from nkipy.compiler.build import CompileError, compile_graph
from spike import SpikeModel, SpikeTensor
from spike.safe_files import UntrustedPathError

from test_compiler_build import np_softmax, softmax_graph

OTHER_UID = 54321

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another uid")


@pytest.fixture
def planted(tmp_path):
    """(cache, entry name, marker): a real cache whose NEFF was replaced by one
    with a constructor that writes ``marker``, its meta.json updated to match."""
    cache = tmp_path / "cache"
    entry = compile_graph(softmax_graph(), cache_dir=cache).neff_path
    entry = os.path.dirname(entry)
    marker = tmp_path / "marker"
    src = tmp_path / "evil.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
          FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("ran\\n", f); fclose(f); }}
        }}
    """))
    neff = os.path.join(entry, "kernel.neff")
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", neff], check=True)
    os.chmod(neff, 0o600)
    meta_path = os.path.join(entry, "meta.json")
    meta = json.loads(open(meta_path).read())
    meta["neff_sha256"] = hashlib.sha256(open(neff, "rb").read()).hexdigest()
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    return cache, os.path.basename(entry), marker


def _compile_and_run(cache):
    k = compile_graph(softmax_graph(), cache_dir=cache)
    a = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
    out = SpikeModel.load_from_neff(k.neff_path)({"x": SpikeTensor.from_numpy(a)})
    np.testing.assert_allclose(out["output0"].numpy(), np_softmax(a), rtol=1e-5, atol=1e-6)
    return k


@needs_root
def test_world_writable_cache_refused(planted):
    cache, _, marker = planted
    os.chmod(cache, 0o777)
    with pytest.raises(UntrustedPathError, match=r"refusing the nkipy compile cache '.*cache': "
                       r"its mode 0777 lets others write it.*chmod -R go-w"):
        _compile_and_run(cache)
    os.chmod(cache, 0o775)
    with pytest.raises(UntrustedPathError, match=r"mode 0775 lets its group write it"):
        _compile_and_run(cache)
    assert not marker.exists()


@needs_root
def test_cache_of_another_uid_refused(planted):
    cache, _, marker = planted
    for dirpath, dirnames, filenames in os.walk(cache):
        for n in [dirpath] + [os.path.join(dirpath, x) for x in filenames]:
            os.chown(n, OTHER_UID, -1)
    with pytest.raises(UntrustedPathError, match=rf"'.*cache': it belongs to uid {OTHER_UID}, "
                       r"not to you \(uid 0\)"):
        _compile_and_run(cache)
    assert not marker.exists()


@needs_root
@pytest.mark.parametrize("what", ["entry", "neff"])
def test_entry_or_neff_of_another_uid_refused(planted, what):
    cache, entry, marker = planted
    path = cache / entry if what == "entry" else cache / entry / "kernel.neff"
    os.chown(path, OTHER_UID, -1)
    label = "nkipy cache entry" if what == "entry" else "cached NEFF"
    with pytest.raises(UntrustedPathError, match=rf"refusing the {label} '.*': it belongs to uid "
                       rf"{OTHER_UID}"):
        _compile_and_run(cache)
    assert not marker.exists()


def test_group_writable_neff_refused(planted):
    cache, entry, marker = planted
    os.chmod(cache / entry / "kernel.neff", 0o620)
    with pytest.raises(UntrustedPathError, match=r"refusing the cached NEFF .* mode 0620"):
        _compile_and_run(cache)
    assert not marker.exists()


def test_compiler_failing_silently_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("NKIPY_CC", "/bin/false")
    with pytest.raises(CompileError, match=r"'/bin/false' exited with status 1 and printed "
                       r"nothing"):
        compile_graph(softmax_graph(name="sm_false"), cache_dir=tmp_path)
    monkeypatch.setenv("NKIPY_CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(CompileError, match=r"cannot run the C compiler '.*no-such-cc' \(set by "
                       r"NKIPY_CC"):
        compile_graph(softmax_graph(name="sm_missing"), cache_dir=tmp_path)
    leftovers = [p for p in os.listdir(tmp_path) if p.startswith(".")]
    assert leftovers == [], leftovers


@needs_root
def test_full_disk_names_the_cache_and_leaves_nothing(tmp_path):
    """ENOSPC while writing an entry: the error names the cache and the file,
    and no temporary build directory is left behind (run in a private mount
    namespace on a 4 KiB tmpfs)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    cache = tmp_path / "full"
    cache.mkdir(mode=0o700)
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_compiler_build import softmax_graph
        from nkipy.compiler.build import compile_graph
        try:
            compile_graph(softmax_graph(rows=64, cols=999), cache_dir={str(cache)!r})
        except OSError as e:
            print("ERR", e)
        print("LEFT", sorted(os.listdir({str(cache)!r})))
    """)
    r = subprocess.run(["unshare", "--mount", "sh", "-c",
                        f"mount -t tmpfs -o size=4k,mode=0700 tmpfs {cache} && "
                        f"exec {sys.executable} -c \"$0\"", code],
                       capture_output=True, text=True, timeout=120)
    if "mount" in r.stderr and r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    assert "building kernel 'softmax' in the nkipy compile cache" in r.stdout, r.stdout + r.stderr
    assert "No space left on device" in r.stdout and str(cache) in r.stdout
    assert "LEFT []" in r.stdout, r.stdout


def test_compile_to_neff_keeps_the_neff_inside_output_dir(tmp_path):
    from nkipy.compiler.api import compile_to_neff

    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"refusing NEFF name '../escape.neff'"):
        compile_to_neff(softmax_graph(), out, neff_name="../escape.neff", cache_dir=tmp_path / "c")
    assert not (tmp_path / "escape.neff").exists()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out.mkdir()
    (out / "file.neff").symlink_to(victim)               # replaced, never written through
    path = compile_to_neff(softmax_graph(), out, cache_dir=tmp_path / "c")
    assert victim.read_text() == "precious" and not os.path.islink(path)


@needs_root
@pytest.mark.parametrize("owner, mode, refused", [
    (OTHER_UID, 0o755, "belongs to uid 54321"),
    (0, 0o777, "has mode 0777"),
    (0, 0o775, "has mode 0775"),
    (0, 0o1777, None),                                   # sticky, as /tmp: fine
])
def test_cache_below_a_directory_others_can_write(tmp_path, owner, mode, refused):
    """Someone who can rename entries of a directory above the cache can swap
    the checked cache for theirs between the check and the load."""
    parent = tmp_path / "parent"
    parent.mkdir()
    cache = parent / "cache"
    cache.mkdir(mode=0o700)
    os.chown(parent, owner, -1)
    os.chmod(parent, mode)
    if refused is None:
        compile_graph(softmax_graph(name="sm_parent"), cache_dir=cache)
        return
    with pytest.raises(UntrustedPathError, match=rf"refusing the nkipy compile cache '.*cache': "
                       rf"the directory '.*parent' above it {refused}, so another user could "
                       r"rename or replace"):
        compile_graph(softmax_graph(name="sm_parent"), cache_dir=cache)


@needs_root
def test_nothing_is_created_under_another_users_home(tmp_path):
    """A cache under a directory of another uid (another user's HOME) is refused
    before anything is made there: ~/.cache/torch_to_nkipy was created first and
    refused after."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, OTHER_UID, OTHER_UID)
    code = textwrap.dedent("""
        import torch_to_nkipy
        try:
            torch_to_nkipy.init_nkipy_backend()
        except Exception as e:
            print(type(e).__name__, e)
    """)
    env = dict(os.environ, HOME=str(home))
    env.pop("XDG_CACHE_HOME", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.stdout.startswith("UntrustedPathError refusing the torch_to_nkipy cache "
                                 "directory"), out.stdout + out.stderr
    assert f"the directory '{home}' above it belongs to uid {OTHER_UID}" in out.stdout
    assert os.listdir(home) == []
    with pytest.raises(UntrustedPathError, match="above it belongs to uid"):
        compile_graph(softmax_graph(), cache_dir=home / "a" / "b")
    assert os.listdir(home) == []


def test_build_directories_of_killed_compiles_are_swept(tmp_path):
    """A compile killed with SIGKILL leaves its private build directory: the
    next compile that misses the cache removes those of dead processes (once
    they are older than STALE_BUILD_S), and nothing else."""
    from nkipy.compiler import build

    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from nkipy.compiler import build
        real = build._build_in
        def die(work, *a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        build._build_in = die
        from test_compiler_build import softmax_graph
        build.compile_graph(softmax_graph(), cache_dir={str(cache)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr
    left = [n for n in os.listdir(cache) if f".{build.BUILD_DIR_TAG}" in n]
    assert len(left) == 1, os.listdir(cache)
    keep = cache / f".other.{build.BUILD_DIR_TAG}{os.getpid()}.abcdefgh"   # a live process's
    keep.mkdir()
    link = cache / f".link.{build.BUILD_DIR_TAG}999999.abcdefgh"
    link.symlink_to(tmp_path)
    old = __import__("time").time() - build.STALE_BUILD_S - 10
    for p in (cache / left[0], keep):
        os.utime(p, (old, old))
    assert build.sweep_stale_builds(cache, now=old + 5) == []          # not old enough yet
    compile_graph(softmax_graph(), cache_dir=cache)                      # a cache miss sweeps
    assert not (cache / left[0]).exists()
    assert keep.exists() and link.is_symlink() and tmp_path.exists()
