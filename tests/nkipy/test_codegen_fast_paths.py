"""Code generation choices made for speed (issue 13): each test checks the C
the compiler writes takes the fast path and that results still match NumPy.
float32 tolerances: products of a few factors, 2 ulp (rtol 3e-7)."""
import numpy as np
import pytest

from op_cases import run_kernel

RNG = np.random.default_rng(13)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("fast_paths_cache")


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -3.5e12], np.float32)


@pytest.mark.parametrize("e", [2, 3, 4, -1, -2, -3, -4])
def test_small_integer_power_is_products(e, cache):
    """x ** e for a constant e in -4..-1, 2..4 is nk_powi*: products, not powf
    (which does not vectorise); signs of zeros, infinities and NaN as NumPy's."""
    x = np.concatenate([RNG.standard_normal(300).astype(np.float32) * 3, SPECIAL])
    k, (out,) = run_kernel(lambda a: np.power(a, np.float32(e)), x, cache_dir=cache,
                           name=f"powi_{e + 4}")
    assert "nk_powi" in k.c_source and "powf(" not in k.c_source
    with np.errstate(all="ignore"):
        ref = np.power(x, np.float32(e))
    np.testing.assert_allclose(out, ref, rtol=3e-7, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))


@pytest.mark.parametrize("e", [2.5, 5.0, -5.0])
def test_other_powers_keep_powf(e, cache):
    x = np.abs(RNG.standard_normal(64).astype(np.float32)) + 0.5
    k, (out,) = run_kernel(lambda a: np.power(a, np.float32(e)), x, cache_dir=cache,
                           name=f"powf_{abs(e)}_{e < 0}")
    assert "powf(" in k.c_source and "nk_powi" not in k.c_source
    np.testing.assert_allclose(out, np.power(x, np.float32(e)), rtol=3e-7)


def test_power_by_tensor_exponent_keeps_powf(cache):
    x = np.abs(RNG.standard_normal(16).astype(np.float32)) + 0.5
    y = np.full(16, 3.0, np.float32)   # 3 everywhere, but not a constant of the graph
    k, (out,) = run_kernel(lambda a, b: np.power(a, b), x, y, cache_dir=cache, name="pow_tt")
    assert "powf(" in k.c_source
    np.testing.assert_allclose(out, np.power(x, y), rtol=3e-7)


def test_product_returned_through_reshape_is_written_into_the_output(cache):
    """(a @ b).reshape(1, M, N) returned: the GEMM writes the output, no copy
    loop after it (GPT-2's logits)."""
    a, b = RNG.standard_normal((8, 16), np.float32), RNG.standard_normal((16, 32), np.float32)
    k, (out,) = run_kernel(lambda a, b: (a @ b).reshape(1, 8, 32), a, b, cache_dir=cache,
                           name="mm_reshape_out")
    c = k.c_source
    assert "static void loop" not in c and "kc.o0 + " in c
    np.testing.assert_allclose(out, (a @ b).reshape(1, 8, 32), rtol=1e-5, atol=1e-5)


