"""spike._spike.gemm_provider names the library serving kernels' matrix products."""
import subprocess
import sys

from spike import _spike


def test_gemm_provider_is_known():
    assert _spike.gemm_provider() in ("mkl", "reference")


def test_gemm_provider_can_be_forced_to_reference():
    code = "from spike import _spike; print(_spike.gemm_provider())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "NKRT_GEMM": "reference"}, check=True)
    assert out.stdout.strip() == "reference"


def test_gemm_pack_stats(raw_spike, neff):
    """A weight-like operand (an input the kernel does not write) is packed on
    its second sighting and reused; writing it drops the packed copy."""
    import numpy as np

    stats = raw_spike.gemm_pack_stats()
    assert set(stats) == {"packed_matrices", "packed_bytes", "limit_bytes", "hits", "packs",
                          "invalidations", "evictions"}
    assert stats["limit_bytes"] == 1 << 30 and stats["packs"] == 0
    cap, m, n, k = 65536, 64, 96, 80      # the matmul NEFF: C = A @ B^T via env->lib->sgemm
    model = raw_spike.load_model(neff("matmul"))
    params = np.array([0, 0, 1, 0, 1, m, n, k, k, k, n, 0, 0, 0, 0, 0], np.int64)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), np.float32)
    b = rng.standard_normal((n, k), np.float32)
    t = {name: raw_spike.allocate_tensor(size, name=name)
         for name, size in (("params", 128), ("scal", 8), ("a", 4 * cap), ("b", 4 * cap),
                            ("c", 4 * cap))}
    raw_spike.tensor_write(t["params"], params.tobytes())
    raw_spike.tensor_write(t["scal"], np.array([1, 0], np.float32).tobytes())
    raw_spike.tensor_write(t["a"], a.tobytes())
    raw_spike.tensor_write(t["b"], b.tobytes())
    addrs = [t[x].va for x in ("params", "scal", "a", "b", "c")] + [None]

    def product():
        raw_spike.execute_at(model, addrs)
        return np.frombuffer(raw_spike.tensor_read(t["c"], 0, 4 * m * n), np.float32)

    for _ in range(3):
        np.testing.assert_allclose(product(), (a @ b.T).ravel(), rtol=1e-4, atol=1e-4)
    stats = raw_spike.gemm_pack_stats()
    assert _spike.gemm_provider() in ("mkl", "reference")   # both pack weights ahead
    assert stats["packs"] == 1 and stats["hits"] == 1 and stats["packed_matrices"] == 1
    assert stats["packed_bytes"] > 0
    b2 = rng.standard_normal((n, k), np.float32)
    raw_spike.tensor_write(t["b"], b2.tobytes())
    assert raw_spike.gemm_pack_stats()["packed_matrices"] == 0
    np.testing.assert_allclose(product(), (a @ b2.T).ravel(), rtol=1e-4, atol=1e-4)
    assert raw_spike.gemm_pack_stats()["invalidations"] >= 1
