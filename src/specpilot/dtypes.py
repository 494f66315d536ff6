"""Element sizes of the dtypes specs, model configs and engines name: a leaf every layer reads."""

from __future__ import annotations

#: bytes per element of each dtype spelling engines and configs use
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "F32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "BF16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "F16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "int8": 1,
    "I8": 1,
    "uint8": 1,
    "U8": 1,
    "int32": 4,
    "I32": 4,
    "int64": 8,
    "I64": 8,
    "fp4": 0.5,
    "nvfp4": 0.5,
    "mxfp4": 0.5,
}
