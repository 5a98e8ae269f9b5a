"""The original nkipy's public names that code written for it imports:
``from nkipy import knob`` and ``nkipy.core.compile`` (the original's
documented compile module), with its names, signatures and defaults."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import nkipy
from nkipy import knob
from nkipy.core import compile as nkc
from nkipy.core.trace import NKIPyKernel
from spike import SpikeModel, SpikeTensor


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """compile_to_neff builds through nkipy's cache: one of the test session's."""
    monkeypatch.setenv("NKIPY_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "nkc_cache"))


def _scaled_add(a, b):
    a = knob(a, partition_dim=0, mem_space="Sbuf", tile_size=[128, 64])
    c = a * 2.0 + b
    return knob(c, partition_dim=-1, mem_space="Hbm", reduction_tile=[32])


def test_knob_is_the_top_level_export():
    assert nkipy.__all__ == ["knob"] and nkipy.knob is knob


def test_knob_returns_the_tensor_in_numpy_and_traced_runs(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((3, 4), np.float32)
    assert knob(a, partition_dim=1) is a
    np.testing.assert_array_equal(_scaled_add(a, b), a * 2 + b)   # plain NumPy
    k = nkc.trace(_scaled_add)
    k.specialize(a, b)
    path = nkc.compile_to_neff(k, str(tmp_path), neff_name="scaled.neff")
    model = SpikeModel.load_from_neff(path)
    out = model({"a": SpikeTensor.from_numpy(a), "b": SpikeTensor.from_numpy(b)})
    np.testing.assert_array_equal(out["output0"].numpy(), a * 2 + b)


@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(partition_dim=2), ValueError, "partition_dim 2 is out of range for a tensor of rank 2"),
    (dict(partition_dim=-3), ValueError, "partition_dim -3 is out of range"),
    (dict(partition_dim=1.0), TypeError, "partition_dim must be an int, got 1.0"),
    (dict(mem_space="L2"), ValueError, "mem_space must be one of Hbm, Psum, Sbuf, SharedHbm, "
                                       "got 'L2'"),
    (dict(tile_size=[4]), ValueError, "tile_size has 1 entries for a tensor of rank 2"),
    (dict(tile_size=[4, 0]), ValueError, r"tile_size must be a list of positive ints, got \[4, 0\]"),
    (dict(tile_size="44"), TypeError, "tile_size must be a list of positive ints, got '44'"),
    (dict(reduction_tile=[-1]), ValueError, "reduction_tile must be a list of positive ints"),
])
def test_knob_refuses_malformed_hints(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        knob(np.zeros((2, 3), np.float32), **kwargs)
    with pytest.raises(TypeError, match="knob\\(\\) annotates an array or a traced tensor, got int"):
        knob(3)


def test_compile_to_neff_with_the_original_arguments(tmp_path, caplog):
    a = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    b = np.full((4, 8), 0.5, np.float32)
    k = nkc.trace(_scaled_add)
    assert isinstance(k, NKIPyKernel)
    k.specialize(a, b)
    with caplog.at_level(logging.INFO, logger="nkipy.core.compile"):
        path = nkc.compile_to_neff(k, str(tmp_path / "out"), neff_name="k.neff",
                                   target=nkc.CompilationTarget.TRN2,
                                   additional_compiler_args=nkc.nkipy_compiler_args + " -O2",
                                   save_artifacts=True)
    assert path == str(tmp_path / "out" / "k.neff")
    assert (tmp_path / "out" / "kernel.c").exists() and (tmp_path / "out" / "kernel.ir").exists()
    assert any("--lnc 1 --internal-tensorizer-opt-level=2" in r.getMessage()
               for r in caplog.records)
    model = SpikeModel.load_from_neff(path)
    out = model({"a": SpikeTensor.from_numpy(a), "b": SpikeTensor.from_numpy(b)})
    np.testing.assert_allclose(out["output0"].numpy(), a * 2 + b, rtol=1e-6)
    # the target by its value, and the Compiler class itself
    result = nkc.Compiler(nkc.CompilationConfig(target="trn1")).compile_in_directory(
        k, "again.neff", str(tmp_path / "o2"))
    assert result == tmp_path / "o2" / "again.neff" and result.exists()
    assert nkc.get_ir(k) is k.graph
    assert nkc.get_platform_target() in set(nkc.CompilationTarget)


def test_compile_module_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown compilation target 'trn9': use a "
                                         "CompilationTarget or one of 'trn1'"):
        nkc.compile_to_neff(nkc.trace(_scaled_add), str(tmp_path), target="trn9")
    with pytest.raises(ValueError, match="the kernel must be traced before compilation: "
                                         "call kernel.specialize"):
        nkc.compile_to_neff(nkc.trace(_scaled_add), str(tmp_path))
    with pytest.raises(ValueError, match="output_dir must be specified when save_artifacts"):
        nkc.Compiler(nkc.CompilationConfig()).compile_in_directory(None, "x.neff", None, True)
    with pytest.raises(ValueError, match="additional_compiler_args: 'O2x' is not an option"):
        nkc.split_compiler_args("--lnc 1 -g O2x O2")
    assert nkc.split_compiler_args("--lnc 1 -O2 --x=3 --flag -g") == (
        ["-O2", "-g"], ["--lnc", "1", "--x=3", "--flag"])
    with pytest.raises(NotImplementedError, match="lower_to_c"):
        nkc.lower_to_nki(nkc.trace(_scaled_add))
