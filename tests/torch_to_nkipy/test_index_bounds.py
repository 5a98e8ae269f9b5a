"""Out-of-range indices raise, eagerly on the device and compiled (CPU and
device inputs), as on the CPU, instead of being clamped: the kernel checks
every traced index and fails with an IndexError naming the bad value, the axis
and the ATen op (spike.NrtIndexError, an IndexError and an NrtError). Negative
indices count from the end where PyTorch allows them (take, x[i], index_put)
and are errors where it refuses them (gather, scatter, index_select,
embedding)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import spike

X = torch.arange(7.0)

OPS = {
    "take": (lambda x, i: torch.take(x, i), True),
    "getitem": (lambda x, i: x[i], True),
    "index_put": (lambda x, i: x.clone().index_put_((i,), torch.full(i.shape, 5.0,
                                                                        device=x.device)), True),
    "index_put_acc": (lambda x, i: x.clone().index_put_((i,), torch.full(
        i.shape, 5.0, device=x.device), accumulate=True), True),
    "index_select": (lambda x, i: torch.index_select(x, 0, i), False),
    "gather": (lambda x, i: torch.gather(x, 0, i), False),
    "take_along_dim": (lambda x, i: torch.take_along_dim(x, i), False),
    "embedding": (lambda x, i: F.embedding(i, x[:, None]), False),
    "scatter": (lambda x, i: x.clone().scatter_(0, i, torch.full(i.shape, 5.0,
                                                                   device=x.device)), False),
    "scatter_add": (lambda x, i: x.clone().scatter_add(0, i, torch.full(i.shape, 5.0,
                                                                          device=x.device)),
                    False),
}


def _run(mode, fn, x, i):
    if mode == "eager":
        return fn(x.to("nkipy"), i.to("nkipy")).cpu()
    torch._dynamo.reset()
    c = torch.compile(fn, backend="nkipy")
    if mode == "compiled_cpu":
        return c(x, i)
    return c(x.to("nkipy"), i.to("nkipy")).cpu()


MODES = ["eager", "compiled_cpu", "compiled_device"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("bad", [9, -9, 7])
def test_out_of_range_index_raises(backend, name, mode, bad):
    fn, _ = OPS[name]
    i = torch.tensor([1, bad, 2])
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        fn(X, i)                       # the CPU refuses it ...
    with pytest.raises(type(cpu.value)) as info:
        _run(mode, fn, X, i)           # ... and so does the device, with an error of its type
    assert isinstance(info.value, IndexError)   # NrtIndexError is a RuntimeError too
    msg = str(info.value)
    if isinstance(info.value, spike.NrtIndexError):
        assert f"index {bad} is out of bounds for axis 0 with size 7 (in aten." in msg, msg


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(OPS))
def test_negative_index_as_pytorch(backend, name, mode):
    fn, negative_ok = OPS[name]
    i = torch.tensor([-1, 0])
    if negative_ok:
        torch.testing.assert_close(_run(mode, fn, X, i), fn(X, i))
        return
    with pytest.raises((IndexError, RuntimeError)):
        fn(X, i)
    with pytest.raises(IndexError, match=r"index -1 is out of bounds for axis 0 with size 7"):
        _run(mode, fn, X, i)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(OPS))
def test_in_range_indices_unchanged(backend, name, mode):
    fn, _ = OPS[name]
    i = torch.tensor([6, 0, 3])
    torch.testing.assert_close(_run(mode, fn, X, i), fn(X, i))


def test_large_int64_index_is_not_narrowed_into_range(backend):
    """2**32 + 1 would be 1 in 32 bits: checked before it is narrowed."""
    i = torch.tensor([2 ** 32 + 1])
    with pytest.raises(IndexError, match=r"index 4294967297 is out of bounds"):
        _run("compiled_cpu", lambda x, i: torch.take(x, i), X, i)


def test_a_bad_index_writes_nothing_out_of_bounds(backend):
    """index_put with a bad index fails and leaves the input as it was; the
    device's memory past the tensor is untouched."""
    big = torch.arange(64.0, device="nkipy")
    x = big[8:15]                               # 7 elements inside a larger allocation
    before = big.cpu().clone()
    with pytest.raises(IndexError):
        x.index_put_((torch.tensor([100], device="nkipy"),), torch.tensor([-1.0], device="nkipy"))
    assert torch.equal(big.cpu(), before)
