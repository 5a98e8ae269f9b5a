"""The address-based tensor access and the exported C API capsule of spike._spike
(used by spike_torch to share the runtime)."""
from __future__ import annotations

import pytest

from spike import NrtError, SpikeError
from spike import _spike


def test_lookup_address_interior(raw_spike):
    t = raw_spike.allocate_tensor(1000, name="a")
    base, size, core = raw_spike.lookup_address(t.va + 123)
    assert base == t.va and size == 1000 and core == 0
    assert raw_spike.lookup_address(t.va) == (t.va, 1000, 0)


def test_lookup_address_errors(raw_spike):
    with pytest.raises(NrtError):
        raw_spike.lookup_address(8)
    with pytest.raises(TypeError, match="address must be an int"):
        raw_spike.lookup_address("x")
    with pytest.raises(ValueError, match="non-negative"):
        raw_spike.lookup_address(-5)


def test_slice_from_address(raw_spike):
    t = raw_spike.allocate_tensor(256, name="src")
    raw_spike.tensor_write(t, bytes(range(256)))
    s = raw_spike.slice_from_address(t.va + 16, 32, name="win")
    assert s.is_slice and s.size == 32 and s.va == t.va + 16 and s.name == "win"
    assert raw_spike.tensor_read(s) == bytes(range(16, 48))
    rest = raw_spike.slice_from_address(t.va + 200)
    assert rest.size == 56
    # the slice keeps the allocation alive after the owner is dropped
    del t
    assert raw_spike.tensor_read(s) == bytes(range(16, 48))


def test_slice_from_address_errors(raw_spike):
    t = raw_spike.allocate_tensor(64)
    with pytest.raises(SpikeError, match="exceeds the allocation bound"):
        raw_spike.slice_from_address(t.va + 32, 64)
    with pytest.raises(NrtError):
        raw_spike.slice_from_address(16, 4)
    with pytest.raises(ValueError):
        raw_spike.slice_from_address(t.va, -1)


def test_closed_runtime_refuses(raw_spike):
    t = raw_spike.allocate_tensor(64)
    va = t.va
    raw_spike.close()
    with pytest.raises(SpikeError, match="closed"):
        raw_spike.lookup_address(va)
    with pytest.raises(SpikeError, match="closed"):
        raw_spike.slice_from_address(va, 8)


def test_capsule():
    cap = _spike._nkrt_capi()
    assert type(cap).__name__ == "PyCapsule"
    assert "spike._spike.nkrt_capi" in repr(cap)
    assert "spike._spike.nkrt_capi" in repr(_spike.nkrt_capi)
    import ctypes

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get.restype = ctypes.c_void_p
    ptr = get(cap, b"spike._spike.nkrt_capi")
    head = (ctypes.c_uint32 * 2).from_address(ptr)
    assert head[1] == 7  # SPIKE_CAPI_VERSION
    assert head[0] >= 8 + 8 * 26  # struct_size covers the version-5 table


