"""Helpers shared by the spike_torch tests (a uniquely named module: a plain
``from conftest import`` picks whichever directory's conftest.py was imported
first when several test directories run together)."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, Optional

REPO = Path(__file__).resolve().parents[2]
CORE_MEMORY = 256 << 20


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args, **kwargs)


def run_python(code: str, env: Optional[Dict[str, str]] = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (repo on sys.path)."""
    full_env = dict(os.environ)
    full_env.pop("NEURON_RT_VISIBLE_CORES", None)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + ([full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else []))
    full_env.setdefault("NKRT_CORE_MEMORY", "256M")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=str(REPO))