def test_elementwise_returned_through_two_reshapes_and_read_again(cache):
    """A value returned through a chain of reshapes and also read by a later
    group: written once, into the output, and read back from there."""
    x = RNG.standard_normal((4, 6), np.float32)

    def fn(x):
        y = np.exp(x)
        return y.reshape(24).reshape(2, 12), y.sum(axis=1)

    k, (o0, o1) = run_kernel(fn, x, cache_dir=cache, name="ew_reshape_out")
    assert k.c_source.count("static void loop") == 1   # exp; the sum is its own group
    np.testing.assert_allclose(o0, np.exp(x).reshape(2, 12), rtol=1e-6)
    np.testing.assert_allclose(o1, np.exp(x).sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("shape,perm", [((100, 70), (1, 0)), ((64, 32), (1, 0)),
                                        ((5, 40, 33), (0, 2, 1)), ((40, 3, 50), (2, 1, 0)),
                                        ((33, 2, 2, 48), (3, 1, 2, 0))])
def test_transposed_copy_is_tiled(shape, perm, cache):
    """A materialised transpose walks square tiles (the lines of its strided
    read stay in L1), edges included when the sizes are not multiples of the tile."""
    x = RNG.standard_normal(shape).astype(np.float32)
    k, (out,) = run_kernel(lambda a: np.transpose(a, perm).copy() + 0.0, x, cache_dir=cache,
                           name="tile_" + "_".join(map(str, shape + perm)))
    assert "td_end" in k.c_source
    np.testing.assert_array_equal(out, np.transpose(x, perm))


def test_elementwise_with_a_transposed_operand_is_tiled(cache):
    x, y = RNG.standard_normal((48, 80), np.float32), RNG.standard_normal((80, 48), np.float32)
    k, (out,) = run_kernel(lambda a, b: a * 2.0 + b.T, x, y, cache_dir=cache, name="tile_ew")
    assert "td_end" in k.c_source
    np.testing.assert_allclose(out, x * 2.0 + y.T, rtol=1e-6)


def test_row_order_loops_are_not_tiled(cache):
    x = RNG.standard_normal((64, 80), np.float32)
    k, (out,) = run_kernel(lambda a: a * 2.0 + a[:, :1], x, cache_dir=cache, name="no_tile")
    assert "td_end" not in k.c_source
    np.testing.assert_allclose(out, x * 2.0 + x[:, :1], rtol=1e-6)


def test_product_plus_a_buffer_accumulates_in_the_gemm(cache):
    """a @ b + y, y a buffer only the add reads (here another product, and a
    reduction): y is written into the add's buffer and the GEMM adds into it
    (beta 1): no elementwise loop for the add."""
    a, b = RNG.standard_normal((24, 40), np.float32), RNG.standard_normal((40, 36), np.float32)
    c, d = RNG.standard_normal((24, 8), np.float32), RNG.standard_normal((8, 36), np.float32)
    k, (out,) = run_kernel(lambda a, b, c, d: a @ b + c @ d, a, b, c, d, cache_dir=cache,
                           name="mm_acc_mm")
    assert "static void loop" not in k.c_source and k.c_source.count("1.0f, kc.o0") == 1
    np.testing.assert_allclose(out, a @ b + c @ d, rtol=1e-5, atol=1e-5)
    e = RNG.standard_normal((24, 36, 5), np.float32)
    k, (out,) = run_kernel(lambda a, b, e: e.sum(axis=2) + a @ b, a, b, e, cache_dir=cache,
                           name="mm_acc_sum")
    assert "static void loop" not in k.c_source and "1.0f, kc.o0" in k.c_source
    np.testing.assert_allclose(out, e.sum(axis=2) + a @ b, rtol=1e-5, atol=1e-5)
    f = RNG.standard_normal((24 * 36, 3), np.float32)   # y a reshape of the reduction
    k, (out,) = run_kernel(lambda a, b, f: a @ b + f.sum(axis=1).reshape(24, 36), a, b, f,
                           cache_dir=cache, name="mm_acc_reshaped")
    assert "static void loop" not in k.c_source and "1.0f, kc.o0" in k.c_source
    np.testing.assert_allclose(out, a @ b + f.sum(axis=1).reshape(24, 36), rtol=1e-5, atol=1e-5)


def test_product_plus_a_shared_or_inlined_value_keeps_the_add(cache):
    """y read elsewhere too, or y an elementwise expression fused into the add:
    the add stays a loop (beta 0)."""
    a, b = RNG.standard_normal((16, 32), np.float32), RNG.standard_normal((32, 16), np.float32)
    y = RNG.standard_normal((16, 16), np.float32)
    k, (o0, o1) = run_kernel(lambda a, b, y: (a @ b + np.exp(y), np.exp(y) * 2.0), a, b, y,
                             cache_dir=cache, name="mm_no_acc_shared")
    np.testing.assert_allclose(o0, a @ b + np.exp(y), rtol=1e-5, atol=1e-5)
    k, (o0,) = run_kernel(lambda a, b, y: a @ b + np.exp(y), a, b, y, cache_dir=cache,
                          name="mm_no_acc_inline")
    assert "0.0f, kc.t" in k.c_source and "static void loop" in k.c_source   # beta 0
    np.testing.assert_allclose(o0, a @ b + np.exp(y), rtol=1e-5, atol=1e-5)



def test_where_computes_both_values_then_selects(cache):
    """where(x > 0, x, x * w) (a per-channel PReLU) is NK_SELECT: both values
    computed, then one chosen, so the loop vectorises as a blend instead of a
    branch per element; nested selects and NaN/infinities as NumPy's."""
    x = np.resize(np.concatenate([RNG.standard_normal(244).astype(np.float32), SPECIAL]),
                  (4, 64))
    w = RNG.standard_normal((4, 1)).astype(np.float32)
    fn = lambda a, b: np.where(a > 0, a, np.where(a < -1, a * b, b - a))  # noqa: E731
    k, (out,) = run_kernel(fn, x, w, cache_dir=cache, name="select_nested")
    assert k.c_source.count("NK_SELECT(") >= 2
    with np.errstate(all="ignore"):
        ref = fn(x, w)
    np.testing.assert_array_equal(out, ref)


def test_where_over_an_integer_division_by_zero_selects_safely(cache):
    """The unselected value is computed too: an integer division by zero there
    must not trap (the division helpers guard a zero divisor) and the selected
    value is NumPy's."""
    a = np.arange(-8, 8, dtype=np.int32)
    b = np.array([1, 2, 0, 4, -1, 2, 3, 0] * 2, np.int32)
    fn = lambda p, q: np.where(q != 0, p // q, p)  # noqa: E731
    k, (out,) = run_kernel(fn, a, b, cache_dir=cache, name="select_idiv")
    assert "NK_SELECT(" in k.c_source
    with np.errstate(all="ignore"):
        ref = np.where(b != 0, a // np.where(b == 0, 1, b), a)
    np.testing.assert_array_equal(out, ref)


def test_deeply_nested_selects_compile(cache):
    """The last of 24 taps above 0.5 (else the first) nests 24 selects in one C
    expression (each intermediate has one reader, so it is inlined); each operand
    must appear once in NK_SELECT's expansion, or the text doubles per level (a
    3-D max pool with indices once took the C compiler past 18 GB)."""
    x = RNG.standard_normal((24, 64)).astype(np.float32)

    def last_above(a):
        best = a[0]
        for i in range(1, 24):
            best = np.where(a[i] > 0.5, a[i], best)
        return best

    k, (out,) = run_kernel(last_above, x, cache_dir=cache, name="select_deep")
    assert max(line.count("NK_SELECT(") for line in k.c_source.splitlines()) >= 20
    np.testing.assert_array_equal(out, last_above(x))
