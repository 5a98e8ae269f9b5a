"""Error paths: NrtError formatting, NEFFs the runtime refuses, kernel
failures, out of memory."""
from __future__ import annotations

import os
import re
import textwrap

import numpy as np
import pytest

import spike
from spike import NrtError, SpikeError, SpikeModel, SpikeTensor

from spike_helpers import run_python

NRT_RE = re.compile(r"^NRT Error (NRT_[A-Z_]+)\((\d+)\): (.+)$", re.S)


def check_nrt(exc: NrtError, name: str) -> str:
    """Checks the NrtError format and attributes; returns the message part."""
    m = NRT_RE.match(str(exc))
    assert m, str(exc)
    assert m.group(1) == name == exc.status_name
    assert int(m.group(2)) == exc.status_code
    return m.group(3)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.neff"
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(path)
    msg = check_nrt(info.value, "NRT_FAILURE")
    assert str(path) in msg and "No such file" in msg


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(tmp_path)
    assert f"cannot load NEFF file '{tmp_path}': it is a directory, not a regular file" in \
        check_nrt(info.value, "NRT_FAILURE")


def test_special_files_are_refused_in_bounded_time(tmp_path):
    """/dev/zero used to be read until memory ran out and a FIFO blocked the
    open forever: both are refused without reading. In a child process with a
    timeout, so that the old behaviour fails instead of hanging the suite."""
    fifo = tmp_path / "pipe.neff"
    os.mkfifo(fifo)
    code = textwrap.dedent(f"""
        import spike
        for path in ("/dev/zero", {str(fifo)!r}):
            try:
                spike.SpikeModel.load_from_neff(path)
            except spike.NrtError as e:
                print("NRTERROR", e)
    """)
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("cannot load NEFF file '/dev/zero': it is a character device, not a regular file"
            in result.stdout), result.stdout
    assert f"cannot load NEFF file '{fifo}': it is a FIFO (named pipe)" in result.stdout


def test_neff_over_the_size_cap(neff, monkeypatch):
    monkeypatch.setenv("NKRT_MAX_NEFF_SIZE", "1K")
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(neff("add"))
    msg = check_nrt(info.value, "NRT_FAILURE")
    assert "over the limit of 1024 bytes (NKRT_MAX_NEFF_SIZE; raise it" in msg
    monkeypatch.setenv("NKRT_MAX_NEFF_SIZE", "big")
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(neff("add"))
    assert 'NKRT_MAX_NEFF_SIZE: invalid size "big"' in check_nrt(info.value, "NRT_INVALID")


def test_corrupt_bytes(tmp_path):
    path = tmp_path / "random.neff"
    path.write_bytes(np.random.default_rng(1).bytes(4096))
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(path)
    assert "not a NEFF" in check_nrt(info.value, "NRT_FAILURE")


@pytest.mark.parametrize("machine, name", [(183, "aarch64"), (62, "x86-64"), (243, "riscv"),
                                           (9999, "ELF machine 9999")])
