"""The nkipy extras as in the original's ``nkipy.core.tensor_apis`` (backward compatible)."""
from nkipy.core.ops import (constant, conv2d, conv3d, full, log_softmax, rms_norm, softmax, topk,
                            zeros)

__all__ = ["constant", "topk", "rms_norm", "softmax", "log_softmax", "conv2d", "conv3d", "zeros",
           "full"]
