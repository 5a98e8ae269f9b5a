"""The spyre device as torch-spyre's users meet it: registration, torch.spyre,
printing, dtypes and the int64 downcast warning."""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_spyre


DOWNCAST = ("Backend Spyre does not support int64; downcasting to int32 may change values "
            "outside the 32-bit range. You can silence this via warnings.filterwarnings(...) or "
            "spyre.set_downcast_warning(False) or TORCH_SPYRE_DOWNCAST_WARN env. variable.")


def test_seed_readme_session(spyre):
    x = torch.tensor([1, 2], dtype=torch.float16, device="spyre")
    assert x.device == torch.device("spyre", 0)
    assert repr(x) == "tensor([1., 2.], device='spyre:0', dtype=torch.float16)"
    assert str(x.cpu()) == "tensor([1., 2.], dtype=torch.float16)"


def test_torch_spyre_module():
    s = torch.spyre
    assert s.is_available() and s.is_initialized()
    assert s.device_count() == 1 and s.current_device() == 0
    s.set_device(0)
    s.set_device("spyre:0")
    with pytest.raises(ValueError, match="Invalid spyre device index 1"):
        s.set_device(1)
    s.manual_seed(3)
    a = torch.randn(4, device="spyre")
    s.manual_seed_all(3)
    assert torch.equal(a.cpu(), torch.randn(4, device="spyre").cpu())
    s.synchronize()
    assert s.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.accelerator.current_accelerator() == torch.device("spyre")
    assert torch.accelerator.device_count() == 1


def test_memory_statistics(spyre):
    torch.spyre.memory.reset_peak_memory_stats()
    before = torch.spyre.memory.memory_allocated()
    x = torch.empty(1000, 100, dtype=torch.float16, device=spyre)
    assert torch.spyre.memory.memory_allocated() >= before + x.untyped_storage().nbytes()
    assert torch.spyre.memory.max_memory_allocated() >= torch.spyre.memory.memory_allocated()
    assert torch.spyre.memory_allocated() == torch.spyre.memory.memory_allocated()


def test_streams_and_events(spyre):
    s = torch.spyre.Stream()
    with torch.spyre.stream(s):
        y = torch.ones(3, device=spyre) * 2
    e = torch.Event(device="spyre")
    e.record()
    e.synchronize()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_unsupported_dtype(spyre):
    with pytest.raises(TypeError, match="the spyre device holds no torch.float64 tensors"):
        torch.ones(2, dtype=torch.float64, device=spyre)
    with pytest.raises(TypeError, match="holds no torch.uint8 tensors"):
        torch.zeros(2, dtype=torch.uint8).to(spyre)


def test_bool_is_held_as_float16(spyre):
    b = torch.tensor([True, False, True], device=spyre)
    assert b.dtype == torch.bool
    assert b.device_tensor_layout().device_dtype == torch_spyre._C.DataFormats.SEN169_FP16
    assert torch.equal(b.cpu(), torch.tensor([True, False, True]))
    assert torch.equal((~b).cpu(), torch.tensor([False, True, False]))


def test_int64_downcast_warning_and_values(spyre):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.set_warn_always(True)
        try:
            x = torch.tensor([1, -5, 2**40 + 7], device=spyre)
        finally:
            torch.set_warn_always(False)
    assert [str(w.message) for w in caught if w.category is UserWarning] == [DOWNCAST]
    assert x.dtype == torch.int64
    # held as int32, as on the device: 2**40 + 7 keeps its low 32 bits
    assert x.cpu().tolist() == [1, -5, 7]
    assert (x + 1).cpu().tolist() == [2, -4, 8]


def test_downcast_switch(spyre):
    assert torch.spyre.get_downcast_warning() is True
    torch.spyre.set_downcast_warning(False)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.set_warn_always(True)
            try:
                torch.zeros(3, dtype=torch.int64, device=spyre)
            finally:
                torch.set_warn_always(False)
        assert not [w for w in caught if "int64" in str(w.message)]
    finally:
        torch.spyre.set_downcast_warning(True)
    with pytest.raises(TypeError, match="expected a bool"):
        torch.spyre.set_downcast_warning(1)


@pytest.mark.parametrize("value,warns", [("0", False), ("false", False), ("off", False),
                                         ("1", True), ("on", True), ("TRUE", True)])
def test_downcast_environment(value, warns, run_python):
    r = run_python("import warnings, torch, torch_spyre\n"
                   "with warnings.catch_warnings(record=True) as w:\n"
                   "    warnings.simplefilter('always')\n"
                   "    torch.tensor([1, 2], device='spyre')\n"
                   "print(any('int64' in str(x.message) for x in w), "
                   "torch.spyre.get_downcast_warning())",
                   env={"TORCH_SPYRE_DOWNCAST_WARN": value})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(warns), str(warns)]
