"""nkipy.runtime: compile traced kernels to NEFFs and run them on the device."""
from .decorators import baremetal_jit
from .device_kernel import DeviceKernel
from .device_tensor import DeviceTensor
from .utils import is_neuron_compatible

__all__ = ["DeviceKernel", "DeviceTensor", "baremetal_jit", "is_neuron_compatible"]
