"""Profiling a compiled model on the nkipy device with PyTorch's own tools.

A small transformer block trains for a few steps on the "nkipy" device,
compiled with torch.compile(backend="nkipy"). torch.profiler records the CPU
ops and the device's kernels and copies (ProfilerActivity.PrivateUse1), and the
caching allocator records its history. Written next to where it runs:

* profile_trace.json: open it in https://ui.perfetto.dev or chrome://tracing
  (the device's kernels lie on their own track, under the ops that launched them);
* memory_snapshot.pickle: drag it into https://pytorch.org/memory_viz, or
  `python -m torch.cuda._memory_viz trace_plot memory_snapshot.pickle -o memory.html`.

The losses are checked against the same model run eagerly on the CPU.
"""
import os
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import spike_torch  # noqa: E402,F401  (the "nkipy" device)
from torch_to_nkipy import init_nkipy_backend  # noqa: E402

init_nkipy_backend(nkipy_cache=os.environ.get("NKIPY_EXAMPLE_CACHE"))


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def train(model, x, steps, device):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        with record_function("train_step"):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return losses


torch.manual_seed(0)
ref = Block()
dev = Block()
dev.load_state_dict(ref.state_dict())
dev = dev.to("nkipy")
x = torch.randn(2, 16, 64)
fast = torch.compile(dev, backend="nkipy")

train(fast, x.to("nkipy"), 1, "nkipy")            # compiles forward and backward first
want = train(ref, x, 1, "cpu")

torch.nkipy._record_memory_history(stacks="python")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    got = train(fast, x.to("nkipy"), 3, "nkipy")
torch.nkipy._dump_snapshot("memory_snapshot.pickle")
torch.nkipy._record_memory_history(None)
want = train(ref, x, 3, "cpu")

print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8))
prof.export_chrome_trace("profile_trace.json")
steps = [e for e in prof.key_averages() if e.key == "train_step"][0]
print(f"train_step: {steps.count} steps, device time {steps.device_time_total:.0f} us "
      f"of {steps.cpu_time_total:.0f} us")
print("wrote profile_trace.json and memory_snapshot.pickle")
print("losses (nkipy):", [round(v, 6) for v in got])
print("losses (eager):", [round(v, 6) for v in want])
diff = max(abs(a - b) for a, b in zip(got, want))
print("max loss difference vs eager:", diff)
assert steps.device_time_total > 0, "the profile shows no device time"
assert diff < 1e-4, diff
