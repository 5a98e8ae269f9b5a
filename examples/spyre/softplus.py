"""Softplus (beta 1, threshold 20) on a 128 x 64 float16 tensor, compiled for
the spyre device, against the CPU."""
import torch
import torch_spyre  # noqa: F401

torch.manual_seed(0xAFFE)
x = torch.randn(128, 64, dtype=torch.float16) * 8


def fn(t):
    return torch.nn.functional.softplus(t, beta=1, threshold=20)


out = torch.compile(fn)(x.to("spyre")).cpu()
ref = fn(x.float())
print(out[:2, :4])
print(f"max delta vs CPU float32: {(out.float() - ref).abs().max().item():.3e}")
torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)
