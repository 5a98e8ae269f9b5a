"""DeviceTensor: a SpikeTensor that also converts from and to torch tensors."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from spike import SpikeTensor


class DeviceTensor(SpikeTensor):
    """A device tensor for nkipy kernels (a :class:`spike.SpikeTensor`)."""

    @classmethod
    def from_torch(cls, tensor: Any, name: Optional[str] = None, core_id: int = 0) -> "DeviceTensor":
        """Copies a CPU (or any) torch tensor to the device; bfloat16 is kept."""
        import torch

        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            from nkipy.core.ir import bfloat16

            array = t.view(torch.int16).numpy().view(bfloat16)
        else:
            array = t.numpy()
        return cls.from_numpy(array, name=name, core_id=core_id)

    def torch(self) -> Any:
        """The tensor's contents as a CPU torch tensor."""
        import torch

        array = self.numpy()
        if array.dtype.name == "bfloat16":
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)

    # the original spiky DeviceTensor's names for the same facts

    @property
    def nrt_ptr(self) -> int:
        """The tensor's device address (``NrtTensor.va``)."""
        return self.tensor_ref.va

    @property
    def device(self) -> int:
        """The core the tensor lives on."""
        return self.tensor_ref.core_id

    @property
    def size_bytes(self) -> int:
        """The tensor's size in bytes."""
        return self.tensor_ref.size

    def read_to_bytes(self) -> bytes:
        """The tensor's contents, copied to the host, as bytes."""
        return self.numpy().tobytes()
