"""spike_torch._C.kernel_calls: a loaded kernel run on nkipy tensors in one native
call (the per-call path of torch_to_nkipy's executor)."""
from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from spike_torch_helpers import run_python

KERNELS = Path(__file__).resolve().parents[2] / "runtime" / "tests" / "kernels"
N = 1024  # the sleep kernel: output0 = x + 1 over float32[1024] after ms[0] ms


@pytest.fixture(scope="module")
def neffs(tmp_path_factory, spike_torch_module):
    """The runtime's sleep and inplace test kernels, built once."""
    import spike

    out = tmp_path_factory.mktemp("neff")
    built = {}
    for name in ("sleep", "inplace"):
        built[name] = out / f"{name}.neff"
        subprocess.run(["cc", "-std=c11", "-O2", "-shared", "-fPIC", "-I", spike.get_include(),
                        str(KERNELS / f"{name}.c"), "-o", str(built[name])], check=True)
    return built


@pytest.fixture
def models(neffs, nkipy):
    """Those kernels loaded on core 0 of the runtime this test runs on (after
    the autouse fixture set it up: a module-wide load was made stale when the
    previous file of the same pytest worker left another runtime behind)."""
    import spike

    rt = spike.get_spike_singleton()
    return {name: rt.load_model(str(path)) for name, path in neffs.items()}


def calls():
    from spike_torch._C import kernel_calls

    return kernel_calls


def sleep_call(models, results=(("output", 0),), ms_dtype=torch.int32):
    return calls().kernel_call(models["sleep"], 0,
                               [(0, (N,), torch.float32),
                                (1, (1,), ms_dtype)],
                               [((N,), torch.float32)], list(results))


def test_fresh_output_argument_and_value(models):
    call = sleep_call(models, [("output", 0), ("arg", 0), ("value", "seven")])
    x = torch.arange(N, dtype=torch.float32).to("nkipy")
    ms = torch.zeros(1, dtype=torch.int32).to("nkipy")
    out, same, value = calls().run_kernel_call(call, (x, ms))
    assert out.device == torch.device("nkipy", 0) and out.dtype == torch.float32
    assert torch.equal(out.cpu(), torch.arange(N, dtype=torch.float32) + 1)
    assert same.data_ptr() == x.data_ptr() and not same.requires_grad
    assert value == "seven"
    # a list of arguments works as well as a tuple; every call gets a fresh output
    out2 = calls().run_kernel_call(call, [x, ms])[0]
    assert out2.data_ptr() != out.data_ptr()


def test_outputs_written_into_given_tensors(models):
    """``into``: the kernel writes its output straight into a given tensor (a
    contiguous view of a bigger one: one slice of a sliced bucketed call), which
    is what the call returns; a tensor that does not fit is refused (None)."""
    call = sleep_call(models)
    x = torch.arange(N, dtype=torch.float32).to("nkipy")
    ms = torch.zeros(1, dtype=torch.int32).to("nkipy")
    big = torch.zeros(3 * N).to("nkipy")
    (out,) = calls().run_kernel_call(call, (x, ms), [big.narrow(0, N, N)])
    assert out.data_ptr() == big.data_ptr() + N * 4
    want = torch.cat([torch.zeros(N), torch.arange(N, dtype=torch.float32) + 1, torch.zeros(N)])
    assert torch.equal(big.cpu(), want)
    (fresh,) = calls().run_kernel_call(call, (x, ms), [None])     # None: a fresh output
    assert fresh.data_ptr() != big.data_ptr() + N * 4
    run = calls().run_kernel_call
    assert run(call, (x, ms), [torch.zeros(N)]) is None                   # another device
    assert run(call, (x, ms), [torch.zeros(N).to("nkipy").double()]) is None  # dtype
    assert run(call, (x, ms), [torch.zeros(N + 1).to("nkipy")]) is None   # shape
    assert run(call, (x, ms), [big[::3]]) is None                         # layout
    assert run(call, (x, ms), ["no"]) is None                             # not a tensor


def test_int64_argument_passed_as_is(models):
    """int64 inputs are no longer narrowed to int32 (kernels compute int64 in 64
    bits): the call takes the tensor's own memory, whatever its values."""
    call = sleep_call(models, ms_dtype=torch.int64)
    x = torch.ones(N).to("nkipy")
    ms = torch.zeros(1, dtype=torch.int64).to("nkipy")
    assert torch.equal(calls().run_kernel_call(call, (x, ms))[0].cpu(), torch.full((N,), 2.0))
    big = torch.tensor([2**40]).to("nkipy")   # low 32 bits 0: sleeps 0 ms
    assert torch.equal(calls().run_kernel_call(call, (x, big))[0].cpu(), torch.full((N,), 2.0))
    assert torch.equal(big.cpu(), torch.tensor([2**40]))


