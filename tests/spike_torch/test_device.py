"""Device registration and management: counts, current device, guard, errors."""
from __future__ import annotations

import gc
import threading

import pytest
import torch


def test_backend_name_and_module(nkipy):
    assert torch._C._get_privateuse1_backend_name() == "nkipy"
    assert torch.nkipy.device_count() == 2
    assert torch.nkipy.is_available()
    assert nkipy.is_available()
    assert nkipy.device_count() == 2
    assert torch.device("nkipy").type == "nkipy"


def test_rename_again_refused(nkipy):
    torch.utils.rename_privateuse1_backend("nkipy")  # same name: allowed
    with pytest.raises(RuntimeError, match="already"):
        torch.utils.rename_privateuse1_backend("other")


def test_register_module_twice_refused(nkipy):
    with pytest.raises(RuntimeError, match="nkipy"):
        torch._register_device_module("nkipy", nkipy.device_module)


def test_set_and_current_device(nkipy):
    assert nkipy.current_device() == 0
    nkipy.set_device(1)
    assert nkipy.current_device() == 1
    assert torch.nkipy.current_device() == 1
    assert torch.empty(2, device="nkipy").device == torch.device("nkipy:1")
    torch.nkipy.set_device("nkipy:0")
    assert torch.empty(2, device="nkipy").device == torch.device("nkipy:0")
    torch.nkipy.set_device(torch.device("nkipy", 1))
    assert nkipy.current_device() == 1


@pytest.mark.parametrize("index", [2, 7, -1])
def test_invalid_set_device(nkipy, index):
    with pytest.raises(ValueError, match=f"Invalid nkipy device index {index}: there are 2"):
        nkipy.set_device(index)
    assert nkipy.current_device() == 0


def test_invalid_device_tensor(nkipy):
    with pytest.raises(RuntimeError, match="Invalid nkipy device index 5"):
        torch.empty(3, device="nkipy:5")
    with pytest.raises(RuntimeError, match="Invalid nkipy device index 2"):
        torch.ones(3).to("nkipy:2")


def test_set_device_type_errors(nkipy):
    with pytest.raises(TypeError):
        nkipy.set_device(1.5)
    with pytest.raises(ValueError, match="expected an nkipy device"):
        nkipy.set_device("cpu")


def test_device_context_manager(nkipy):
    with torch.nkipy.device(1):
        assert nkipy.current_device() == 1
        with torch.nkipy.device(0):
            assert torch.empty(1, device="nkipy").device.index == 0
        assert nkipy.current_device() == 1
    assert nkipy.current_device() == 0
    with pytest.raises(KeyError):
        with torch.nkipy.device(1):
            raise KeyError("x")
    assert nkipy.current_device() == 0


def test_torch_device_guard(nkipy):
    x = torch.empty(2, device="nkipy:1")
    # ops on a tensor of device 1 allocate on device 1 whatever the current device
    y = x.clone()
    assert y.device.index == 1
    assert nkipy.current_device() == 0


def test_thread_local_current_device(nkipy):
    seen = {}

    def work(i):
        nkipy.set_device(i % 2)
        seen[i] = (nkipy.current_device(), torch.empty(1, device="nkipy").device.index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {i: (i % 2, i % 2) for i in range(4)}
    assert nkipy.current_device() == 0


def test_device_module_api(nkipy):
    m = torch.nkipy
    assert "Neuron Core 1" in m.get_device_name(1)
    props = m.get_device_properties(0)
    assert props.total_memory > 0 and props.device_index == 0
    assert props["name"] == m.get_device_name(0)
    assert m.get_device_capability() == (1, 0)
    assert torch.bfloat16 in m.get_amp_supported_dtype()
    m.synchronize()
    m.synchronize(1)
    assert m.is_initialized()
    with pytest.raises(ValueError):
        m.synchronize(3)
    with pytest.raises(ValueError):
        m.memory_stats(9)


def test_generated_methods(nkipy):
    t = torch.ones(2)
    d = t.nkipy()
    assert d.is_nkipy and not t.is_nkipy
    assert t.nkipy(1).device.index == 1
    m = torch.nn.Linear(2, 2).nkipy()
    assert m.weight.is_nkipy and m.bias.device.type == "nkipy"
    s = torch.ones(4).untyped_storage().nkipy()
    assert s.device.type == "nkipy"
    assert d.untyped_storage().device == torch.device("nkipy:0")


def test_autocast_supported(nkipy):
    """torch.autocast("nkipy"): products in the autocast dtype, as CPU autocast
    computes them; other ops keep their dtype; nothing changes outside."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    xd, yd = x.to("nkipy"), y.to("nkipy")
    assert not torch.is_autocast_enabled("nkipy")
    with torch.autocast("nkipy", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("nkipy")
        assert torch.get_autocast_dtype("nkipy") == torch.bfloat16
        prod, lin, add = xd @ yd, torch.nn.functional.linear(xd, yd), xd + yd
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want_prod, want_lin = x @ y, torch.nn.functional.linear(x, y)
    assert (prod.dtype, lin.dtype, add.dtype) == (torch.bfloat16, torch.bfloat16, torch.float32)
    assert prod.device.type == "nkipy"
    assert torch.equal(prod.cpu(), want_prod) and torch.equal(lin.cpu(), want_lin)
    assert torch.equal(add.cpu(), x + y)
    assert (xd @ yd).dtype == torch.float32


def test_torch_accelerator_api(nkipy):
    assert torch.accelerator.current_accelerator().type == "nkipy"
    assert torch.accelerator.device_count() == 2
    torch.accelerator.set_device_index(1)
    assert nkipy.current_device() == 1
    torch.accelerator.set_device_index(0)
    x = torch.ones(1000, device="nkipy")
    assert torch.accelerator.memory_allocated() == torch.nkipy.memory_allocated() >= 4000
    assert torch.accelerator.memory_reserved() >= 4000
    free, total = torch.accelerator.get_memory_info(0)
    assert 0 < free <= total
    del x
    gc.collect()    # device tensors in reference cycles earlier tests left behind
    torch.accelerator.empty_cache()
    assert torch.nkipy.memory_reserved() == 0
    torch.accelerator.synchronize()


def test_streams_and_events_trivial(nkipy):
    s = torch.Stream(device="nkipy")
    assert s.device.type == "nkipy"
    e = torch.Event(device="nkipy")
    e.record()
    e.synchronize()
    assert e.query()