class _Capi:
    """ctypes view of spike_capi_t (spike/include/spike_capi.h), version 7."""

    def __init__(self):
        import ctypes as C

        vp, u64, u32 = C.c_void_p, C.c_uint64, C.c_uint32
        fields = [("struct_size", u32), ("version", u32),
                  ("acquire_runtime", C.CFUNCTYPE(vp, C.POINTER(vp), C.POINTER(u64))),
                  ("live_generation", C.CFUNCTYPE(u64)),
                  ("core_count", C.CFUNCTYPE(vp, C.POINTER(u32))),
                  ("tensor_allocate", C.CFUNCTYPE(vp, u64, u32, u64, C.c_char_p, C.POINTER(vp))),
                  ("tensor_release", C.CFUNCTYPE(None, u64, vp)),
                  ("tensor_lookup", C.CFUNCTYPE(vp, u64, vp, C.POINTER(vp), C.POINTER(u64))),
                  ("tensor_read", C.CFUNCTYPE(vp, u64, vp, vp, u64, u64)),
                  ("tensor_write", C.CFUNCTYPE(vp, u64, vp, vp, u64, u64)),
                  ("tensor_copy", C.CFUNCTYPE(vp, u64, vp, u64, vp, u64, u64)),
                  ("tensor_memset", C.CFUNCTYPE(vp, u64, vp, C.c_int, u64, u64)),
                  ("tensor_va", C.CFUNCTYPE(vp, vp)),
                  ("tensor_size", C.CFUNCTYPE(u64, vp)),
                  ("tensor_core", C.CFUNCTYPE(u32, vp)),
                  ("memory_stats", C.CFUNCTYPE(vp, u64, u32, vp)),
                  ("memory_reset_peak", C.CFUNCTYPE(vp, u64, u32)),
                  ("status_code", C.CFUNCTYPE(C.c_int, vp)),
                  ("status_message", C.CFUNCTYPE(C.c_char_p, vp)),
                  ("code_name", C.CFUNCTYPE(C.c_char_p, C.c_int)),
                  ("status_free", C.CFUNCTYPE(None, vp)),
                  # version 2: a Python API (GIL held), hence PYFUNCTYPE
                  ("model_execute_at", C.PYFUNCTYPE(C.c_int, C.py_object, C.POINTER(vp), u32)),
                  ("tensor_update", C.CFUNCTYPE(vp, u64, vp, vp, u64, u64)),
                  ("tensor_retain", C.CFUNCTYPE(vp, u64, vp)),
                  # version 4
                  ("comm_set_hosts", C.CFUNCTYPE(vp, u32, C.POINTER(u32), vp)),
                  ("status_make", C.CFUNCTYPE(vp, C.c_int, C.c_char_p)),
                  # version 5
                  ("model_execute_host", C.PYFUNCTYPE(C.c_int, C.py_object, C.POINTER(vp), u32)),
                  ("host_addressable", C.CFUNCTYPE(C.c_int, u64)),
                  # version 6: model_run_at needs no GIL (CFUNCTYPE lets it go)
                  ("model_run_at", C.CFUNCTYPE(vp, C.py_object, C.POINTER(vp), u32)),
                  ("raise_status", C.PYFUNCTYPE(C.c_int, vp)),
                  # version 7: trace sessions
                  ("trace_start", C.CFUNCTYPE(vp, u64, C.c_int32, C.POINTER(vp))),
                  ("trace_events", C.CFUNCTYPE(vp, u64, vp, C.c_int, C.POINTER(vp),
                                               C.POINTER(C.c_size_t))),
                  ("trace_destroy", C.CFUNCTYPE(None, u64, vp)),
                  ("free_memory", C.CFUNCTYPE(None, vp)),
                  ("tensor_write_async", C.CFUNCTYPE(vp, u64, vp, vp, u64, u64, C.POINTER(vp))),
                  ("event_wait", C.CFUNCTYPE(vp, u64, vp, C.c_int64)),
                  ("event_is_done", C.CFUNCTYPE(C.c_int, u64, vp)),
                  ("event_release", C.CFUNCTYPE(None, u64, vp)),
                  ("event_retain", C.CFUNCTYPE(None, u64, vp))]

        class Table(C.Structure):
            _fields_ = fields

        get = C.pythonapi.PyCapsule_GetPointer
        get.argtypes = [C.py_object, C.c_char_p]
        get.restype = vp
        self.t = Table.from_address(get(_spike._nkrt_capi(), b"spike._spike.nkrt_capi"))
        self.C = C


def test_capi_generations(raw_spike):
    api = _Capi()
    C, t = api.C, api.t
    assert t.version == 7 and t.struct_size == C.sizeof(type(t))
    st = t.status_make(5, b"made by a caller")          # version 4: statuses for callbacks
    assert t.status_code(st) == 5 and t.status_message(st) == b"made by a caller"
    assert t.code_name(t.status_code(st)) == b"NRT_TIMEOUT"
    t.status_free(st)
    assert t.status_make(0, b"ignored") is None         # NKRT_SUCCESS is NULL
    assert t.comm_set_hosts(2, None, None) is None       # NULL host_of: one host
    rt, gen = C.c_void_p(), C.c_uint64()
    assert t.acquire_runtime(C.byref(rt), C.byref(gen)) is None  # NULL status: success
    assert rt.value and gen.value == t.live_generation() != 0
    assert t.host_addressable(gen.value) == 1            # the CPU driver: version 5
    n = C.c_uint32()
    assert t.core_count(C.byref(n)) is None and n.value == raw_spike.core_count
    tensor = C.c_void_p()
    assert t.tensor_allocate(gen, 0, 128, b"capi", C.byref(tensor)) is None
    va = t.tensor_va(tensor)
    assert raw_spike.lookup_address(va) == (va, 128, 0)
    buf = (C.c_uint8 * 128)(*range(128))
    assert t.tensor_write(gen, tensor, buf, 0, 128) is None
    out = (C.c_uint8 * 4)()
    assert t.tensor_read(gen, tensor, out, 10, 4) is None and list(out) == [10, 11, 12, 13]
    buf[11] = 99                                           # only what differs is written
    assert t.tensor_update(gen, tensor, buf, 0, 128) is None
    assert t.tensor_read(gen, tensor, out, 10, 4) is None and list(out) == [10, 99, 12, 13]
    found, off = C.c_void_p(), C.c_uint64()
    assert t.tensor_lookup(gen, va + 5, C.byref(found), C.byref(off)) is None
    assert found.value == tensor.value and off.value == 5
    assert t.tensor_retain(gen, found) is None    # a second reference: one release keeps it
    t.tensor_release(gen, found)
    assert t.tensor_read(gen, tensor, out, 10, 4) is None
    st = t.tensor_read(gen, tensor, out, 126, 4)  # out of bounds
    assert st and t.code_name(t.status_code(st)) == b"NRT_INVALID"
    t.status_free(st)
    raw_spike.close()
    assert t.live_generation() == 0
    assert t.host_addressable(gen) == 0                  # stale: no
    # a stale generation is refused and release is a no-op
    st = t.tensor_read(gen, tensor, out, 0, 4)
    assert st and t.code_name(t.status_code(st)) == b"NRT_CLOSED"
    assert b"closed" in t.status_message(st)
    t.status_free(st)
    t.tensor_release(gen, tensor)