def test_aliased_output_updates_the_argument(models):
    call = calls().kernel_call(models["inplace"], 0, [(0, (16,), torch.float32)],
                               [None], [("arg", 0)])
    x = torch.zeros(16).to("nkipy")
    for _ in range(3):
        (r,) = calls().run_kernel_call(call, (x,))
    assert torch.equal(x.cpu(), torch.full((16,), 3.0))
    assert r.data_ptr() == x.data_ptr()


def test_inputs_it_was_not_built_for_return_none(models):
    call = sleep_call(models)
    x = torch.ones(N).to("nkipy")
    ms = torch.zeros(1, dtype=torch.int32).to("nkipy")
    run = calls().run_kernel_call
    assert run(call, (x.cpu(), ms)) is None                          # another device
    assert run(call, (torch.ones(N).to("nkipy:1"), ms)) is None      # another core
    assert run(call, (x.double(), ms)) is None                       # dtype
    assert run(call, (torch.ones(N + 1).to("nkipy"), ms)) is None    # shape
    strided = torch.ones(2 * N).to("nkipy")[::2]
    assert run(call, (strided, ms)) is None                          # layout
    assert run(call, (1.0, ms)) is None                              # not a tensor


def test_errors(models):
    kc = calls()
    spec = [(0, (N,), torch.float32), (1, (1,), torch.int32)]
    outs = [((N,), torch.float32)]
    with pytest.raises(TypeError, match="expected a torch.dtype, got str"):
        kc.kernel_call(models["sleep"], 0, [(0, (N,), "float32")], outs, [])
    with pytest.raises(TypeError, match=r"takes exactly 3 arguments \(5 given\)"):
        kc.kernel_call(models["sleep"], 0, [(0, (N,), torch.float32, True, False)], outs, [])
    with pytest.raises(ValueError, match=r"bad result 0: \(output, 3\)"):
        kc.kernel_call(models["sleep"], 0, spec, outs, [("output", 3)])
    with pytest.raises(ValueError, match=r"bad result 0: \(nothing, 0\)"):
        kc.kernel_call(models["sleep"], 0, spec, outs, [("nothing", 0)])
    with pytest.raises(TypeError, match="expected a list or tuple, got int"):
        kc.kernel_call(models["sleep"], 0, 5, outs, [])
    call = kc.kernel_call(models["sleep"], 0, spec, outs, [("output", 0)])
    x, ms = torch.ones(N).to("nkipy"), torch.zeros(1, dtype=torch.int32).to("nkipy")
    with pytest.raises(TypeError, match=r"run_kernel_call\(call, args, into=None\) takes 2 or 3 "):
        kc.run_kernel_call(call)
    with pytest.raises(ValueError, match="run_kernel_call: into has 2 entries, the kernel 1 "
                                         "outputs"):
        kc.run_kernel_call(call, (x, ms), [None, None])
    with pytest.raises(TypeError, match="expected a list or tuple, got dict"):
        kc.run_kernel_call(call, {0: x})
    with pytest.raises(IndexError, match="input 1 is argument 1 of 1"):
        kc.run_kernel_call(call, (x,))
    with pytest.raises(TypeError, match=r"call must be what kernel_call\(\) returned, got object"):
        kc.run_kernel_call(object(), (x, ms))
    bad = kc.kernel_call(models["sleep"], 0, spec, [None], [])
    with pytest.raises(Exception, match="missing output tensor 'output0'"):
        kc.run_kernel_call(bad, (x, ms))     # the runtime's refusal, as an NrtError


def staged_call(models):
    """The sleep kernel on CPU tensors through persistent device buffers."""
    import spike

    rt = spike.get_spike_singleton()
    bufs = [rt.allocate_tensor(4 * N, name="x"), rt.allocate_tensor(4, name="ms"),
            rt.allocate_tensor(4 * N, name="out")]
    call = calls().kernel_call(models["sleep"], 0,
                               [(0, (N,), torch.float32),
                                (1, (1,), torch.int32)],
                               [((N,), torch.float32)], [("output", 0), ("value", 3)],
                               ([bufs[0].va, bufs[1].va], [bufs[2].va]))
    return call, bufs