def test_neff_built_for_another_architecture(tmp_path, neff, machine, name):
    """A NEFF of another machine is refused naming both architectures (dlopen
    said 'No such file or directory' although the file exists)."""
    import platform

    host = {"x86_64": "x86-64", "aarch64": "aarch64"}[platform.machine()]
    if name == host:
        machine, name = (183, "aarch64") if host == "x86-64" else (62, "x86-64")
    data = bytearray(open(neff("add"), "rb").read())
    data[18:20] = machine.to_bytes(2, "little")          # e_machine
    path = tmp_path / "other.neff"
    path.write_bytes(bytes(data))
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(path)
    msg = check_nrt(info.value, "NRT_FAILURE")
    assert f"not a NEFF for this host: built for {name}, this host is {host} (rebuild it here)" \
        in msg, msg
    big = bytearray(open(neff("add"), "rb").read())
    big[5] = 2                                            # EI_DATA: big-endian
    path.write_bytes(bytes(big))
    with pytest.raises(NrtError, match="the shared object is big-endian, this host is "
                                       "little-endian"):
        SpikeModel.load_from_neff(path)
    bad_magic = bytearray(open(neff("add"), "rb").read())
    bad_magic[1:4] = b"ELG"
    path.write_bytes(bytes(bad_magic))
    with pytest.raises(NrtError, match="that do not start with the ELF magic"):
        SpikeModel.load_from_neff(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.neff"
    path.write_bytes(b"")
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(path)
    check_nrt(info.value, "NRT_FAILURE")


def test_truncated_neff(tmp_path, neff):
    """The first half of add.neff must be refused with NrtError. Run in a
    child process so that a crash of the loader is reported as a failure."""
    data = open(neff("add"), "rb").read()
    path = tmp_path / "half.neff"
    path.write_bytes(data[: len(data) // 2])
    code = textwrap.dedent(f"""
        import spike
        try:
            spike.SpikeModel.load_from_neff({str(path)!r})
        except spike.NrtError as e:
            print("NRTERROR", e.status_name, e)
        else:
            print("LOADED")
    """)
    result = run_python(code)
    assert result.returncode == 0, (
        f"loading a truncated NEFF killed the process (rc {result.returncode}): "
        f"{result.stderr[-2000:]}")
    assert "NRTERROR NRT_FAILURE" in result.stdout, result.stdout + result.stderr


def test_wrong_abi_version(neff):
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(neff("bad_abi"))
    msg = check_nrt(info.value, "NRT_UNSUPPORTED_NEFF_VERSION")
    assert "999" in msg


def test_bad_descriptor(neff):
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(neff("bad_desc"))
    msg = check_nrt(info.value, "NRT_FAILURE")
    assert "declares 15 bytes" in msg and "16 bytes" in msg


def test_missing_entry_point(neff):
    with pytest.raises(NrtError) as info:
        SpikeModel.load_from_neff(neff("noentry"))
    assert "nkrt_neff_query" in check_nrt(info.value, "NRT_FAILURE")


def test_kernel_failure(neff):
    model = SpikeModel.load_from_neff(neff("fails"))
    x = SpikeTensor.from_numpy(np.zeros(4, np.float32))
    with pytest.raises(NrtError) as info:
        model({"x": x})
    msg = check_nrt(info.value, "NRT_EXEC_COMPLETED_WITH_ERR")
    assert "deliberate kernel failure" in msg and "fails" in msg
    # the runtime stays usable
    add = SpikeModel.load_from_neff(neff("noop"))
    out = add({"x": SpikeTensor.from_numpy(np.array([3.0], np.float32))})
    assert out["output0"].numpy()[0] == 3.0


def test_custom_kernel_returning_error_without_message(compile_neff):
    src = textwrap.dedent("""
        #include "nkrt/neff_abi.h"
        static const int64_t shape[1] = {2};
        static const nkrt_neff_tensor_t ins[1] = {{"v", NKRT_DTYPE_INT64, 1, shape, 16, -1}};
        static const nkrt_neff_tensor_t outs[1] = {{"output0", NKRT_DTYPE_INT64, 1, shape, 16, -1}};
        static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
          (void)env; (void)in; (void)out; return 7;
        }
        static const nkrt_neff_desc_t desc = {sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION,
            "silent_fail", 1, 1, ins, outs, 0, kernel};
        const nkrt_neff_desc_t *nkrt_neff_query(uint32_t v) { (void)v; return &desc; }
    """)
    model = SpikeModel.load_from_neff(compile_neff(src, "silent_fail"))
    with pytest.raises(NrtError) as info:
        model({"v": SpikeTensor.from_numpy(np.arange(2, dtype=np.int64))})
    check_nrt(info.value, "NRT_EXEC_COMPLETED_WITH_ERR")


def test_out_of_memory_configured(fresh_spike):
    spike.configure(core_memory_bytes=4 << 20)
    keep = SpikeTensor.from_numpy(np.zeros(1 << 20, np.uint8))  # 1 MiB
    with pytest.raises(NrtError) as info:
        SpikeTensor.empty((8 << 20,), "uint8")
    msg = check_nrt(info.value, "NRT_RESOURCE")
    assert str(8 << 20) in msg  # requested
    assert str(4 << 20) in msg  # capacity
    assert "core 0" in msg
    stats = spike.get_spike_singleton().memory_stats()
    assert stats["oom_count"] == 1 and stats["capacity_bytes"] == 4 << 20
    del keep


def test_out_of_memory_env(fresh_spike, monkeypatch):
    monkeypatch.setenv("NKRT_CORE_MEMORY", "2M")
    s = spike.get_spike_singleton()
    assert s.core_memory_bytes == 2 << 20
    with pytest.raises(NrtError, match=r"NRT_RESOURCE\(4\): out of device memory.*3145728"):
        s.allocate_tensor(3 << 20)


def test_nrt_error_on_bad_env(fresh_spike, monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "1-0x")
    with pytest.raises(NrtError, match="1-0x"):
        spike.get_spike_singleton()


def test_spike_error_prefix():
    with pytest.raises(SpikeError) as info:
        t = spike.get_spike_singleton().allocate_tensor(4, name="p")
        spike.get_spike_singleton().free_tensor(t)
        spike.get_spike_singleton().tensor_read(t)
    assert str(info.value).startswith("Spike Error: ")


@pytest.mark.parametrize("shape, exc, message", [
    ((4.5,), TypeError, r"shape entries must be integers, got 4.5"),
    ((2, "3"), TypeError, r"shape entries must be integers, got '3'"),
    (4, TypeError, r"shape must be a sequence of integers, got 4"),
    ((2, -1), ValueError, r"negative extents, got \(2, -1\)"),
])
def test_empty_refuses_non_integer_shapes(shape, exc, message):
    """SpikeTensor.empty((4.5,)) used to truncate to 4 elements."""
    with pytest.raises(exc, match=message):
        SpikeTensor.empty(shape, np.float32)


def test_empty_accepts_numpy_integers():
    t = SpikeTensor.empty((np.int64(2), np.int32(3)), np.float32)
    assert t.shape == (2, 3) and all(type(d) is int for d in t.shape)
