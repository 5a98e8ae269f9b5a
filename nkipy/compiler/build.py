"""From an IR graph to a NEFF on disk: optimisation, C generation, the
native compiler, and a content-addressed cache.

Cache layout (one directory per kernel)::

    <cache_dir>/<name>_<hash16>/
        kernel.ir      the optimised IR, printed
        kernel.c       the generated C
        kernel.neff    the shared object the runtime loads
        meta.json      inputs/outputs, flags, and the SHA-256 of kernel.neff

``hash16`` is the SHA-256 of (canonical IR, constants, compiler version,
C compiler identity, flags, host ISA, NEFF ABI version). An entry is built
in a private temporary directory beside it and renamed into place whole,
meta.json included, so processes of one user sharing a cache (the ranks of
a job, say) never see or disturb each other's half-built entries; when two
build the same kernel, the first to publish wins and the other uses it. An
entry whose meta.json is missing or unreadable, or whose NEFF does not match
the recorded hash, is rebuilt rather than loaded.

A NEFF is native code that runs in this process, so the cache is private:
the root is created 0700, entries stay 0700 and their files 0600, and a root,
entry or NEFF that another user owns or that group or others may write is
refused (``spike.safe_files.UntrustedPathError``, naming the path and the
fix). docs/security.md states the trust model.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nkipy.core.ir import Graph, dtype_name
from spike.safe_files import UntrustedPathError, check_trusted, private_dir, write_private

from . import codegen, passes

log = logging.getLogger(__name__)

#: Bumped whenever generated code may change for the same IR.
COMPILER_VERSION = "nkipy-c-0.1.0"
NEFF_ABI_VERSION = 1
BASE_FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fno-math-errno",
              "-fno-trapping-math", "-fwrapv", "-fopenmp-simd", "-fvisibility=hidden", "-w")


class CompileError(RuntimeError):
    """The C compiler rejected generated code; carries its message and the
    path of the source it was given."""

    def __init__(self, message: str, source_path: str | None = None,
                 compiler_output: str = "") -> None:
        super().__init__(message)
        self.source_path = source_path
        self.compiler_output = compiler_output


@dataclass
class CompiledKernel:
    """A built NEFF and what went into it."""

    name: str
    neff_path: str
    c_path: str
    ir_path: str
    cache_key: str
    cache_hit: bool
    compile_seconds: float
    graph: Graph = field(repr=False)

    @property
    def c_source(self) -> str:
        return Path(self.c_path).read_text()

    @property
    def ir_text(self) -> str:
        return Path(self.ir_path).read_text()


def default_cache_dir() -> Path:
    env = os.environ.get("NKIPY_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nkipy"


def runtime_include_dir() -> str:
    import spike

    return spike.get_include()


def prelude_dir() -> str:
    return str(Path(__file__).parent)


def c_compiler() -> str:
    return os.environ.get("NKIPY_CC") or os.environ.get("CC") or "cc"


@functools.lru_cache(maxsize=None)
def _toolchain_identity(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        version = out.stdout.splitlines()[0] if out.stdout else cc
    except OSError:
        version = cc
    isa = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    isa = hashlib.sha256(line.encode()).hexdigest()[:16]
                    break
    except OSError:
        pass
    return f"{version}|{isa}"


def canonical_ir(graph: Graph) -> bytes:
    """A process-independent serialisation of the graph (values renumbered,
    constants by content)."""
    ids: dict[int, int] = {}
    h = hashlib.sha256()

    def vid(v) -> int:
        if v.id not in ids:
            ids[v.id] = len(ids)
        return ids[v.id]

    def put(*parts) -> None:
        for p in parts:
            h.update(repr(p).encode())
            h.update(b"\x00")

    def attr(x):
        if isinstance(x, np.ndarray):
            return ("array", dtype_name(x.dtype), x.shape,
                    hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest())
        if isinstance(x, np.dtype):
            return ("dtype", dtype_name(x))
        if isinstance(x, (list, tuple)):
            return tuple(attr(y) for y in x)
        if isinstance(x, dict):
            return tuple(sorted((k, attr(y)) for k, y in x.items()))
        if isinstance(x, np.generic):
            return ("scalar", dtype_name(x.dtype), x.item())
        return x

    put("graph", graph.name)
    for v in graph.inputs:
        put("in", vid(v), v.name, v.shape, dtype_name(v.dtype))
    for n in graph.nodes:
        put("node", n.op, [vid(v) for v in n.inputs], attr(n.attrs),
            [(vid(o), o.shape, dtype_name(o.dtype)) for o in n.outputs])
    put("out", [vid(v) for v in graph.outputs], graph.output_names,
        sorted(graph.aliases.items()))
    return h.digest()


@functools.lru_cache(maxsize=None)
def _compiler_sources_digest() -> str:
    """Hash of the code that turns IR into C, so a changed code generator
    never reuses kernels built by an older one."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    codegen_files = sorted(p.relative_to(here).as_posix() for p in (here / "codegen").glob("*.py"))
    for name in (*codegen_files, "passes.py", "build.py", "nkipy_prelude.h"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def cache_key(graph: Graph, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(canonical_ir(graph))
    h.update(repr((COMPILER_VERSION, _compiler_sources_digest(), NEFF_ABI_VERSION, flags,
                   _toolchain_identity(c_compiler()))).encode())
    return h.hexdigest()[:16]


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _publish(work: Path, entry: Path) -> None:
    """Renames a finished build directory to its entry. A valid entry published
    by another process meanwhile wins (ours is dropped); an invalid one (a
    failed or interrupted build) is first renamed aside, atomically, so a
    valid entry another process publishes in between is never deleted. The
    entry keeps the private mode mkdtemp gave it."""
    for _ in range(3):
        try:
            os.rename(work, entry)
            return
        except OSError:
            if _entry_valid(entry):
                break
            aside = entry.with_name(f".{entry.name}.stale-{os.getpid()}-{time.monotonic_ns()}")
            try:
                os.rename(entry, aside)
            except OSError:
                continue                    # gone or replaced meanwhile: try again
            shutil.rmtree(aside, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    if not _entry_valid(entry):
        raise OSError(f"could not publish the cache entry {entry}: another process keeps "
                      "replacing it with an invalid one")


def _check_entry_trusted(entry: Path) -> None:
    """Refuses an existing entry, or its NEFF, that another user owns or others
    may write (UntrustedPathError); a missing one passes."""
    for path, what in ((entry, "nkipy cache entry"), (entry / "kernel.neff", "cached NEFF")):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return
        check_trusted(path, what, st)


_META_MAX_BYTES = 1 << 20


def _read_meta(path: Path) -> object:
    """meta.json's JSON value; OSError or ValueError for anything that is not a
    regular file of at most 1 MiB holding JSON (a FIFO is never waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _META_MAX_BYTES:
            raise ValueError(f"{path} is not a regular file of at most {_META_MAX_BYTES} bytes")
        data = f.read(_META_MAX_BYTES + 1)
    try:
        return json.loads(data)
    except RecursionError as exc:              # nested deeper than the parser goes
        raise ValueError(f"{path} nests too deeply") from exc


def _entry_valid(entry: Path) -> bool:
    """Whether ``entry`` is a complete build of this compiler version: its
    meta.json is a JSON object whose SHA-256 matches ``kernel.neff``. Anything
    else (missing, unreadable, not JSON, not an object, a FIFO...) is False."""
    neff = entry / "kernel.neff"
    try:
        meta = _read_meta(entry / "meta.json")
        return (isinstance(meta, dict) and meta.get("compiler_version") == COMPILER_VERSION
                and neff.is_file() and _sha256_file(neff) == meta.get("neff_sha256"))
    except (OSError, ValueError):
        return False


#: Build directories are named ``.<entry>.build-<pid>.<random>``; one whose
#: process is gone (killed during a compile) and older than STALE_BUILD_S is
#: removed by the next compile that misses the cache.
BUILD_DIR_TAG = "build-"
STALE_BUILD_S = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # another user's process: alive
        return True
    return True


def sweep_stale_builds(root: str | os.PathLike, now: float | None = None) -> list[str]:
    """Removes the build directories in ``root`` left by compiles whose process
    died (their pid no longer runs) more than STALE_BUILD_S ago: only real
    directories (never a symlink) owned by this user, named as this module names
    them. Returns the names removed."""
    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(".") or f".{BUILD_DIR_TAG}" not in name:
            continue
        tail = name.rsplit(f".{BUILD_DIR_TAG}", 1)[1]
        pid_text, _, rest = tail.partition(".")
        if not pid_text.isdigit() or not rest:
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                or now - st.st_mtime < STALE_BUILD_S or _pid_alive(int(pid_text))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
        log.debug("removed the build directory %s of a compile that did not finish", path)
    return removed


def compile_graph(graph: Graph, *, cache_dir: str | os.PathLike | None = None,
                  extra_flags: tuple[str, ...] | list[str] | str = (),
                  optimize: bool = True) -> CompiledKernel:
    """Optimises `graph`, generates C and builds a NEFF, reusing the cache."""
    start = time.perf_counter()
    if isinstance(extra_flags, str):
        extra_flags = tuple(extra_flags.split())
    flags = BASE_FLAGS + tuple(extra_flags)
    if optimize:
        passes.optimize(graph)
    else:
        graph.verify()
    key = cache_key(graph, flags)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    private_dir(root, "nkipy compile cache")
    entry = root / f"{graph.name}_{key}"
    files = dict(neff_path=str(entry / "kernel.neff"), c_path=str(entry / "kernel.c"),
                 ir_path=str(entry / "kernel.ir"))
    _check_entry_trusted(entry)
    if _entry_valid(entry):
        log.debug("cache hit for %s: %s", graph.name, entry)
        return CompiledKernel(graph.name, cache_key=key, cache_hit=True,
                              compile_seconds=time.perf_counter() - start, graph=graph, **files)
    if entry.exists():
        log.warning("rebuilding corrupt or partial cache entry %s", entry)
    sweep_stale_builds(root)
    try:
        work = Path(tempfile.mkdtemp(dir=root, prefix=f".{entry.name}.{BUILD_DIR_TAG}{os.getpid()}."))
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create a build directory in the nkipy compile cache "
                                 f"{str(root)!r}: {exc.strerror}") from exc
    try:
        return _build_in(work, entry, graph, key, flags, files, start)
    except OSError as exc:
        if isinstance(exc, UntrustedPathError) or not exc.strerror:
            raise
        raise OSError(exc.errno, f"building kernel '{graph.name}' in the nkipy compile cache "
                                 f"{str(root)!r} failed: {exc.strerror}"
                                 + (f" ({exc.filename})" if exc.filename else "")) from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)    # gone already once published


def _build_in(work: Path, entry: Path, graph: Graph, key: str, flags: tuple[str, ...],
              files: dict, start: float) -> CompiledKernel:
    """Generates and compiles ``graph`` in the private directory ``work`` and
    publishes it as ``entry``."""
    source = codegen.generate_c(graph)
    write_private(work / "kernel.ir", str(graph))
    write_private(work / "kernel.c", source)
    cc = c_compiler()
    cmd = [cc, *flags, "-I", runtime_include_dir(), "-I", prelude_dir(),
           str(work / "kernel.c"), "-o", str(work / "kernel.neff"), "-lm"]
    log.debug("compiling %s: %s", graph.name, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise CompileError(f"cannot run the C compiler {cc!r} (set by NKIPY_CC, else CC, else "
                           f"'cc'): {exc.strerror or exc}") from exc
    if proc.returncode != 0:
        (work / "kernel.neff").unlink(missing_ok=True)
        _publish(work, entry)      # the failing source where the message says (no meta.json)
        output = (proc.stderr.strip() or proc.stdout.strip()
                  or f"{cc!r} exited with status {proc.returncode} and printed nothing")
        raise CompileError(
            f"C compilation of kernel '{graph.name}' failed (source: {entry / 'kernel.c'}):\n"
            f"{output}", str(entry / "kernel.c"), proc.stderr)
    os.chmod(work / "kernel.neff", 0o600)
    meta = {
        "name": graph.name,
        "compiler_version": COMPILER_VERSION,
        "flags": list(flags),
        "inputs": [{"name": v.name, "shape": list(v.shape), "dtype": dtype_name(v.dtype)}
                   for v in graph.inputs],
        "outputs": [{"name": nm, "shape": list(v.shape), "dtype": dtype_name(v.dtype),
                     "alias_of": graph.inputs[graph.aliases[i]].name if i in graph.aliases
                     else None}
                    for i, (nm, v) in enumerate(zip(graph.output_names, graph.outputs))],
        "neff_sha256": _sha256_file(work / "kernel.neff"),
    }
    write_private(work / "meta.json", json.dumps(meta, indent=1))
    _publish(work, entry)
    seconds = time.perf_counter() - start
    log.info("compiled kernel %s in %.3f s (%s)", graph.name, seconds, entry)
    return CompiledKernel(graph.name, cache_key=key, cache_hit=False, compile_seconds=seconds,
                          graph=graph, **files)
