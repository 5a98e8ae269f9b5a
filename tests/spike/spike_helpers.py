"""Helpers shared by the spike tests (a uniquely named module, so that other
test directories' conftest.py files cannot shadow it)."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict

import spike

REPO = Path(__file__).resolve().parents[2]
KERNEL_DIR = REPO / "runtime" / "tests" / "kernels"
NEFF_DIR = Path(os.environ.get("NKRT_TEST_NEFF_DIR", REPO / "build" / "neff"))
if not NEFF_DIR.is_absolute():
    NEFF_DIR = REPO / NEFF_DIR
CC = os.environ.get("CC", "cc")
ENV_KEYS = ("NEURON_RT_VISIBLE_CORES", "NKRT_CORE_MEMORY", "NKRT_NUM_WORKERS")


def build_neff(source: Path, out: Path) -> Path:
    """Compiles a C kernel into a NEFF (a shared object) with spike's headers."""
    cmd = [CC, "-std=c11", "-O2", "-shared", "-fPIC", "-I", spike.get_include(),
           str(source), "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"compiling {source} failed:\n{result.stderr}")
    return out


def quiet_reset() -> None:
    """spike.reset() without its UserWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        spike.reset()


def run_python(code: str, env: Dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (repo on sys.path) and returns the result."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + ([full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else []))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=str(REPO))
