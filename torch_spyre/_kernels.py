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

from . import _io, _layout, fallbacks
from ._debug import log
from .constants import DEVICE_NAME


class TiledStorage:
    """The policy object (see ``set_storage_policy`` for its methods)."""

    def key(self, t: torch.Tensor) -> Any:
        if t.device.type != DEVICE_NAME:
            return None
        host, layout = _io.layout_of(t)
        return (t.stride(), t.storage_offset(), tuple(host), layout)

    def wrap(self, f: Callable[..., List[torch.Tensor]], ts: Sequence[torch.Tensor],
             written: Sequence[int]) -> Tuple[Callable[..., List[torch.Tensor]],
                                              List[torch.Tensor], List[int], list]:
        specs = []
        for t in ts:
            if t.device.type == DEVICE_NAME:
                host, layout = _io.layout_of(t)
            else:   # a CPU tensor: copied to the device, in its default layout, per call
                host, layout = list(t.shape), _layout.SpyreTensorLayout(list(t.shape), t.dtype)
            full = t.device.type != DEVICE_NAME or _io.covers_base(t, host)
            specs.append((host, layout, tuple(t.shape), t.stride(), t.storage_offset(), t.dtype,
                          full))
        fakes = [torch.empty(math.prod(layout.device_size), dtype=layout.torch_dtype())
                 for _, layout, *_ in specs]
        writes = list(written)
        logical: list = []
        resized: Dict[int, Tuple[int, ...]] = {}

        def g(*raws: torch.Tensor) -> List[torch.Tensor]:
            bases, xs = [], []
            for i, (raw, (host, layout, shape, stride, offset, dtype, full)) in enumerate(
                    zip(raws, specs)):
                base = _layout.from_device_dtype(_layout.untile(raw, host, layout), dtype)
                x = base if full else base.reshape(-1).as_strided(shape, stride, offset)
                if i in writes:
                    x = x.clone()     # written: its new value is scattered back below
                bases.append(base)
                xs.append(x)
            outs = f(*xs)
            logical[:] = [(tuple(o.shape), o.dtype) for o in outs]
            res = [_layout.tile(_layout.to_device_dtype(o.contiguous()),
                                _layout.SpyreTensorLayout(list(o.shape), o.dtype)) for o in outs]
            for i in writes:
                host, layout, shape, stride, offset, dtype, full = specs[i]
                if tuple(xs[i].shape) != shape:
                    # an empty out= tensor the op resizes: a new storage of the result
                    if math.prod(shape) != 0:
                        raise ValueError(f"writes a result of shape {list(xs[i].shape)} into a "
                                         f"tensor of shape {list(shape)}")
                    resized[i] = tuple(xs[i].shape)
                    res.append(_layout.tile(_layout.to_device_dtype(xs[i].contiguous()),
                                            _layout.SpyreTensorLayout(list(xs[i].shape), dtype)))
                    continue
                if full:
                    new = xs[i].reshape(host)
                else:
                    new = bases[i].reshape(-1).as_strided_scatter(
                        xs[i], shape, stride, offset).reshape(host)
                res.append(_layout.tile(_layout.to_device_dtype(new), layout))
            return res

        g.resized = resized    # read by the plan after tracing
        return g, fakes, writes, logical

    def copy_storage(self, dst: torch.Tensor, src: torch.Tensor, nbytes: int) -> None:
        _io.copy_storage(dst, src, nbytes)

    def on_launch(self, name: str, n_in: int, n_out: int) -> None:
        log("launch", f"{name}: a device kernel on {n_in} storage(s), writing {n_out}")

    def cpu_allowed(self, name: str) -> bool:
        return name in fallbacks.FALLBACK_OPS

    def warn_fallback(self, name: str, stacklevel: int) -> None:
        log("fallback", f"{name} runs on the CPU")
        fallbacks.warn_fallback(name, stacklevel + 2)
