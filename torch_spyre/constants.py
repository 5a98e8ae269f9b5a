"""Names of the spyre device."""

#: the PrivateUse1 device name torch_spyre registers
DEVICE_NAME = "spyre"
