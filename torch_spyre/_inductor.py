"""``torch.compile`` for the spyre device.

``torch.compile(fn)`` with no ``backend=`` is inductor. Its entry point
(``torch._TorchCompileInductorWrapper``) hands a graph whose inputs are spyre
tensors to the device compiler instead: the graph becomes one device kernel
per input signature, built by the device library's kernel builder (the one
eager ops use, ``spike_torch._generic.compile_graph``), reading and writing
the tiled storage of its inputs and outputs. Graphs of CPU tensors still go to
inductor. A graph the device cannot compute as one kernel runs op by op, each
op an eager device op.

``backend="sendnn"`` stands in for IBM's ``sendnn`` backend, which users of
torch-spyre compare device results against: it computes a graph of CPU
tensors with the device's numerics (an emulation: the inputs are copied to
the device, the graph runs as above, the results come back).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, List, Sequence

import torch

from spike_torch import _generic

from ._debug import log
from .constants import DEVICE_NAME

__all__ = ["compile_graph", "sendnn", "register"]


def _on_device(inputs: Sequence[Any]) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == DEVICE_NAME for t in inputs)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """The compiled form of a Dynamo graph of spyre tensors."""
    log("compile", f"graph of {len(gm.graph.nodes)} nodes for the {DEVICE_NAME} device")
    return _generic.compile_graph(gm, name=f"{DEVICE_NAME}_graph")


def sendnn(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Dynamo backend ``"sendnn"``: the graph on CPU tensors, computed on the
    spyre device (inputs copied there, results copied back)."""
    run = _generic.compile_graph(gm, name="sendnn_graph")

    def call(*args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            return gm(*args)
        dev = [a.to(DEVICE_NAME) if isinstance(a, torch.Tensor) and a.device.type == "cpu"
               else a for a in args]
        out = run(*dev)
        return tuple(o.cpu() if isinstance(o, torch.Tensor) and o.device.type == DEVICE_NAME
                     else o for o in out)

    return call


def _register_sendnn() -> None:
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "sendnn" not in _COMPILER_FNS:
        register_backend(name="sendnn", compiler_fn=sendnn)


_installed: List[bool] = []


def register() -> None:
    """Routes inductor's spyre graphs to the device compiler and makes
    ``backend="sendnn"`` known (once; importing Dynamo is left to the first
    ``torch.compile`` that needs it)."""
    if _installed:
        return
    _installed.append(True)
    wrapper = torch._TorchCompileInductorWrapper
    inductor_call = wrapper.__call__

    @functools.wraps(inductor_call)
    def call(self: Any, model_: Any, inputs_: Sequence[Any]) -> Any:
        if _on_device(inputs_):
            return compile_graph(model_, inputs_)
        return inductor_call(self, model_, inputs_)

    wrapper.__call__ = call
    compile_fn = torch.compile

    @functools.wraps(compile_fn)
    def compile(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("backend") == "sendnn":
            _register_sendnn()
        return compile_fn(*args, **kwargs)

    compile.__spyre_wrapped__ = True
    if not getattr(torch.compile, "__spyre_wrapped__", False):
        torch.compile = compile
