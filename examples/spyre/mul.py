"""A 128 x 64 float16 tensor times 2, compiled for the spyre device, against the CPU."""
import torch
import torch_spyre  # noqa: F401

torch.manual_seed(0xAFFE)
x = torch.randn(128, 64, dtype=torch.float16)
out = torch.compile(lambda t: t * 2)(x.to("spyre")).cpu()
print(out[:2, :4])
print(f"max delta vs CPU: {(out - x * 2).abs().max().item():.3e}")
assert torch.equal(out, x * 2)
