"""Random ATen ops lowered onto the device (spike_torch.lowering.aten_random,
torch_to_nkipy.random): Philox4x32-10 against its published known answers,
the kernel's values bit-for-bit against the NumPy reference for the same
seed, distributions by mean / variance / range on large samples, dropout's
mask against its output, and whole graphs lowered (no CPU partition)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import spike_torch  # noqa: F401  (registers the device)
from spike_torch.lowering import aten_random as R
from spike_torch.lowering.codegen import torch_to_numpy

N = 1 << 16
DEVICES = ["cpu", "nkipy"]


def test_philox_known_answers() -> None:
    """Philox4x32-10's known-answer vectors (Random123's kat_vectors)."""
    m = 0xFFFFFFFF
    assert R.philox4x32(0, 0, 0, 0, 0, 0) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert R.philox4x32(m, m, m, m, m, m) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert R.philox4x32(0xA4093822, 0x299F31D0, 0x243F6A88, 0x85A308D3, 0x13198A2E,
                        0x03707344) == (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)
    # elementwise over arrays as over ints
    c = np.array([0, m, 0x243F6A88], dtype=np.int64)
    w = R.philox4x32(np.int64(0), np.int64(0), c, 0, 0, 0)
    assert [int(v) for v in w[0]] == [R.philox4x32(0, 0, int(x))[0] for x in c]


def _stats(fn, x, before=None):
    import spiky

    before = spiky.get_stats()
    y = fn(x)
    after = spiky.get_stats()
    assert after.graphs_partitioned == before.graphs_partitioned, after.cpu_partition_ops
    return y


@pytest.mark.parametrize("device", DEVICES)
def test_uniform_bits_equal_numpy_reference(device, backend) -> None:
    """The kernel's rand_like is the NumPy reference's for the seed drawn."""
    from torch_to_nkipy.random import draw_seed

    x = torch.zeros(3, 1000, device=device)
    compiled = torch.compile(lambda t: torch.rand_like(t), backend="nkipy")
    torch.manual_seed(11)
    y = _stats(compiled, x)
    torch.manual_seed(11)
    seed = draw_seed(torch.device(device))
    ref = R.rand_like(torch_to_numpy(seed), torch_to_numpy(x))
    assert y.device.type == device
    np.testing.assert_array_equal(torch_to_numpy(y), ref)
    assert torch_to_numpy(y).min() >= 0.0 and torch_to_numpy(y).max() < 1.0


def _moments(y):
    y = y.cpu().double()
    return y.mean().item(), y.var().item()


# name -> (function of an (N,) float32 input, fill, check(y))
CASES = {
    "rand_like": (lambda t: torch.rand_like(t), 0.0,
                  lambda y, m, v: y.min() >= 0 and y.max() < 1 and abs(m - 0.5) < 0.01
                  and abs(v - 1 / 12) < 0.005),
    "randn_like": (lambda t: torch.randn_like(t), 0.0,
                   lambda y, m, v: abs(m) < 0.02 and abs(v - 1) < 0.03),
    "rand": (lambda t: torch.rand(N, device=t.device) + t, 0.0,
             lambda y, m, v: y.min() >= 0 and y.max() < 1 and abs(m - 0.5) < 0.01),
    "randn": (lambda t: torch.randn(N, device=t.device) + t, 0.0,
              lambda y, m, v: abs(m) < 0.02 and abs(v - 1) < 0.03),
    "uniform": (lambda t: t.clone().uniform_(2.0, 3.0), 0.0,
                lambda y, m, v: y.min() >= 2 and y.max() < 3 and abs(m - 2.5) < 0.01),
    "normal": (lambda t: t.clone().normal_(2.0, 3.0), 0.0,
               lambda y, m, v: abs(m - 2) < 0.05 and abs(v - 9) < 0.3),
    "normal_tensor_float": (lambda t: torch.normal(t, 2.0), 1.0,
                            lambda y, m, v: abs(m - 1) < 0.05 and abs(v - 4) < 0.15),
    "normal_tensor_tensor": (lambda t: torch.normal(t, t), 2.0,
                             lambda y, m, v: abs(m - 2) < 0.05 and abs(v - 4) < 0.15),
    "normal_float_float": (lambda t: torch.normal(2.0, 3.0, (N,), device=t.device) + t, 0.0,
                           lambda y, m, v: abs(m - 2) < 0.05 and abs(v - 9) < 0.3),
    "rrelu": (lambda t: torch.nn.functional.rrelu(t, training=True), -1.0,
              lambda y, m, v: y.max() <= -0.125 and y.min() >= -1 / 3 - 1e-6
              and abs(m + (0.125 + 1 / 3) / 2) < 0.005),
    "exponential": (lambda t: t.clone().exponential_(2.0), 0.0,
                    lambda y, m, v: y.min() >= 0 and abs(m - 0.5) < 0.01
                    and abs(v - 0.25) < 0.02),
    "cauchy": (lambda t: t.clone().cauchy_(1.0, 2.0), 0.0,
               lambda y, m, v: abs(y.median().item() - 1.0) < 0.05
               and abs((y.cpu() < 3.0).double().mean().item() - 0.75) < 0.01),
    "log_normal": (lambda t: t.clone().log_normal_(0.0, 0.5), 0.0,
                   lambda y, m, v: y.min() > 0 and abs(m - math.exp(0.125)) < 0.01),
    "geometric": (lambda t: t.clone().geometric_(0.3), 0.0,
                  lambda y, m, v: y.min() >= 1 and torch.equal(y, y.round())
                  and abs(m - 1 / 0.3) < 0.05),
    "bernoulli_p": (lambda t: torch.bernoulli(t, 0.3), 0.0,
                    lambda y, m, v: set(torch.unique(y).tolist()) <= {0.0, 1.0}
                    and abs(m - 0.3) < 0.01),
    "bernoulli_tensor": (lambda t: torch.bernoulli(t), 0.7,
                         lambda y, m, v: set(torch.unique(y).tolist()) <= {0.0, 1.0}
                         and abs(m - 0.7) < 0.01),
    "randint_like": (lambda t: torch.randint_like(t, 3, 9), 0.0,
                     lambda y, m, v: y.min() == 3 and y.max() == 8 and torch.equal(y, y.round())
                     and abs(m - 5.5) < 0.03),
    "randint": (lambda t: torch.randint(0, 10, (N,), device=t.device), 0.0,
                lambda y, m, v: y.dtype == torch.int64 and y.min() == 0 and y.max() == 9
                and abs(m - 4.5) < 0.05),
    "dropout": (lambda t: torch.nn.functional.dropout(t, 0.25, True), 1.0,
                lambda y, m, v: set(torch.unique(y).tolist()) <= {0.0, float(torch.tensor(4 / 3))}
                and abs((y.cpu() == 0).double().mean().item() - 0.25) < 0.01),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_distribution(name, device, backend) -> None:
    """Lowered (no CPU partition), within loose bounds on 2^16 draws,
    reproducible under torch.manual_seed, different on the next call."""
    fn, fill, check = CASES[name]
    x = torch.full((N,), fill, device=device)
    compiled = torch.compile(fn, backend="nkipy")
    torch.manual_seed(5)
    y = _stats(compiled, x)
    assert y.device.type == device and y.shape == (N,)
    m, v = _moments(y)
    assert check(y.cpu(), m, v), (name, m, v)
    torch.manual_seed(5)
    assert torch.equal(compiled(x).cpu(), y.cpu())
    assert not torch.equal(compiled(x).cpu(), y.cpu())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_rand_like_narrow_and_wide_dtypes(dtype, backend) -> None:
    """Uniform draws stay below 1 in every float dtype (as many bits as fit)."""
    x = torch.zeros(N, dtype=dtype)
    y = torch.compile(lambda t: torch.rand_like(t), backend="nkipy")(x)
    assert y.dtype == dtype and y.min() >= 0 and y.max() < 1
    assert abs(y.double().mean().item() - 0.5) < 0.01


@pytest.mark.parametrize("device", DEVICES)
def test_native_dropout_mask_matches_output(device, backend) -> None:
    """The bool mask is where the output is kept, the output x / (1 - p) there."""
    x = torch.rand(N, device=device) + 0.5
    out, mask = torch.compile(lambda t: torch.ops.aten.native_dropout(t, 0.4, True),
                              backend="nkipy")(x)
    assert mask.dtype == torch.bool and out.dtype == x.dtype
    out, mask, x = out.cpu(), mask.cpu(), x.cpu()
    torch.testing.assert_close(out, torch.where(mask, x / 0.6, torch.zeros_like(x)))
    assert abs(mask.double().mean().item() - 0.6) < 0.01


def test_seeded_target_runs_numpy_reference_on_tensors() -> None:
    """An ``nkipy_rng`` FX target called on tensors (outside a kernel) is the
    NumPy reference."""
    from torch_to_nkipy.random import _target

    seed = torch.tensor(123, dtype=torch.int64)
    x = torch.zeros(4, 5)
    got = _target("rand_like")(seed, x)
    np.testing.assert_array_equal(got.numpy(), R.rand_like(np.int64(123), x.numpy()))
    out, mask = _target("native_dropout")(seed, x + 1, 0.5, True)
    assert mask.dtype == torch.bool and torch.equal(out, mask.float() * 2.0)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_backward_uses_the_forward_mask(device, backend) -> None:
    """Under autograd the forward's mask (saved for the backward) is the one its
    output used: the gradient of sum(dropout(x)) is the output divided by x."""
    x = (torch.rand(64, 8) + 0.5).to(device).requires_grad_(True)
    out = torch.compile(lambda t: torch.nn.functional.dropout(t, 0.25, True),
                        backend="nkipy")(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), out.detach().cpu() / x.detach().cpu())


def test_dynamic_sizes_draw_per_size(backend) -> None:
    """A dynamic graph with a random op compiles per size (not padded) and
    draws fresh values per call."""
    c = torch.compile(lambda t: torch.rand_like(t) + t, backend="nkipy", dynamic=True)
    for n in (5, 7, 33):
        y1, y2 = c(torch.zeros(n, 8)), c(torch.zeros(n, 8))
        assert y1.shape == (n, 8) and y1.min() >= 0 and y1.max() < 1
        assert not torch.equal(y1, y2)


def test_element_indices_past_int32_are_64_bit() -> None:
    """Tensors of more than 2^31 elements get distinct counters: the element
    index random_words builds is an int64 iota (no int32 node that would wrap
    and repeat values). Traced only: nothing of 2^31 elements is allocated."""
    from nkipy.core.dtypes import wide_dtypes
    from nkipy.core.trace import trace

    n = 2 ** 31 + 4
    with wide_dtypes():
        g = trace(lambda s: R.random_words(s, (n,))[3], np.int64(7))
    iotas = [nd for nd in g.nodes if nd.op == "iota"]
    assert len(iotas) == 1 and iotas[0].outputs[0].dtype == np.int64
    assert iotas[0].outputs[0].shape == (n,)
    assert all(o.dtype != np.int32 for nd in g.nodes for o in nd.outputs)


def test_philox_counters_past_int32_compiled(tmp_path) -> None:
    """The kernel's Philox of indices around 2^31 and 2^32 (built as
    random_words builds them, an arange) equals the NumPy reference bit for
    bit, and index i + 2^31 / i + 2^32 gives other words than index i."""
    from nkipy.core import ops
    from nkipy.core.dtypes import wide_dtypes
    from nkipy.core.philox import philox_word
    from nkipy.core.trace import trace
    from nkipy.runtime import DeviceKernel, DeviceTensor

    starts = (0, 2 ** 31 - 2, 2 ** 32 - 2, 2 ** 32 + 2 ** 31)

    def k(s):
        return tuple(w for a in starts for w in ops.philox(s, ops.arange(a, a + 4, dtype=np.int64)))

    seed = np.asarray(12345, dtype=np.int64)
    with wide_dtypes():
        g = trace(k, seed)
    kern = DeviceKernel.from_graph(g, build_dir=str(tmp_path))
    outs = kern(inputs={g.inputs[0].name: DeviceTensor.from_numpy(seed)})
    got = [outs[nm].numpy() for nm in kern.graph.output_names]
    words = {}
    for j, a in enumerate(starts):
        idx = np.arange(a, a + 4, dtype=np.int64)
        for w in range(4):
            np.testing.assert_array_equal(got[4 * j + w], philox_word(seed, idx, w))
        words[a] = np.stack(got[4 * j:4 * j + 4])
    for a in (2 ** 31 - 2, 2 ** 32 - 2):   # indices 0, 1 against 2^31 (2^32) + 0, 1
        assert not (words[0][:, :2] == words[a][:, 2:]).any()
