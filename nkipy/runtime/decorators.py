"""baremetal_jit: call a NumPy kernel on NumPy arrays and have it run on the device."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import numpy as np

from .device_kernel import DeviceKernel
from .device_tensor import DeviceTensor


def baremetal_jit(fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None,
                  build_dir: Optional[str] = None, additional_compiler_args: str = "",
                  core_id: int = 0) -> Any:
    """Decorator: each call traces the kernel for the argument shapes and
    dtypes (compiling once per signature, then from the cache), copies the
    arrays to the device, runs, and returns NumPy results like the plain
    function would. Inputs the kernel assigns into (``x[...] = ...``) are
    updated in place, as NumPy would."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(f)

        @functools.wraps(f)
        def call(*args: Any, **kwargs: Any) -> Any:
            kernel = DeviceKernel.compile_and_load(
                f, *args, name=name or f.__name__, build_dir=build_dir,
                additional_compiler_args=additional_compiler_args, core_id=core_id, **kwargs)
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            graph = kernel.graph
            inputs = {}
            for v in graph.inputs:
                array = np.asarray(bound.arguments[v.name]).astype(v.dtype, copy=False)
                inputs[v.name] = DeviceTensor.from_numpy(array, core_id=core_id)
            outputs = kernel(inputs=inputs)
            results = []
            for i, out_name in enumerate(graph.output_names):
                value = outputs[out_name].numpy()
                if i in graph.aliases:
                    target = bound.arguments[graph.inputs[graph.aliases[i]].name]
                    if isinstance(target, np.ndarray):
                        target[...] = value
                    if i >= graph.user_outputs:     # assigned into, not returned
                        continue
                    if isinstance(target, np.ndarray) and target.dtype == value.dtype:
                        value = target                # returned: the array itself, as NumPy
                results.append(value)
            if not results:
                return None
            if len(results) > 1 or graph.returns_tuple:
                return tuple(results)
            return results[0]

        call.__wrapped__ = f
        return call

    return wrap(fn) if fn is not None else wrap