def test_capi_model_execute_at(raw_spike, neff):
    """model_execute_at runs a model by addresses; failures raise what Spike.execute_at does."""
    import numpy as np

    api = _Capi()
    C, t = api.C, api.t
    n = 1024
    m = raw_spike.load_model(neff("sleep"))
    buf = raw_spike.allocate_tensor(4 * n + 4, name="buf")
    out = raw_spike.allocate_tensor(4 * n, name="out")
    x = np.arange(n, dtype=np.float32)
    raw_spike.tensor_write(buf, x.tobytes() + bytes(4))
    addrs = (C.c_void_p * 3)(buf.va, buf.va + 4 * n, out.va)
    assert t.model_execute_at(m, addrs, 3) == 0
    assert np.array_equal(np.frombuffer(raw_spike.tensor_read(out), np.float32), x + 1)
    with pytest.raises(ValueError, match="model 'sleep' takes 3 addresses"):
        t.model_execute_at(m, addrs, 2)
    bad = (C.c_void_p * 3)(buf.va, buf.va + 4 * n, None)
    with pytest.raises(NrtError, match="missing output tensor 'output0'"):
        t.model_execute_at(m, bad, 3)
    with pytest.raises(TypeError, match="model must be an NrtModel, got int"):
        t.model_execute_at(5, addrs, 3)
    raw_spike.unload_model(m)
    with pytest.raises(SpikeError, match="is unloaded"):
        t.model_execute_at(m, addrs, 3)


