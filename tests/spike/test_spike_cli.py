"""spike-run, run as a separate process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spike_helpers import REPO


def spike_run(*args, cwd=None, env=None):
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "spike.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=full_env, timeout=60)


@pytest.fixture
def add_inputs(tmp_path):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 33)).astype(np.float32)
    b = rng.standard_normal((64, 33)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    return a, b


def test_run_and_save_outputs(neff, tmp_path, add_inputs):
    a, b = add_inputs
    out = tmp_path / "out"
    r = spike_run(neff("add"), "-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}",
                  "-o", out)
    assert r.returncode == 0, r.stderr
    assert "loaded" in r.stdout and "executed" in r.stdout and "output0 ->" in r.stdout
    np.testing.assert_array_equal(np.load(out / "output0.npy"), a + b)


def test_verbose_trace_and_default_ntff(neff, tmp_path, add_inputs):
    r = spike_run(neff("add"), "-i", "a=a.npy", "-i", "b=b.npy", "-v", "--save-trace",
                  cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input a: float32[64, 33]" in r.stdout
    assert "output output0: shape=(64, 33)" in r.stdout
    assert "traceEvents" in json.loads((tmp_path / "add.ntff").read_text())
    r = spike_run(neff("add"), "-i", "a=a.npy", "-i", "b=b.npy", "--save-trace",
                  "--ntff-name", "named.ntff", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "named.ntff").is_file()


@pytest.mark.parametrize("mode", ["device", "host"])
def test_benchmark(neff, tmp_path, add_inputs, mode):
    r = spike_run(neff("add"), "-i", "a=a.npy", "-i", "b=b.npy", "--benchmark", "--warmup", 1,
                  "--iterations", 3, "--benchmark-mode", mode, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"benchmark ({mode}): 3 iterations (+1 warmup): mean" in r.stdout


def test_multi_core_with_rank_inputs(neff, tmp_path):
    for rank in range(2):
        np.save(tmp_path / f"x_{rank}.npy", np.array([rank + 0.5], np.float32))
    r = spike_run(neff("noop"), "-i", "x=x_{rank}.npy", "--num-cores", 2, "--core-id", 1,
                  "-o", "out", "--name", "copy", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[rank 0 core 1] loaded" in r.stdout and "[rank 1 core 2] loaded" in r.stdout
    for rank in range(2):
        assert np.load(tmp_path / "out" / f"rank{rank}" / "output0.npy")[0] == rank + 0.5


def test_inplace_output_written(neff, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.float32))
    r = spike_run(neff("inplace"), "-i", "x=x.npy", "-o", ".", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "output0.npy"), np.arange(16) + 1)


@pytest.mark.parametrize("args, message", [
    (["-i", "a=a.npy"], "missing input(s) ['b']"),
    (["-i", "a=a.npy", "-i", "b=b.npy", "-i", "c=a.npy"], "unknown input name(s) ['c']"),
    (["-i", "a=missing.npy", "-i", "b=b.npy"], "missing.npy"),
    (["-i", "a=a.npy", "-i", "b=b.npy", "--core-id", "40"], "core 40 is not visible"),
])
def test_errors(neff, tmp_path, add_inputs, args, message):
    r = spike_run(neff("add"), *args, cwd=tmp_path)
    assert r.returncode == 1
    assert message in r.stderr and r.stderr.startswith("spike-run: error:")
    assert "Traceback" not in r.stderr


def test_bad_neff_and_usage(tmp_path):
    r = spike_run(tmp_path / "nothing.neff")
    assert r.returncode == 1 and "NRT Error NRT_FAILURE(1)" in r.stderr
    r = spike_run("x.neff", "-i", "noequals")
    assert r.returncode == 2 and "NAME=FILE.npy" in r.stderr
    r = spike_run("x.neff", "--num-cores", "0")
    assert r.returncode == 2 and "--num-cores" in r.stderr


def test_entry_point_installed():
    exe = Path(sys.executable).parent / "spike-run"
    if not exe.exists():
        pytest.skip("spike-run is not installed in this environment")
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "usage: spike-run" in r.stdout


def test_output_name_outside_outdir_refused(tmp_path, compile_neff):
    """A NEFF whose output is named "../../escape" must not make spike-run write
    outside -o DIR; the error names the output and nothing is written."""
    src = (Path(REPO) / "runtime/tests/kernels/add.c").read_text()
    neff_path = compile_neff(src.replace('{"output0",', '{"../../escape",'), "escape")
    np.save(tmp_path / "a.npy", np.ones((64, 33), np.float32))
    np.save(tmp_path / "b.npy", np.ones((64, 33), np.float32))
    out = tmp_path / "deep" / "out"
    r = spike_run(neff_path, "-i", "a=a.npy", "-i", "b=b.npy", "-o", str(out), cwd=tmp_path)
    assert r.returncode == 1, r.stdout
    assert "refusing output name '../../escape.npy'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "escape.npy").exists() and not out.exists()
