"""A compiled conv2d run by a runtime whose kernel library predates conv2d
(env->lib->struct_size too small to hold it) fails with the generated
kernel's message instead of calling through a missing pointer.

The NEFF (a shared object) is called directly through its ABI
(nkrt/neff_abi.h) with a hand-built environment: no runtime of this tree
can lend an older table."""
import ctypes as C

import numpy as np

import nkipy.core.ops as ops
from nkipy.compiler.build import compile_graph
from nkipy.core.trace import trace

RANGE_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_int64, C.c_int64, C.c_uint32)
PARALLEL_FOR = C.CFUNCTYPE(None, C.c_void_p, C.c_int64, C.c_int64, RANGE_FN, C.c_void_p)
SCRATCH = C.CFUNCTYPE(C.c_void_p, C.c_void_p, C.c_uint64)
LOG = C.CFUNCTYPE(None, C.c_void_p, C.c_int, C.c_char_p)
SET_ERROR = C.CFUNCTYPE(None, C.c_void_p, C.c_char_p)


class Lib(C.Structure):
    # only the header: the kernel must read struct_size before any routine
    _fields_ = [("struct_size", C.c_uint32), ("reserved0", C.c_uint32),
                ("routines", C.c_void_p * 4)]


class Env(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("core_id", C.c_uint32), ("num_workers", C.c_uint32),
                ("rank", C.c_int32), ("world_size", C.c_int32),
                ("cc_enabled", C.c_uint32), ("reserved0", C.c_uint32),
                ("ctx", C.c_void_p), ("parallel_for", PARALLEL_FOR), ("scratch", SCRATCH),
                ("log", LOG), ("set_error", SET_ERROR), ("lib", C.POINTER(Lib))]


KERNEL = C.CFUNCTYPE(C.c_int, C.POINTER(Env), C.POINTER(C.c_void_p), C.POINTER(C.c_void_p))


class Desc(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("name", C.c_char_p), ("num_inputs", C.c_uint32), ("num_outputs", C.c_uint32),
                ("inputs", C.c_void_p), ("outputs", C.c_void_p),
                ("scratch_bytes", C.c_uint64), ("kernel", KERNEL)]


def test_conv2d_without_the_runtime_routine_is_an_error(tmp_path):
    x = np.ones((1, 4, 6, 6), np.float32)
    w = np.ones((5, 4, 3, 3), np.float32)
    g = trace(lambda x, w: ops.conv2d(x, w, None, padding=1), x, w, name="conv_no_routine")
    neff = C.CDLL(compile_graph(g, cache_dir=tmp_path).neff_path)
    query = neff.nkrt_neff_query
    query.restype = C.POINTER(Desc)
    query.argtypes = [C.c_uint32]
    desc = None
    for version in range(1, 64):  # the ABI version the kernel was built for
        desc = query(version)
        if desc:
            break
    assert desc, "the NEFF answers no ABI version"
    desc = desc.contents
    assert desc.num_inputs == 2 and desc.num_outputs == 1

    errors: list[str] = []
    scratch: list[np.ndarray] = []

    def alloc(ctx, nbytes):
        buf = np.zeros(nbytes + 64, np.uint8)
        scratch.append(buf)
        return (buf.ctypes.data + 63) // 64 * 64

    def parallel_for(ctx, n, grain, fn, arg):
        fn(arg, 0, n, 0)

    keep = [PARALLEL_FOR(parallel_for), SCRATCH(alloc), LOG(lambda ctx, level, msg: None),
            SET_ERROR(lambda ctx, msg: errors.append(msg.decode()))]
    lib = Lib(struct_size=C.sizeof(Lib))  # the four GEMM-era fields, no conv2d
    env = Env(struct_size=C.sizeof(Env), abi_version=desc.abi_version, num_workers=1,
              world_size=1, parallel_for=keep[0], scratch=keep[1], log=keep[2],
              set_error=keep[3], lib=C.pointer(lib))
    y = np.full((1, 5, 6, 6), 7.0, np.float32)
    ins = (C.c_void_p * 2)(x.ctypes.data, w.ctypes.data)
    outs = (C.c_void_p * 1)(y.ctypes.data)
    assert desc.kernel(C.byref(env), ins, outs) != 0
    assert errors == ["conv2d: this runtime has no convolution routine (env->lib->conv2d); "
                      "run the kernel with the runtime it was compiled for"]
