"""The code a max pool's lowering compiles to (MTCNN's ONet, ceil_mode): np.pad
as parallel loops (the border filled, the source copied in), and a chain of
np.maximum as one fused loop whose text grows linearly (NK_FMAX names each
operand once). Results are exact: padding copies and maximum selects."""
import numpy as np
import pytest

from op_cases import run_kernel

RNG = np.random.default_rng(48)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("pool_pad_cache")


def kernel_body(src: str) -> str:
    return src[src.index("static int kernel("):]


@pytest.mark.parametrize("pads", [((0, 0), (0, 1), (0, 1)), ((1, 2), (2, 0), (1, 1)),
                                  ((0, 0), (0, 0), (3, 0))])
def test_pad_is_parallel_border_fill_and_copy(pads, cache):
    """Every element of the output written once per kind (fill on the border,
    source inside), in parallel loops: no serial nest in the kernel body; the
    elementwise producer of the source computed in the copy (no loop of its own)."""
    x = RNG.standard_normal((3, 5, 6)).astype(np.float32)

    def f(a):
        return np.pad(a * np.float32(2.0) + np.float32(1.0), pads, constant_values=-np.inf)

    name = "pad_" + "_".join(f"{lo}{hi}" for lo, hi in pads)
    k, (out,) = run_kernel(f, x, cache_dir=cache, name=name)
    np.testing.assert_array_equal(out, f(x))
    assert "for (int64_t x" not in kernel_body(k.c_source)
    assert k.c_source.count("static void loop") == sum((lo > 0) + (hi > 0) for lo, hi in pads) + 1


def test_pad_of_empty_source_is_all_fill(cache):
    x = np.zeros((2, 0), np.float32)
    k, (out,) = run_kernel(lambda a: np.pad(a, ((1, 0), (2, 1)), constant_values=7.0), x,
                           cache_dir=cache, name="pad_empty")
    np.testing.assert_array_equal(out, np.full((3, 3), 7.0, np.float32))


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0]


def test_maximum_chain_is_one_loop_linear_text_nan_propagating(cache):
    """A 3x3 / 2 ceil-mode max pool written as pad + 9 strided views folded with
    np.maximum (the lowering of max_pool2d when its indices are dead): one loop,
    each NK_FMAX once per tap (not 2^8 copies), NaN wherever a window holds one."""
    x = RNG.standard_normal((2, 3, 10, 10)).astype(np.float32)
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, 12, replace=False)] = RNG.choice(SPECIAL, 12)

    def pool(a):
        p = np.pad(a, ((0, 0), (0, 0), (0, 1), (0, 1)), constant_values=-np.inf)
        best = None
        for i in range(3):
            for j in range(3):
                w = p[:, :, i:i + 9:2, j:j + 9:2]
                best = w if best is None else np.maximum(w, best)
        return best

    k, (out,) = run_kernel(pool, x, cache_dir=cache, name="maxchain")
    np.testing.assert_array_equal(out, pool(x))
    lines = [ln for ln in k.c_source.splitlines() if "NK_FMAX(" in ln]
    assert len(lines) == 1 and lines[0].count("NK_FMAX(") == 8 and len(lines[0]) < 2000


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_special_values(op, cache):
    """NaN in either operand gives NaN; infinities and signed zeros compare as NumPy's."""
    a = np.array([v for v in SPECIAL for _ in SPECIAL] + [1.0, -2.0], np.float32)
    b = np.array([v for _ in SPECIAL for v in SPECIAL] + [-1.0, 3.0], np.float32)
    fn = getattr(np, op)
    k, (out,) = run_kernel(lambda u, v: fn(u, v), a, b, cache_dir=cache, name=f"special_{op}")
    assert ("NK_FMAX(" if op == "maximum" else "NK_FMIN(") in k.c_source
    ref = fn(a, b)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(out[~np.isnan(ref)], ref[~np.isnan(ref)])