def test_capi_model_run_at_without_the_gil(raw_spike, neff):
    """model_run_at runs a model by addresses with the GIL let go (ctypes drops
    it around the call); it returns a status, which raise_status raises as
    Spike.execute_at would: NrtError for what nkrt refuses, SpikeError for an
    unloaded model. Several threads may run the same model at once."""
    import threading

    import numpy as np

    api = _Capi()
    C, t = api.C, api.t
    n = 1024
    m = raw_spike.load_model(neff("sleep"))
    buf = raw_spike.allocate_tensor(4 * n + 4, name="buf")
    outs = [raw_spike.allocate_tensor(4 * n, name=f"out{k}") for k in range(4)]
    x = np.arange(n, dtype=np.float32)
    raw_spike.tensor_write(buf, x.tobytes() + bytes(4))
    results = []

    def run(out):
        addrs = (C.c_void_p * 3)(buf.va, buf.va + 4 * n, out.va)
        results.append(t.model_run_at(m, addrs, 3))

    threads = [threading.Thread(target=run, args=(o,)) for o in outs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [None] * 4
    for out in outs:
        assert np.array_equal(np.frombuffer(raw_spike.tensor_read(out), np.float32), x + 1)

    def status_of(model, addrs, count):
        st = t.model_run_at(model, addrs, count)
        assert st
        return t.code_name(t.status_code(st)), t.status_message(st), st

    addrs = (C.c_void_p * 3)(buf.va, buf.va + 4 * n, outs[0].va)
    code, msg, st = status_of(m, addrs, 2)
    assert code == b"NRT_INVALID" and b"takes 3 addresses" in msg
    with pytest.raises(NrtError, match="takes 3 addresses"):
        t.raise_status(st)
    code, msg, st = status_of(5, addrs, 3)
    assert code == b"NRT_INVALID" and b"not an NrtModel" in msg
    t.status_free(st)
    bad = (C.c_void_p * 3)(buf.va, buf.va + 4 * n, None)
    code, msg, st = status_of(m, bad, 3)
    assert b"missing output tensor 'output0'" in msg
    t.status_free(st)
    raw_spike.unload_model(m)
    code, msg, st = status_of(m, addrs, 3)
    assert code == b"NRT_CLOSED" and b"unloaded" in msg
    with pytest.raises(SpikeError, match="unloaded"):
        t.raise_status(st)


def test_capi_trace_sessions(raw_spike, neff):
    """Version 7: a trace session of the live runtime, its events copied out as
    nkrt_trace_event_t (kind, phase, core, name, monotonic ns), drained; once
    the runtime closed, events are refused and destroy does nothing."""
    import numpy as np

    api = _Capi()
    C, t = api.C, api.t

    class Event(C.Structure):
        _fields_ = [("tracking_id", C.c_uint64), ("timestamp_ns", C.c_uint64),
                    ("bytes", C.c_uint64), ("kind", C.c_uint32), ("phase", C.c_uint32),
                    ("core", C.c_uint32), ("name", C.c_char * 64)]

    rt, gen = C.c_void_p(), C.c_uint64()
    assert t.acquire_runtime(C.byref(rt), C.byref(gen)) is None
    session = C.c_void_p()
    st = t.trace_start(gen, -3, C.byref(session))
    assert st and b"use -1 for all cores" in t.status_message(st)
    t.status_free(st)
    assert t.trace_start(gen, -1, C.byref(session)) is None
    m = raw_spike.load_model(neff("add"))
    a = raw_spike.allocate_tensor(64 * 33 * 4, name="a")
    out = raw_spike.allocate_tensor(64 * 33 * 4, name="out")
    raw_spike.tensor_write(a, np.ones(64 * 33, np.float32).tobytes())
    raw_spike.execute(m, {"a": a, "b": a}, {"output0": out})
    ev, n = C.c_void_p(), C.c_size_t()
    assert t.trace_events(gen, session, 1, C.byref(ev), C.byref(n)) is None
    events = (Event * n.value).from_address(ev.value)
    kinds = [(e.kind, e.phase, e.name) for e in events]
    assert kinds == [(2, 0, b"a"), (2, 1, b"a"), (1, 0, b"add"), (1, 1, b"add")]
    assert events[1].bytes == 64 * 33 * 4 and events[3].timestamp_ns >= events[2].timestamp_ns
    assert events[2].tracking_id == events[3].tracking_id
    t.free_memory(ev)
    assert t.trace_events(gen, session, 1, C.byref(ev), C.byref(n)) is None
    assert n.value == 0 and not ev.value                  # drained
    raw_spike.close()
    st = t.trace_events(gen, session, 0, C.byref(ev), C.byref(n))
    assert st and t.code_name(t.status_code(st)) == b"NRT_CLOSED"
    t.status_free(st)
    t.trace_destroy(gen, session)                          # stale: a no-op


def test_capi_async_write_and_events(raw_spike):
    """Version 7: a queued host-to-device write and its event; once the runtime
    closed, waiting succeeds at once, done is true and release does nothing."""
    api = _Capi()
    C, t = api.C, api.t
    rt, gen = C.c_void_p(), C.c_uint64()
    assert t.acquire_runtime(C.byref(rt), C.byref(gen)) is None
    tensor = C.c_void_p()
    assert t.tensor_allocate(gen, 0, 4096, b"async", C.byref(tensor)) is None
    src = (C.c_uint8 * 4096)(*([7] * 4096))
    ev = C.c_void_p()
    assert t.tensor_write_async(gen, tensor, src, 0, 4096, C.byref(ev)) is None and ev.value
    assert t.event_wait(gen, ev, -1) is None and t.event_is_done(gen, ev) == 1
    t.event_retain(gen, ev)                                 # two references: two releases
    t.event_release(gen, ev)
    assert t.event_is_done(gen, ev) == 1
    out = (C.c_uint8 * 4)()
    assert t.tensor_read(gen, tensor, out, 100, 4) is None and list(out) == [7] * 4
    t.event_release(gen, ev)
    st = t.tensor_write_async(gen, tensor, src, 4000, 200, C.byref(ev))
    assert st and b"exceeds" in t.status_message(st)
    t.status_free(st)
    assert t.tensor_write_async(gen, tensor, src, 0, 16, C.byref(ev)) is None
    raw_spike.close()
    assert t.event_wait(gen, ev, -1) is None and t.event_is_done(gen, ev) == 1
    t.event_release(gen, ev)                                # stale: a no-op
    st = t.tensor_write_async(gen, tensor, src, 0, 16, C.byref(ev))
    assert st and t.code_name(t.status_code(st)) == b"NRT_CLOSED"
    t.status_free(st)
