"""Allocates a tensor on the spyre device and reads it back."""
import torch
import torch_spyre  # noqa: F401  (not needed once `make spyre-autoload` installed the entry point)

x = torch.tensor([1, 2], dtype=torch.float16, device="spyre")
print(f"x device is {x.device}")
assert x.device == torch.device("spyre", 0)
assert torch.equal(x.cpu(), torch.tensor([1, 2], dtype=torch.float16))
