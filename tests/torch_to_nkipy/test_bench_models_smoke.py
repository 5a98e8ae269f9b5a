"""bench/bench_models.py end to end on one tiny model, through the script's own code
(a subprocess: the script initialises the backend and wraps its compile step).
Checks what it writes, never how fast anything ran."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_models.py"


def _run(tmp_path, *args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT), NKIPY_PROGRESS="0",
               TMPDIR=str(tmp_path))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=str(tmp_path))


def test_bench_models_smoke(tmp_path):
    out = tmp_path / "out"
    proc = _run(tmp_path, "--models", "tiny_mlp", "--small", "--rounds", "1",
                "--baseline", "eager", "--max-wait", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "models.json").read_text())
    (case,) = result["cases"]
    assert case["key"] == "tiny_mlp"
    assert case["wrong"] == {}
    assert case["graph_ops"] > 0 and case["lowered_ops"] == case["graph_ops"]
    assert set(case["ms"]) == {"eager", "nkipy", "nkipy_cpu", "inductor"}
    assert case["cpu_split"]["kernel_calls_per_call"] >= 1
    md = (out / "models.md").read_text()
    assert "| tiny MLP (smoke test) | test |" in md
    assert "a smoke run" in md and "## Targets (issue 13)" in md


def test_bench_models_refuses_unknown_model(tmp_path):
    proc = _run(tmp_path, "--models", "nope", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    assert "unknown model 'nope' (known: gpt2," in proc.stderr
    proc = _run(tmp_path, "--rounds", "0", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    assert "--rounds must be at least 1" in proc.stderr
