"""spike.SpikeProfiler: the original's debugging wrapper of the runtime, one log
line per execution (process id, calling source line, kernel name)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import spike
from spike import SpikeModel, SpikeProfiler, SpikeTensor


def test_each_execution_logs_pid_caller_and_kernel(neff, tmp_path):
    log = tmp_path / "debug.txt"
    p = SpikeProfiler(target_file=str(log))
    assert repr(p) == f"SpikeProfiler(target_file={str(log)!r})"
    model = p.load_model(neff("add"))
    a = p.allocate_tensor(64 * 33 * 4, name="a")
    p.tensor_write_from_pybuffer(a, np.ones((64, 33), np.float32))
    out = p.allocate_tensor(64 * 33 * 4, name="out")
    for _ in range(2):
        p.execute(model, {"a": a, "b": a}, {"output0": out})     # this line is logged
    p.execute_async(model, {"a": a, "b": a}, {"output0": out}).wait()
    got = np.empty((64, 33), np.float32)
    p.tensor_read_to_pybuffer(out, got)
    assert (got == 2).all()
    lines = log.read_text().splitlines()
    assert len(lines) == 3
    me = f"{__file__}:"
    for line in lines:
        assert line.startswith(f"pid={os.getpid()} {me}") and line.endswith(" kernel=add")
    assert oct(log.stat().st_mode & 0o777) == oct(0o600)
    # the other calls are the runtime's own, logging nothing
    assert p.core_count == spike.get_spike_singleton().core_count
    assert len(log.read_text().splitlines()) == 3


def test_default_file_is_per_rank_and_links_are_refused(neff, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RANK", "3")
    p = SpikeProfiler()
    assert p.target_file == "debug_rank_3.txt"
    model = SpikeModel.load_from_neff(neff("add"))
    x = SpikeTensor.from_numpy(np.ones((64, 33), np.float32))
    out = SpikeTensor.from_numpy(np.zeros((64, 33), np.float32))
    p.execute(model.model_ref, {"a": x.tensor_ref, "b": x.tensor_ref},
              {"output0": out.tensor_ref})
    assert "kernel=add" in (tmp_path / "debug_rank_3.txt").read_text()
    os.symlink(tmp_path / "elsewhere.txt", tmp_path / "linked.txt")
    q = SpikeProfiler(target_file=str(tmp_path / "linked.txt"))
    with pytest.raises(OSError):
        q.execute(model.model_ref, {"a": x.tensor_ref, "b": x.tensor_ref},
                  {"output0": out.tensor_ref})
    assert not (tmp_path / "elsewhere.txt").exists()


def test_verbose_level_is_checked():
    with pytest.raises(ValueError, match="verbose_level must be an int >= 0, not -1"):
        SpikeProfiler(verbose_level=-1)
