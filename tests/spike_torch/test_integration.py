"""End-to-end behaviour: modules, autograd, serialization, printing, RNG, fallback."""
from __future__ import annotations

import io
import warnings

import pytest
import torch

from spike_torch_helpers import run_python


def test_seed_usage_block(nkipy):
    # The usage block of the spike-torch README, as written.
    assert nkipy.device_count() >= 1
    x = torch.randn(10, 10, device="nkipy")
    cpu_tensor = torch.randn(10, 10)
    nkipy_tensor = cpu_tensor.to("nkipy")
    back_to_cpu = nkipy_tensor.cpu()
    assert x.device.type == "nkipy" and torch.equal(back_to_cpu, cpu_tensor)
    nkipy.set_device(0)
    assert nkipy.current_device() == 0 and nkipy.is_available()
    nkipy.empty_cache()
    assert isinstance(nkipy.get_cached_blocks(), int)
    assert nkipy.get_nrt_tensor(x).size == 400


def test_module_nkipy_and_forward(nkipy):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    ref = m(x)
    m.nkipy()
    assert all(p.device.type == "nkipy" for p in m.parameters())
    out = m(x.nkipy())
    assert out.device.type == "nkipy"
    assert torch.allclose(out.cpu(), ref, atol=1e-6)
    sd = m.state_dict()
    assert all(v.device.type == "nkipy" for v in sd.values())


def test_requires_grad_detach_backward(nkipy):
    a = torch.randn(5, requires_grad=True, device="nkipy")
    assert a.requires_grad and a.is_leaf
    b = a.detach()
    assert not b.requires_grad and b.data_ptr() == a.data_ptr()
    loss = (a * a).sum()
    loss.backward()
    assert a.grad.device.type == "nkipy"
    assert torch.allclose(a.grad.cpu(), 2 * a.detach().cpu())
    m = torch.nn.Linear(3, 1).nkipy()
    m(torch.ones(2, 3, device="nkipy")).sum().backward()
    assert m.weight.grad.device.type == "nkipy"
    assert torch.allclose(m.weight.grad.cpu(), torch.full((1, 3), 2.0))


def test_backward_on_second_device(nkipy):
    a = torch.ones(3, requires_grad=True, device="nkipy:1")
    (a * 3).sum().backward()
    assert a.grad.device == torch.device("nkipy:1")


def test_save_load(nkipy, tmp_path):
    x = torch.randn(3, 4)
    d = x.nkipy()
    buf = io.BytesIO()
    torch.save({"t": d, "v": d[1:]}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert loaded["t"].device == torch.device("nkipy:0")
    assert torch.equal(loaded["t"].cpu(), x)
    assert loaded["v"].untyped_storage().data_ptr() == loaded["t"].untyped_storage().data_ptr()
    buf.seek(0)
    assert torch.load(buf, map_location="cpu")["t"].device.type == "cpu"
    buf.seek(0)
    assert torch.load(buf, map_location="nkipy:1")["t"].device == torch.device("nkipy:1")
    path = tmp_path / "cpu.pt"
    torch.save(x, path)
    on_dev = torch.load(path, map_location="nkipy")
    assert on_dev.device.type == "nkipy" and torch.equal(on_dev.cpu(), x)
    m = torch.nn.Linear(2, 2).nkipy()
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = torch.nn.Linear(2, 2)
    m2.load_state_dict(torch.load(buf, map_location="cpu"))
    assert torch.equal(m2.weight, m.weight.cpu())


def test_printing(nkipy):
    d = torch.arange(6.).reshape(2, 3).nkipy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # printing must not hit the CPU fallback
        s = repr(d)
        assert "device='nkipy:0'" in s and "[3., 4., 5.]" in s
        assert "dtype=torch.int32" in repr(torch.ones(2, dtype=torch.int32, device="nkipy:1"))
        assert "nkipy:1" in str(torch.ones(2, device="nkipy:1"))
        assert "requires_grad=True" in repr(torch.ones(2, device="nkipy", requires_grad=True))
        big = repr(torch.zeros(2000, device="nkipy"))
        assert "..." in big
        assert "size=(0, 3)" in repr(torch.empty(0, 3, device="nkipy"))


def test_generators(nkipy):
    torch.manual_seed(123)
    a = torch.randn(8, device="nkipy").cpu()
    torch.manual_seed(123)
    b = torch.randn(8, device="nkipy").cpu()
    assert torch.equal(a, b)
    torch.manual_seed(123)
    assert torch.equal(torch.randn(8), a)  # same stream as the CPU
    torch.nkipy.manual_seed(7)
    c = torch.rand(4, device="nkipy").cpu()
    torch.nkipy.manual_seed(7)
    assert torch.equal(torch.rand(4, device="nkipy").cpu(), c)
    g = torch.Generator(device="nkipy")
    assert g.device.type == "nkipy"
    g.manual_seed(5)
    x = torch.randn(3, device="nkipy", generator=g).cpu()
    g.manual_seed(5)
    assert torch.equal(torch.randn(3, device="nkipy", generator=g).cpu(), x)
    state = torch.nkipy.get_rng_state()
    y = torch.randn(3, device="nkipy").cpu()
    torch.nkipy.set_rng_state(state)
    assert torch.equal(torch.randn(3, device="nkipy").cpu(), y)
    torch.nkipy.manual_seed_all(1)
    assert torch.nkipy.initial_seed() == 1
    assert len(torch.nkipy.default_generators) == 2
    assert torch.nkipy.default_generators[1].device == torch.device("nkipy:1")


def test_fallback_warns_once_per_op(nkipy):
    """Ops without a device kernel (complex results: complex, polar) run on the
    CPU: one warning per operator, every call counted."""
    from spike_torch import _generic

    _generic.clear_fallback_warnings()
    d = torch.ones(3, device="nkipy") * 0.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.complex(d, d)
        torch.polar(d, d)
    msgs = [str(w.message) for w in caught if "nkipy: operator" in str(w.message)]
    assert len(msgs) == 2, msgs
    assert "complex" in msgs[0] and "SPIKE_TORCH_FALLBACK_WARN=0" in msgs[0]
    assert "polar" in msgs[1]
    assert all(w.filename == __file__ for w in caught if "nkipy: operator" in str(w.message))
    calls = nkipy.op_stats()["cpu_fallback_calls"]
    torch.complex(d, d)
    assert nkipy.op_stats()["cpu_fallback_calls"] == calls + 1


def test_fallback_results_stay_on_device(nkipy):
    a = torch.arange(6.).reshape(2, 3).nkipy()
    out = (a @ a.t()).softmax(-1)
    assert out.device.type == "nkipy"
    ref = (torch.arange(6.).reshape(2, 3) @ torch.arange(6.).reshape(2, 3).t()).softmax(-1)
    assert torch.allclose(out.cpu(), ref)
    a.add_(1)  # in place through the fallback
    assert torch.equal(a.cpu(), torch.arange(1., 7.).reshape(2, 3))
    idx = torch.tensor([1, 0], device="nkipy")
    assert torch.equal(a[idx].cpu(), a.cpu()[[1, 0]])
    assert torch.equal(torch.masked_select(a, a > 3).cpu(), torch.tensor([4., 5., 6.]))


def test_mixed_device_errors(nkipy):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(2, device="nkipy") + torch.ones(2, device="nkipy:1")
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="nkipy") * torch.ones(2)


