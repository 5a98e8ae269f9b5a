"""torch.compile(backend="nkipy") on a small MLP, checked against eager PyTorch."""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from torch_to_nkipy import init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8, bias=False)
        self.fc2 = nn.Linear(8, 4, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.fc2(self.act_fn(self.fc1(x)))


torch.manual_seed(0)
model = MLP()
compiled = torch.compile(model, backend="nkipy", fullgraph=True, dynamic=False)
x = torch.randn(2, 4)           # CPU tensors today; "nkipy" device tensors once spike_torch lands
with torch.no_grad():
    out = compiled(x)
    ref = model(x)
print(out)
print("max abs difference vs eager:", (out - ref).abs().max().item())
assert torch.allclose(out, ref, atol=1e-5)
