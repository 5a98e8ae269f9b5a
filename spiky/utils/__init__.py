"""Helpers of the original spiky's ``spiky.utils`` (``dynamic_shapes``)."""
from . import dynamic_shapes
from .dynamic_shapes import DynamicSpec

__all__ = ["dynamic_shapes", "DynamicSpec"]
