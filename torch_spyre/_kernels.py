"""How eager kernels of the spyre device read and write tiled storage: the
storage policy the device library's eager ops follow
(``spike_torch._generic.set_storage_policy``).

A kernel takes the raw device arrays of its tensors' storages. Traced into it,
before the op: each array is untiled into its storage's host tensor (int64
widened from int32, bool from float16) and, for a view, the view's elements
are taken from it. After the op: each result is tiled into the default layout
of its shape, and each tensor the op writes is scattered into its storage's
host tensor, which is tiled again as a new image of that storage (copied over
it after the kernel ran). So the compiler sees, and fuses, the layout
conversions with the op.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch

from spike_torch import _generic

from . import _io, _layout, fallbacks
from ._debug import log
from .constants import DEVICE_NAME


class _SameDevice(_generic.ArgumentError):
    def __init__(self, other: torch.device) -> None:
        super().__init__("Expected all tensors to be on the same device, but found at least two "
                         f"devices, {DEVICE_NAME}:0 and {other}!")


#: the layout a tensor without elements is read in (no bytes)
_EMPTY = _layout.SpyreTensorLayout([0, 64], [0, 0], _layout.DataFormats.SEN169_FP16)


def _storage_id(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class TiledStorage:
    """The policy object (see ``set_storage_policy`` for its methods)."""

    #: a * b + c rounds the product, as two eager ops do: without it the C
    #: compiler fuses a compiled graph's multiply-add (-march=native) and the
    #: graph would differ from its ops run eagerly in the last bit
    compiler_args = "-ffp-contract=off"

    def key(self, t: torch.Tensor) -> Any:
        if t.device.type != DEVICE_NAME:
            return None
        if t.numel() == 0:
            return "empty"
        host, layout = _io.layout_of(t)
        return (t.stride(), t.storage_offset(), tuple(host), layout)

    def wrap(self, f: Callable[..., List[torch.Tensor]], ts: Sequence[torch.Tensor],
             written: Sequence[int]) -> Tuple[Callable[..., List[torch.Tensor]],
                                              List[torch.Tensor], List[int], list]:
        specs = []
        for t in ts:
            if t.numel() == 0:      # read as nothing, whatever its dtype
                host, layout = list(t.shape), _EMPTY
            elif t.device.type == DEVICE_NAME:
                host, layout = _io.layout_of(t)
            else:   # a CPU tensor: copied to the device, in its default layout, per call
                host, layout = list(t.shape), _layout.SpyreTensorLayout(list(t.shape), t.dtype)
            full = t.device.type != DEVICE_NAME or _io.covers_base(t, host)
            specs.append((host, layout, tuple(t.shape), t.stride(), t.storage_offset(), t.dtype,
                          full))
        fakes = [torch.empty(math.prod(layout.device_size), dtype=layout.torch_dtype())
                 for _, layout, *_ in specs]
        writes = list(written)
        for i in writes:
            if ts[i].device.type != DEVICE_NAME:
                raise _SameDevice(ts[i].device)
        # written tensors sharing a storage: one image of it, with every write
        # (in argument order), filed under the first of them
        first_of: Dict[int, int] = {}
        for i in writes:
            first_of.setdefault(_storage_id(ts[i]), i)
        owner = {i: first_of[_storage_id(ts[i])] for i in writes}
        images = [i for i in writes if owner[i] == i]
        logical: list = []
        resized: Dict[int, Tuple[int, ...]] = {}

        def g(*raws: torch.Tensor) -> List[torch.Tensor]:
            bases, xs = [], []
            for i, (raw, (host, layout, shape, stride, offset, dtype, full)) in enumerate(
                    zip(raws, specs)):
                if math.prod(shape) == 0:     # no elements: nothing to read
                    base = x = torch.empty(shape, dtype=dtype)
                else:
                    base = _layout.from_device_dtype(_layout.untile(raw, host, layout), dtype)
                    x = base if full else base.reshape(-1).as_strided(shape, stride, offset)
                if i in writes:
                    x = x.clone()     # written: its new value is scattered back below
                bases.append(base)
                xs.append(x)
            outs = f(*xs)
            logical[:] = [(tuple(o.shape), o.dtype) for o in outs]
            res = [_layout.tile(_layout.to_device_dtype(o.contiguous()),
                                _layout.SpyreTensorLayout(list(o.shape), o.dtype))
                   if o.numel() else torch.empty(0, dtype=torch.float16) for o in outs]
            new_base: Dict[int, torch.Tensor] = {}
            for i in writes:
                host, layout, shape, stride, offset, dtype, full = specs[i]
                if tuple(xs[i].shape) != shape:
                    # an empty out= tensor the op resizes: a new storage of the result
                    if math.prod(shape) != 0 or owner[i] != i:
                        raise ValueError(f"writes a result of shape {list(xs[i].shape)} into a "
                                         f"tensor of shape {list(shape)}")
                    resized[i] = tuple(xs[i].shape)
                    new_base[i] = xs[i].contiguous()
                    continue
                o = owner[i]
                base = new_base.get(o, bases[o])
                if full and o == i:
                    new_base[o] = xs[i].reshape(host)
                else:
                    new_base[o] = base.reshape(-1).as_strided_scatter(
                        xs[i], shape, stride, offset).reshape(specs[o][0])
            for i in images:
                layout = specs[i][1] if i not in resized else \
                    _layout.SpyreTensorLayout(list(resized[i]), specs[i][5])
                res.append(_layout.tile(_layout.to_device_dtype(new_base[i]), layout))
            return res

        g.resized = resized    # read by the plan after tracing
        return g, fakes, images, logical

    def copy_storage(self, dst: torch.Tensor, src: torch.Tensor, nbytes: int) -> None:
        _io.copy_storage(dst, src, nbytes)

    def on_launch(self, name: str, n_in: int, n_out: int) -> None:
        log("launch", f"{name}: a device kernel on {n_in} storage(s), writing {n_out}")

    def cpu_allowed(self, name: str) -> bool:
        return name in fallbacks.FALLBACK_OPS

    def warn_fallback(self, name: str, stacklevel: int) -> None:
        log("fallback", f"{name} runs on the CPU")
        fallbacks.warn_fallback(name, stacklevel + 2)
