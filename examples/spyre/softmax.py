"""Softmax over dim 0 of a 512 x 1024 float16 tensor: on the CPU, eagerly on
the spyre device and compiled for it (torch.compile with its default backend)."""
import torch
import torch_spyre  # noqa: F401

torch.manual_seed(0xAFFE)
x = torch.rand(512, 1024, dtype=torch.float16)
cpu = torch.softmax(x.float(), dim=0)

x_dev = x.to("spyre")
eager = torch.softmax(x_dev, dim=0).cpu()
compiled = torch.compile(lambda t: torch.softmax(t, dim=0))(x_dev).cpu()

print(f"eager    max delta vs CPU float32: {(eager.float() - cpu).abs().max().item():.3e}")
print(f"compiled max delta vs CPU float32: {(compiled.float() - cpu).abs().max().item():.3e}")
print(f"compiled == eager bit for bit: {torch.equal(compiled, eager)}")
torch.testing.assert_close(eager.float(), cpu, rtol=2e-3, atol=1e-4)
assert torch.equal(compiled, eager)
