"""GGUF file types and their bits per weight: what a model file of a given size and parameter count can be."""

from __future__ import annotations

# Bits per weight of common GGUF file types (whole-file averages, as llama.cpp's quantize reports them).
BITS_PER_WEIGHT = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q5_K_S": 5.54,
                   "Q5_0": 5.5, "Q4_K_M": 4.89, "Q4_K_S": 4.58, "Q4_0": 4.5, "Q3_K_M": 3.91, "Q2_K": 3.35,
                   "IQ4_XS": 4.25}
# How far a real file may be from parameters x bits per weight: mixes keep some tensors at higher precision.
SIZE_TOLERANCE = 0.30


def weights_bytes(params_b: float, quantization: str) -> float | None:
    """Expected file size in bytes, or None for an unknown file type."""
    bits = BITS_PER_WEIGHT.get(quantization.upper())
    return params_b * 1e9 * bits / 8 if bits else None
