"""One PrivateUse1 device per process: autoload through the torch.backends
entry point, the switch that turns it off, and the errors that name both
devices when the other front end is imported."""
from __future__ import annotations

import os

import pytest



@pytest.fixture
def autoload_dir(tmp_path):
    """A directory holding the autoload distribution's metadata (what
    `make spyre-autoload` installs), for PYTHONPATH."""
    info = tmp_path / "torch_spyre_autoload-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-spyre-autoload\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\n"
                                           "torch_spyre = torch_spyre:_autoload\n")
    return str(tmp_path)


def _with(path, env=None):
    full = {"PYTHONPATH": path + os.pathsep + os.environ.get("PYTHONPATH", "")}
    full.update(env or {})
    return full


def test_bare_import_torch_registers_spyre_silently(autoload_dir, run_python):
    r = run_python("import torch\n"
                   "x = torch.tensor([1, 2], dtype=torch.float16, device='spyre')\n"
                   "print(x.device)", env=_with(autoload_dir))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "spyre:0\n"
    assert r.stderr == ""


def test_autoload_can_be_turned_off(autoload_dir, run_python):
    r = run_python("import torch\nprint(torch._C._get_privateuse1_backend_name())\n"
                   "import spike_torch\nprint(torch.ones(1, device='nkipy').device)",
                   env=_with(autoload_dir, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["privateuseone", "nkipy:0"]


def test_nkipy_after_spyre_names_both(autoload_dir, run_python):
    r = run_python("import torch\nimport spike_torch\nspike_torch.device_count()",
                   env=_with(autoload_dir))
    assert r.returncode != 0
    assert "this process's PrivateUse1 device is 'spyre'" in r.stderr
    assert "the 'nkipy' device needs a separate process" in r.stderr


def test_spyre_after_nkipy_names_both(run_python):
    r = run_python("import torch, spike_torch\nimport torch_spyre")
    assert r.returncode != 0
    assert ("ImportError: torch_spyre: this process's PrivateUse1 device is already 'nkipy' "
            "(spike_torch); the 'spyre' device and the 'nkipy' device cannot share a process: "
            "use 'spyre' in a separate process") in r.stderr


def test_spike_torch_import_after_torch_spyre(run_python):
    r = run_python("import torch, torch_spyre\nimport spike_torch\nspike_torch.op_stats()")
    assert r.returncode != 0
    assert ("ImportError: spike_torch.op_stats: this process's PrivateUse1 device is 'spyre' "
            "(torch_spyre); the 'nkipy' device needs a separate process") in r.stderr


def test_debug_lines_on_stdout(run_python):
    code = ("import torch, torch_spyre\n"
            "x = torch.ones(2, 3, dtype=torch.float16, device='spyre')\n"
            "y = (x + torch.zeros(2, 3, dtype=torch.float16).to('spyre')).cpu()\n")
    quiet = run_python(code)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""
    loud = run_python(code, env={"TORCH_SPYRE_DEBUG": "1"})
    assert loud.returncode == 0, loud.stderr
    lines = loud.stdout.splitlines()
    assert any(line.startswith("[empty] ") and "torch.float16" in line for line in lines), lines
    assert any(line.startswith("[fill] [2, 3] torch.float16 with 1") for line in lines), lines
    assert any(line.startswith("[copy] host to device: [2, 3]") for line in lines), lines
    assert any(line.startswith("[launch] aten::add.Tensor") for line in lines), lines
    assert any(line.startswith("[copy] device to host") for line in lines), lines
