"""``nkipy.core.compile``: the original nkipy's compile module, over this stack's compiler.

The names, signatures and defaults are the original's (``trace``,
``compile_to_neff``, ``CompilationTarget``, ``CompilationConfig``, ``Compiler``,
``CompilationResult``, ``get_ir``, ``get_platform_target``, the compiler-argument
constants), so code written for it runs unchanged. What differs, because the
NEFF here is a native shared object for this host built by a C compiler
(``nkipy.compiler``), not a Neuron executable built by neuronx-cc:

- ``target`` is checked (a :class:`CompilationTarget` or its value) and the NEFF
  is built for this host whatever it names; ``get_platform_target()`` names the
  Trainium generation of an EC2 instance when it runs on one, else ``DEFAULT``.
- ``additional_compiler_args`` holds neuronx-cc options in the original
  (``--lnc 1``, ``--internal-tensorizer-opt-level=2``, ...). Options written
  ``--name`` or ``--name=value`` (with the value that follows a bare ``--name``)
  are neuronx-cc's: they are recognised and have no effect here (logged once).
  Options with one dash (``-O2``, ``-ffast-math``) reach the C compiler.
- ``lower_to_nki`` has no NKI to return: it raises NotImplementedError naming
  :func:`nkipy.compiler.api.lower_to_c`, which returns the C this stack generates.
"""
from __future__ import annotations

import enum
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

from nkipy.compiler import api as _api
from nkipy.core.ir import Graph
from nkipy.core.trace import NKIPyKernel

log = logging.getLogger(__name__)

#: ``trace(func)`` as in the original: an NKIPyKernel to ``specialize`` on arrays.
trace = NKIPyKernel.trace

#: The original's default neuronx-cc arguments (no effect here, see the module docs).
DEFAULT_ADDITIONAL_COMPILER_ARGS = "--lnc 1"
NKIPY_KERNEL_ADDITIONAL_COMPILER_ARGS = "--internal-tensorizer-opt-level=2"
nkipy_compiler_args = DEFAULT_ADDITIONAL_COMPILER_ARGS + " " + NKIPY_KERNEL_ADDITIONAL_COMPILER_ARGS

_IGNORED_LOGGED: set = set()


class CompilationTarget(enum.Enum):
    """The Trainium generations the original compiles for (checked, see the module docs)."""
    TRN1 = "trn1"
    TRN2 = "trn2"
    TRN3 = "trn3"
    DEFAULT = "default"


def _target(target: Union[CompilationTarget, str]) -> CompilationTarget:
    if isinstance(target, CompilationTarget):
        return target
    try:
        return CompilationTarget(target)
    except ValueError:
        names = ", ".join(repr(t.value) for t in CompilationTarget)
        raise ValueError(f"unknown compilation target {target!r}: use a CompilationTarget "
                         f"or one of {names}") from None


def get_platform_target() -> CompilationTarget:
    """The Trainium generation of this EC2 instance (from its DMI product name),
    else ``CompilationTarget.DEFAULT`` (the host CPU)."""
    try:
        with open("/sys/devices/virtual/dmi/id/product_name") as f:
            product = f.readline().split(".")[0]
    except OSError:
        return CompilationTarget.DEFAULT
    for t in (CompilationTarget.TRN1, CompilationTarget.TRN2, CompilationTarget.TRN3):
        if t.value in product:
            return t
    return CompilationTarget.DEFAULT


def split_compiler_args(args: str) -> Tuple[List[str], List[str]]:
    """(C compiler flags, neuronx-cc options) of an ``additional_compiler_args``
    string: ``--name``/``--name=value`` (and the value after a bare ``--name``)
    are neuronx-cc's, anything with one dash goes to the C compiler."""
    c_flags: List[str] = []
    neuron: List[str] = []
    tokens = args.split()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            neuron.append(tok)
            if "=" not in tok and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                neuron.append(tokens[i + 1])
                i += 1
        elif tok.startswith("-"):
            c_flags.append(tok)
        else:
            raise ValueError(f"additional_compiler_args: {tok!r} is not an option "
                             f"(in {args!r})")
        i += 1
    return c_flags, neuron