SUBPROCESS_ENV = {"NKRT_CORE_MEMORY": "64M"}


def test_env_silences_fallback_warning():
    code = ("import warnings, torch, spike_torch\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as c:\n"
            "    warnings.simplefilter('always')\n"
            "    torch.ones(2, device='nkipy').unique()\n"
            "print('N', sum('nkipy: operator' in str(w.message) for w in c))\n")
    r = run_python(code, env={**SUBPROCESS_ENV, "SPIKE_TORCH_FALLBACK_WARN": "0"})
    assert r.returncode == 0, r.stderr
    assert "N 0" in r.stdout
    r = run_python(code, env=SUBPROCESS_ENV)
    assert "N 1" in r.stdout, r.stderr


def test_debug_env_logs():
    r = run_python("import torch, spike_torch\n"
                   "torch.ones(2, device='nkipy').unique()\n",
                   env={**SUBPROCESS_ENV, "SPIKE_TORCH_DEBUG": "1",
                        "SPIKE_TORCH_FALLBACK_WARN": "0"})
    assert r.returncode == 0, r.stderr
    assert "[spike_torch] CPU fallback: aten::_unique2" in r.stderr
    assert "new segment" in r.stderr


def test_local_rank_picks_core():
    r = run_python("import os, torch, spike, spike_torch\n"
                   "print('VIS', os.environ['NEURON_RT_VISIBLE_CORES'], spike_torch.device_count())\n",
                   env={**SUBPROCESS_ENV, "LOCAL_RANK": "3"})
    assert r.returncode == 0, r.stderr
    assert "VIS 3 1" in r.stdout


def test_reset_and_shutdown_with_live_tensors():
    code = (
        "import warnings, torch, spike, spike_torch\n"
        "warnings.simplefilter('ignore')\n"
        "spike_torch.reset(); spike_torch.configure([0, 1])\n"
        "x = torch.ones(4, device='nkipy')\n"
        "v = x[1:]\n"
        "spike_torch.reset()\n"
        "try:\n"
        "    x.cpu()\n"
        "except RuntimeError as e:\n"
        "    print('ERR', 'closed' in str(e))\n"
        "del v\n"
        "del x\n"  # deleter after close: harmless
        "y = torch.full((3,), 2.0, device='nkipy')\n"  # a new runtime comes up
        "print('NEW', y.cpu().tolist(), spike_torch.device_count())\n"
        "print('STATS', torch.nkipy.memory_allocated())\n"
        "keep = [torch.ones(100, device='nkipy') for _ in range(3)]\n"  # live at exit
    )
    r = run_python(code, env=SUBPROCESS_ENV)
    assert r.returncode == 0, r.stderr
    assert "ERR True" in r.stdout
    assert "NEW [2.0, 2.0, 2.0] 2" in r.stdout
    assert "STATS 512" in r.stdout


def test_shares_the_spike_singleton_runtime(nkipy):
    import numpy as np
    import spike

    st = spike.SpikeTensor.from_numpy(np.arange(4, dtype=np.float32))
    # the torch allocator and spike use one runtime: the address is found by the
    # torch tensor lookup of the same runtime
    d = torch.ones(4, device="nkipy")
    rt = spike.get_spike_singleton()
    assert rt.lookup_address(d.data_ptr())[2] == 0
    assert rt.lookup_address(st.tensor_ref.va)[0] == st.tensor_ref.va


def test_capsule():
    from spike import _spike

    cap = _spike._nkrt_capi()
    assert "spike._spike.nkrt_capi" in repr(cap)
