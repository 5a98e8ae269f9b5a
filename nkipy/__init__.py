"""nkipy: NumPy-style kernels traced to an IR and compiled to native NEFFs.

``knob`` is the top-level export, as in the original package."""
from nkipy.core.knob import knob

__all__ = ["knob"]