def _c_flags(args: str) -> str:
    c_flags, neuron = split_compiler_args(args)
    key = " ".join(neuron)
    if neuron and key not in _IGNORED_LOGGED:
        _IGNORED_LOGGED.add(key)
        log.info("neuronx-cc options %s have no effect on this stack's C compiler", key)
    return " ".join(c_flags)


@dataclass
class CompilationConfig:
    """What to compile for (the original's fields)."""
    pipeline: Tuple[str, ...] = ("compile", "SaveTemps")
    target: CompilationTarget = CompilationTarget.DEFAULT
    additional_args: str = ""
    neff_name: str = "file.neff"


class CompilationResult:
    """A build directory and the NEFF in it."""

    def __init__(self, work_dir: Path, neff_path: Path) -> None:
        self.work_dir = Path(work_dir)
        self.neff_path = Path(neff_path)

    def save_artifacts(self, output_dir: Union[str, Path]) -> None:
        """Copies the whole build directory to ``output_dir`` (replaced if it exists)."""
        output_dir = Path(output_dir)
        if self.work_dir.exists():
            if output_dir.exists():
                shutil.rmtree(output_dir)
            shutil.copytree(self.work_dir, output_dir)


def get_ir(traced_kernel: Any) -> Graph:
    """The traced kernel's IR graph; ValueError when it was not specialized yet."""
    if isinstance(traced_kernel, Graph):
        return traced_kernel
    graph = getattr(traced_kernel, "graph", None)
    if not isinstance(graph, Graph):
        raise ValueError("the kernel must be traced before compilation: call "
                         "kernel.specialize(*arrays) first")
    return graph


class Compiler:
    """Builds NEFFs from traced kernels with a :class:`CompilationConfig`."""

    def __init__(self, config: CompilationConfig) -> None:
        self.config = config
        _target(config.target)

    def compile(self, ir: Any, work_dir: Union[str, Path], output_file: str) -> Path:
        """Writes ``work_dir/output_file`` (and the IR and C beside it) and returns its path."""
        return Path(_api.compile_to_neff(get_ir(ir), work_dir, neff_name=output_file,
                                         additional_compiler_args=_c_flags(
                                             self.config.additional_args),
                                         save_artifacts=True))

    def compile_in_directory(self, ir: Any, output_file: str, output_dir: Optional[str] = None,
                             save_artifacts: bool = False) -> Path:
        """Compiles in ``output_dir`` with every artifact (``save_artifacts``), or
        in a temporary directory, copying only the NEFF into ``output_dir``."""
        if save_artifacts:
            if not output_dir:
                raise ValueError("output_dir must be specified when save_artifacts is True")
            os.makedirs(output_dir, exist_ok=True)
            return self.compile(ir, output_dir, output_file)
        if not output_dir:
            raise ValueError("output_dir must be specified: the NEFF is written there")
        with tempfile.TemporaryDirectory() as tmp:
            path = self.compile(ir, tmp, output_file)
            dest = Path(output_dir) / output_file
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            return dest


def compile_to_neff(trace_kernel: Any, output_dir: str, neff_name: str = "file.neff",
                    target: Union[CompilationTarget, str] = CompilationTarget.DEFAULT,
                    additional_compiler_args: str = "", save_artifacts: bool = False,
                    use_neuronx_cc_python_interface: bool = False) -> str:
    """Compiles a traced kernel (``trace(f)`` then ``.specialize(*arrays)``) into
    ``output_dir/neff_name`` and returns that path as a string; with
    ``save_artifacts`` the IR and generated C are written beside it.
    ``use_neuronx_cc_python_interface`` is accepted and has no effect (there is
    no neuronx-cc here)."""
    del use_neuronx_cc_python_interface
    config = CompilationConfig(target=_target(target), additional_args=additional_compiler_args,
                               neff_name=neff_name)
    return str(Compiler(config).compile_in_directory(get_ir(trace_kernel), neff_name, output_dir,
                                                     save_artifacts))


def lower_to_nki(trace_kernel: Any, output_dir: Optional[str] = None,
                 target: Union[CompilationTarget, str] = CompilationTarget.DEFAULT,
                 additional_compiler_args: str = "", save_artifacts: bool = False) -> str:
    """Not available: this stack generates C, not NKI (raises NotImplementedError)."""
    raise NotImplementedError("lower_to_nki: this stack compiles kernels to C, not NKI; "
                              "nkipy.compiler.api.lower_to_c(kernel) returns the generated C")
