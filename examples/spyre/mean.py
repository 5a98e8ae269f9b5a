"""Mean over dim 0 of a 128 x 64 float16 tensor, compiled for the spyre
device, against the CPU."""
import torch
import torch_spyre  # noqa: F401

torch.manual_seed(0xAFFE)
x = torch.randn(128, 64, dtype=torch.float16)
out = torch.compile(lambda t: torch.mean(t, dim=0))(x.to("spyre")).cpu()
ref = torch.mean(x.float(), dim=0)
print(out[:8])
print(f"max delta vs CPU float32: {(out.float() - ref).abs().max().item():.3e}")
torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)