def test_staged_cpu_tensors(models):
    call, bufs = staged_call(models)
    x = torch.arange(N, dtype=torch.float32)
    ms = torch.zeros(1, dtype=torch.int32)
    for step in range(3):             # unchanged inputs are compared, not rewritten
        out, three = calls().run_kernel_call(call, [x + step, ms])
        assert out.device.type == "cpu" and three == 3
        assert torch.equal(out, x + step + 1)
    run = calls().run_kernel_call
    assert run(call, (x.to("nkipy"), ms)) is None           # not a CPU tensor
    assert run(call, (x.double(), ms)) is None              # dtype
    assert run(call, (torch.ones(2 * N)[::2], ms)) is None  # layout


def test_staged_errors(models):
    import spike

    kc = calls()
    ins = [(0, (N,), torch.float32), (1, (1,), torch.int32)]
    outs = [((N,), torch.float32)]
    call, bufs = staged_call(models)
    with pytest.raises(ValueError, match="staged inputs has 1 addresses, the kernel 2"):
        kc.kernel_call(models["sleep"], 0, ins, outs, [("output", 0)], ([bufs[0].va], [1]))
    with pytest.raises(ValueError, match="staged outputs address 0 is NULL"):
        kc.kernel_call(models["sleep"], 0, ins, outs, [("output", 0)],
                       ([bufs[0].va, bufs[1].va], [0]))
    with pytest.raises(ValueError, match="calls on CPU tensors return no arguments"):
        kc.kernel_call(models["sleep"], 0, ins, outs, [("arg", 0)],
                       ([bufs[0].va, bufs[1].va], [bufs[2].va]))
    with pytest.raises(ValueError, match="calls on CPU tensors have no aliased outputs"):
        kc.kernel_call(models["sleep"], 0, ins, [None], [], "host")
    with pytest.raises(ValueError, match='staged must be None, "host" or'):
        kc.kernel_call(models["sleep"], 0, ins, outs, [("output", 0)], "device")
    with pytest.raises(RuntimeError, match="kernel_call: staged buffer: NRT_INVALID: address"):
        kc.kernel_call(models["sleep"], 0, ins, outs, [("output", 0)],
                       ([bufs[0].va, bufs[1].va], [12345]))


def test_host_call_reads_and_writes_cpu_tensors_in_place(models):
    """staged="host": the kernel reads the CPU inputs where they lie and writes
    a fresh CPU output -- no device buffer, no copy; same refusals of inputs
    that are not what the kernel was built for."""
    import spike

    kc = calls()
    assert kc.host_addressable() is True        # the CPU driver
    call = kc.kernel_call(models["sleep"], 0, [(0, (N,), torch.float32), (1, (1,), torch.int32)],
                          [((N,), torch.float32)], [("output", 0), ("value", 3)], "host")
    x = torch.arange(N, dtype=torch.float32)
    ms = torch.zeros(1, dtype=torch.int32)
    rt = spike.get_spike_singleton()
    allocs = rt.memory_stats(0)["total_allocations"]
    for step in range(3):
        out, three = kc.run_kernel_call(call, [x + step, ms])
        assert out.device.type == "cpu" and three == 3
        assert torch.equal(out, x + step + 1)
    assert rt.memory_stats(0)["total_allocations"] == allocs   # no device memory used
    sliced = torch.zeros(N + 1)[1:]                  # contiguous, 4 bytes past its storage
    sliced.copy_(x)
    out, _ = kc.run_kernel_call(call, [sliced, ms])
    assert torch.equal(out, x + 1)
    into = torch.zeros(2 * N)
    out, _ = kc.run_kernel_call(call, [x, ms], [into.narrow(0, N, N)])   # written in place
    assert out.data_ptr() == into.data_ptr() + N * 4 and torch.equal(into[N:], x + 1)
    run = kc.run_kernel_call
    assert run(call, (x, ms), [torch.zeros(N).to("nkipy")]) is None  # output not on the CPU
    assert run(call, (x.to("nkipy"), ms)) is None           # not a CPU tensor
    assert run(call, (x.double(), ms)) is None              # dtype
    assert run(call, (torch.ones(2 * N)[::2], ms)) is None  # layout


