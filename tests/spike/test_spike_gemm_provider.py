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
