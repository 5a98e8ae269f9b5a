"""Training with torch.compile(backend="nkipy"): forward and backward graphs are
compiled; SGD steps match eager PyTorch."""
import copy
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from torch_to_nkipy import init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
eager = copy.deepcopy(model)
compiled = torch.compile(model, backend="nkipy")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1)
for step in range(5):
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    for m, o in ((compiled, opt), (eager, opt_eager)):
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        if m is compiled:
            print(f"step {step}: loss {loss.item():.6f}")
diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), eager.parameters()))
print("max parameter difference vs eager after 5 steps:", diff)
assert diff < 1e-5
