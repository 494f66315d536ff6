"""Model shapes: what memory depends on, read from config.json and safetensors headers."""

from specpilot.models.shape import ModelShape, dtype_bytes, load_model_shape

__all__ = ["ModelShape", "dtype_bytes", "load_model_shape"]
