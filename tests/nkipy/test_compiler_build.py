"""The compiler's build and cache: hits, misses, corrupt entries, compile
errors, the NEFF file, and generated code that runs correctly."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from nkipy.compiler import build
from nkipy.compiler.api import compile_to_neff, lower_to_c, show_ir
from nkipy.compiler.build import CompileError, compile_graph
from nkipy.core.ir import Graph
from spike import SpikeModel, SpikeTensor


def softmax_graph(rows=8, cols=33, name="softmax"):
    g = Graph(name)
    x = g.add_input("x", (rows, cols), "float32")
    mx = g.add("reduce_max", [x], {"axes": (1,), "keepdims": True}, [((rows, 1), "float32")]).output
    d = g.add("sub", [x, mx], None, [((rows, cols), "float32")]).output
    e = g.add("exp", [d], None, [((rows, cols), "float32")]).output
    s = g.add("reduce_sum", [e], {"axes": (1,), "keepdims": True}, [((rows, 1), "float32")]).output
    o = g.add("div", [e, s], None, [((rows, cols), "float32")]).output
    g.outputs, g.output_names = [o], ["output0"]
    return g


def np_softmax(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def run(neff_path, **arrays):
    model = SpikeModel.load_from_neff(neff_path)
    outs = model({k: SpikeTensor.from_numpy(v) for k, v in arrays.items()})
    return {k: t.numpy() for k, t in outs.items()}


def test_compile_run_and_cache_hit(tmp_path):
    first = compile_graph(softmax_graph(), cache_dir=tmp_path)
    assert not first.cache_hit
    for f in (first.neff_path, first.c_path, first.ir_path):
        assert os.path.isfile(f)
    entry = tmp_path / f"softmax_{first.cache_key}"
    assert entry.stat().st_mode & 0o777 == 0o700             # private: it holds native code
    for f in entry.iterdir():
        assert f.stat().st_mode & 0o777 == 0o600, f
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["inputs"] == [{"name": "x", "shape": [8, 33], "dtype": "float32"}]
    assert meta["outputs"][0]["name"] == "output0"
    second = compile_graph(softmax_graph(), cache_dir=tmp_path)
    assert second.cache_hit and second.neff_path == first.neff_path
    a = np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32)
    out = run(second.neff_path, x=a)["output0"]
    np.testing.assert_allclose(out, np_softmax(a), rtol=1e-5, atol=1e-6)


def test_cache_miss_on_shape_dtype_and_flags(tmp_path):
    base = compile_graph(softmax_graph(), cache_dir=tmp_path)
    other_shape = compile_graph(softmax_graph(rows=9), cache_dir=tmp_path)
    other_flags = compile_graph(softmax_graph(), cache_dir=tmp_path, extra_flags="-DNKIPY_TEST=1")
    keys = {base.cache_key, other_shape.cache_key, other_flags.cache_key}
    assert len(keys) == 3
    assert not other_shape.cache_hit and not other_flags.cache_hit


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no_meta", "bad_meta"])
def test_corrupt_entry_is_rebuilt(tmp_path, damage):
    first = compile_graph(softmax_graph(), cache_dir=tmp_path)
    entry = os.path.dirname(first.neff_path)
    if damage == "truncate":
        data = open(first.neff_path, "rb").read()
        open(first.neff_path, "wb").write(data[: len(data) // 2])
    elif damage == "garbage":
        open(first.neff_path, "wb").write(b"\x7fELF" + b"\0" * 100)
    elif damage == "no_meta":
        os.unlink(os.path.join(entry, "meta.json"))
    else:
        open(os.path.join(entry, "meta.json"), "w").write("{not json")
    again = compile_graph(softmax_graph(), cache_dir=tmp_path)
    assert not again.cache_hit
    a = np.ones((8, 33), np.float32)
    np.testing.assert_allclose(run(again.neff_path, x=a)["output0"], np_softmax(a), rtol=1e-6)


def test_second_process_reuses_cache(tmp_path):
    compile_graph(softmax_graph(), cache_dir=tmp_path)
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from test_compiler_build import softmax_graph\n"
        "from nkipy.compiler.build import compile_graph\n"
        "print(compile_graph(softmax_graph(), cache_dir=%r).cache_hit)\n"
    ) % (os.path.dirname(__file__), str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_processes_building_the_same_kernels_at_once(tmp_path):
    """The ranks of a job share a cache and start compiling together: every
    process gets a working kernel, and no half-built entry or temporary
    directory is left (before, one process could delete the entry another was
    writing)."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from test_compiler_build import softmax_graph\n"
        "from nkipy.compiler.build import compile_graph\n"
        "for rows in range(2, 8):\n"
        "    compile_graph(softmax_graph(rows=rows), cache_dir=%r)\n"
        "print('done')\n"
    ) % (os.path.dirname(__file__), str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "done", err[-2000:]
    entries = sorted(os.listdir(tmp_path))
    assert len(entries) == 6 and not [e for e in entries if e.startswith(".")]
    for rows in range(2, 8):
        ck = compile_graph(softmax_graph(rows=rows), cache_dir=tmp_path)
        assert ck.cache_hit
        a = np.ones((rows, 33), np.float32)
        np.testing.assert_allclose(run(ck.neff_path, x=a)["output0"], np_softmax(a), rtol=1e-6)


def test_compile_error_names_source_and_message(tmp_path):
    with pytest.raises(CompileError) as info:
        compile_graph(softmax_graph(), cache_dir=tmp_path,
                      extra_flags="-include /nonexistent/missing_header.h")
    err = info.value
    assert "C compilation of kernel 'softmax' failed" in str(err)
    assert "missing_header.h" in str(err) and "missing_header.h" in err.compiler_output
    assert err.source_path.endswith("kernel.c") and os.path.isfile(err.source_path)
    # nothing half-built is left to be mistaken for a NEFF
    assert not os.path.exists(os.path.join(os.path.dirname(err.source_path), "kernel.neff"))


def test_compile_to_neff_file_loads_with_spike(tmp_path):
    path = compile_to_neff(softmax_graph(), tmp_path / "out", neff_name="softmax.neff",
                           save_artifacts=True, cache_dir=tmp_path / "cache")
    assert path.endswith("softmax.neff")
    assert (tmp_path / "out" / "kernel.c").is_file() and (tmp_path / "out" / "kernel.ir").is_file()
    model = SpikeModel.load_from_neff(path)
    info = model.input_tensors_info["x"]
    assert tuple(info.shape) == (8, 33) and info.dtype == "float32"
    a = np.random.default_rng(1).standard_normal((8, 33)).astype(np.float32)
    out = model({"x": SpikeTensor.from_numpy(a)})["output0"].numpy()
    np.testing.assert_allclose(out, np_softmax(a), rtol=1e-5, atol=1e-6)


def test_show_ir_and_c():
    g = softmax_graph()
    text = show_ir(g, optimized=False)
    assert "reduce_max" in text and "return output0=" in text
    c = lower_to_c(softmax_graph())
    assert "nkrt_neff_query" in c and "#pragma omp simd" in c
    with pytest.raises(TypeError, match="expected a traced kernel"):
        lower_to_c(42)


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NKIPY_CACHE_DIR", str(tmp_path / "envcache"))
    assert build.default_cache_dir() == tmp_path / "envcache"
    ck = compile_graph(softmax_graph(name="envk"))
    assert ck.neff_path.startswith(str(tmp_path / "envcache"))


def test_intermediates_share_scratch_memory(tmp_path):
    from nkipy.core.trace import trace
    from nkipy.runtime import DeviceKernel

    def chain_of_products(x, w1, w2):
        h = np.tanh(x @ w1)      # 64x128 intermediates ...
        g = h @ w2               # ... dead once g exists
        return (np.exp(g) @ w2.T).sum()

    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 64)).astype(np.float32) * 0.1
    w1 = rng.standard_normal((64, 128)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((128, 64)).astype(np.float32) * 0.1
    k = DeviceKernel.compile_and_load(chain_of_products, x, w1, w2, build_dir=tmp_path)
    c = k.c_source
    offsets = [int(o) for o in __import__("re").findall(r"\(scratch \+ (\d+)\)", c)]
    assert len(offsets) > len(set(offsets))  # some buffers reuse the same bytes
    assert k.compiled.graph is not None
    out = k({"x": SpikeTensor.from_numpy(x), "w1": SpikeTensor.from_numpy(w1),
             "w2": SpikeTensor.from_numpy(w2)})["output0"].numpy()
    np.testing.assert_allclose(out, chain_of_products(x, w1, w2), rtol=1e-4)