def test_staged_buffers_are_held(models):
    """A staged call keeps its buffers' memory: freeing a buffer's tensor object
    cannot hand its address to another tensor while the call exists."""
    import spike

    rt = spike.get_spike_singleton()
    call, bufs = staged_call(models)
    rt.free_tensor(bufs[2])                       # the output buffer's handle
    victim = torch.full((N,), 7.0, device="nkipy")
    x = torch.arange(N, dtype=torch.float32)
    out, _ = calls().run_kernel_call(call, (x, torch.zeros(1, dtype=torch.int32)))
    assert torch.equal(out, x + 1)
    assert torch.equal(victim.cpu(), torch.full((N,), 7.0))


def test_staged_call_after_the_runtime_closed():
    """After spike_torch.reset() a compiled function's staged call never writes
    through its old buffers into the new runtime's tensors (the same addresses
    may now belong to them): the function rebuilds its kernel and buffers in the
    new runtime and gives the right answer."""
    import os
    import sys

    env = {k: v for k, v in os.environ.items() if k != "NEURON_RT_VISIBLE_CORES"}
    env["PYTHONPATH"] = str(KERNELS.parents[2])
    code = """
import torch, tempfile, spike_torch
from torch_to_nkipy import init_nkipy_backend
init_nkipy_backend(nkipy_cache=tempfile.mkdtemp(), log_level=40)
f = torch.compile(lambda x, y: x * 2 + y, backend="nkipy")
x, y = torch.ones(64), torch.ones(64)
f(x, y)
spike_torch.reset()
a = torch.full((64,), 5.0, device="nkipy"); b = torch.full((64,), 6.0, device="nkipy")
c = torch.full((64,), 7.0, device="nkipy")
out = f(x + 40, y)
assert out.tolist() == [83.0] * 64, out
assert [t.cpu()[0].item() for t in (a, b, c)] == [5.0, 6.0, 7.0]
print("OK")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_stale_tensors_raise_in_eager_and_compiled_calls():
    """After spike_torch.reset() a tensor's old device address may hold another
    tensor's data: eager compute (y + 1) read it silently; every use raises."""
    r = run_python(textwrap.dedent("""
        import warnings, tempfile, torch, spike_torch, torch_to_nkipy
        warnings.simplefilter("ignore")
        torch_to_nkipy.init_nkipy_backend(nkipy_cache=tempfile.mkdtemp())
        f = torch.compile(lambda a: a * 3 + 1, backend="nkipy")
        y = torch.ones(4, device="nkipy")
        f(y)
        spike_torch.reset()
        z = torch.full((4,), 7.0, device="nkipy")      # may take y's old address
        for name, op in [("add", lambda: y + 1), ("mul", lambda: y * 1), ("exp", lambda: y.exp()),
                         ("sum", lambda: y.sum()), ("mm", lambda: y.view(2, 2) @ y.view(2, 2)),
                         ("compiled", lambda: f(y)), ("cpu", lambda: y.cpu()),
                         ("nrt", lambda: spike_torch.get_nrt_tensor(y)),
                         ("info", lambda: spike_torch.get_tensor_info(y))]:
            try:
                op()
                print(name, "NO ERROR")
            except RuntimeError as e:
                print(name, "NRT_CLOSED" if "NRT_CLOSED" in str(e) else str(e)[:200])
        print("z", z.cpu().tolist())
    """))
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    for name in ("add", "mul", "exp", "sum", "mm", "compiled", "cpu", "nrt", "info"):
        assert lines[name] == "NRT_CLOSED", (name, lines[name])
    assert lines["z"] == "[7.0, 7.0, 7.0, 7.0]"


def test_compiled_function_works_again_after_reset():
    """spike_torch.reset() closes the runtime the compiled kernels were loaded
    into; the same compiled function rebuilds them on next use (it raised
    'load it again', which the user had no way to do)."""
    r = run_python(textwrap.dedent("""
        import warnings, tempfile, torch, spike_torch, torch_to_nkipy
        warnings.simplefilter("ignore")
        torch_to_nkipy.init_nkipy_backend(nkipy_cache=tempfile.mkdtemp())
        f = torch.compile(lambda a: a * 3 + 1, backend="nkipy")
        for dev in ("nkipy", "cpu"):
            print(f(torch.ones(4, device=dev)).cpu().tolist())
            spike_torch.reset()
            print(f(torch.full((4,), 2.0, device=dev)).cpu().tolist())
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:4] == ["[4.0, 4.0, 4.0, 4.0]", "[7.0, 7.0, 7.0, 7.0]"] * 2
