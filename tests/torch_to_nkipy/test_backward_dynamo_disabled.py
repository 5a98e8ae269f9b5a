"""A backward compiled lazily from inside a compiled function (``loss.backward()``
in the function: a graph break) is built and run with Dynamo off, as torch's own
aot_autograd backends do; else Dynamo traces the kernel build (nkipy's tracer)."""
from __future__ import annotations

import copy
import os

import torch
import torch._dynamo.convert_frame as convert_frame

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the packages of the backend's own code (kernel build, tracer, runtime glue)
BACKEND_DIRS = ("torch_to_nkipy", "nkipy", "spike", "spike_torch", "spiky")


def test_backward_built_without_dynamo_tracing_the_backend(backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    x = torch.randn(4, 8)

    def step(m, x):
        m.zero_grad(set_to_none=True)
        loss = m(x).square().mean()
        loss.backward()
        return loss.detach(), m[0].weight.grad

    ref_model = copy.deepcopy(model)
    ref_loss, ref_grad = step(ref_model, x)
    seen = getattr(convert_frame, "input_codes", None)   # the frames Dynamo was handed
    if seen is not None:
        seen.clear()
    loss, grad = torch.compile(step, backend="nkipy", dynamic=False)(model, x)
    torch.testing.assert_close(loss, ref_loss)
    # before the fix the gradient came out wrong, besides the wasted tracing
    torch.testing.assert_close(grad, ref_grad)
    if seen is not None:
        ours = [c().co_filename for c in seen.seen if c() is not None]
        roots = tuple(os.path.join(ROOT, d) + os.sep for d in BACKEND_DIRS)
        ours = [f for f in ours if f.startswith(roots)]
        assert ours == [], ours
