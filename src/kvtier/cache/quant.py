"""KV element formats, and FP8 quantization with one power-of-two scale per page per layer.

Formats: `bfloat16`, `float16`, `float32` are stored as is; `fp8_e4m3` and `fp8_e5m2` (the
names of SGLang's `--kv-cache-dtype`) are stored as `torch.uint8` holding the FP8 bits, as
SGLang's FP8 pools do (index_put is not implemented for the float8 dtypes), and are read back
through `torch.float8_e4m3fn` / `torch.float8_e5m2` views.

Scale granularity. SGLang and vLLM use one scalar scale per tensor (per layer, K and V apart),
read from the checkpoint or 1.0 by default; with no calibrated scale, values beyond the format's
range saturate and small ones flush to zero. Here each page carries its own scale for each
layer and for K and V apart, derived from the page's absolute maximum when it is written: the
error stays bounded whatever the data, and the scale travels with the page to the host tier and
to an L3 store.

Scales are powers of two, `s = 2**ceil(log2(amax / fmax))`: dividing by `s` is exact, so the only
error is the FP8 rounding of `x / s`, and when a later write into a partly filled page raises its
scale, the values already stored move by an exact power of two (they round again only if they
fall into the subnormal range).

Round-trip bound, for a page quantized with scale `s` (m mantissa bits, minimum normal
exponent emin, round to nearest):

    |x - dequantize(quantize(x))| <= max(2**-(m+1) * |x|, s * 2**(emin - m - 1))

i.e. relative half-ULP (e4m3: 2**-4, e5m2: 2**-3) for normal values and half the subnormal step
below them (e4m3: s * 2**-10, e5m2: s * 2**-17). No value saturates: `|x| / s <= fmax` by
construction. Non-finite input, and magnitudes of 2**127 or more (whose rounding could overflow
float32 on the way back), are refused. A rescale of a partly written page can at most double
the subnormal term for values already stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class StorageFormat:
    """How one KV element is stored in the cache's tensors."""

    name: str  # "bfloat16", "float16", "float32", "fp8_e4m3", "fp8_e5m2"
    itemsize: int  # bytes per stored element
    mantissa_bits: int = 0  # FP8 only
    min_normal_exp: int = 0  # FP8 only: exponent of the smallest normal value
    max_value: float = 0.0  # FP8 only: largest finite value

    @property
    def is_fp8(self) -> bool:
        return self.name.startswith("fp8")

    @property
    def relative_bound(self) -> float:
        """Half-ULP relative rounding error of a normal FP8 value."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def subnormal_bound(self) -> float:
        """Absolute rounding error below the normal range, in units of the page scale."""
        return 2.0 ** (self.min_normal_exp - self.mantissa_bits - 1)

    def storage_dtype(self) -> torch.dtype:
        import torch

        return torch.uint8 if self.is_fp8 else getattr(torch, self.name)

    def fp8_dtype(self) -> torch.dtype:
        import torch

        return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[self.name]


# e4m3fn: 3 mantissa bits, bias 7, no infinities, max 448 (OCP FP8 spec);
# e5m2: 2 mantissa bits, bias 15, IEEE-like, max 57344.
STORAGE_FORMATS: dict[str, StorageFormat] = {
    "bfloat16": StorageFormat("bfloat16", 2),
    "float16": StorageFormat("float16", 2),
    "float32": StorageFormat("float32", 4),
    "fp8_e4m3": StorageFormat("fp8_e4m3", 1, mantissa_bits=3, min_normal_exp=-6, max_value=448.0),
    "fp8_e5m2": StorageFormat(
        "fp8_e5m2", 1, mantissa_bits=2, min_normal_exp=-14, max_value=57344.0
    ),
}

_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "fp8": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}


def storage_format(name: str) -> StorageFormat:
    """Look up a KV storage format by name; unknown names fail."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in STORAGE_FORMATS:
        known = ", ".join(STORAGE_FORMATS)
        raise ValueError(f"unknown KV cache dtype {name!r}; known: {known}")
    return STORAGE_FORMATS[key]


# The scale of an all-zero page, and the smallest one handed out: a normal float32.
_MIN_SCALE_EXP = -126
_MAX_INPUT = 2.0**127


def page_scales(amax: torch.Tensor, fmt: StorageFormat) -> torch.Tensor:
    """Power-of-two scales that map each absolute maximum into the format's range."""
    import torch

    # NaN fails the comparison too; at 2**127 and above, rounding up could overflow float32
    if not bool((amax < _MAX_INPUT).all()):
        raise ValueError(
            "KV values must be finite and below 2**127 in magnitude to quantize to FP8"
        )
    ratio = amax.to(torch.float32) / fmt.max_value
    # frexp: ratio = m * 2**e with m in [0.5, 1); ceil(log2(ratio)) is e, or e - 1 when m == 0.5
    mantissa, exponent = torch.frexp(ratio)
    exponent = torch.where(mantissa == 0.5, exponent - 1, exponent)
    exponent = torch.where(ratio == 0, _MIN_SCALE_EXP, exponent).clamp(min=_MIN_SCALE_EXP)
    return torch.ldexp(torch.ones_like(ratio), exponent)


def quantize(x: torch.Tensor, scale: torch.Tensor, fmt: StorageFormat) -> torch.Tensor:
    """FP8 bits (as uint8) of `x / scale`; `scale` broadcasts against `x`."""
    import torch

    scaled = x.to(torch.float32) / scale
    return scaled.to(fmt.fp8_dtype()).view(torch.uint8)


def dequantize(bits: torch.Tensor, scale: torch.Tensor, fmt: StorageFormat) -> torch.Tensor:
    """float32 values of FP8 `bits` (uint8) times `scale`."""
    import torch

    return bits.view(fmt.fp8_dtype()).to(torch.float32) * scale


def error_bound(x: torch.Tensor, scale: torch.Tensor, fmt: StorageFormat) -> torch.Tensor:
    """The documented round-trip bound for each element of `x` quantized with `scale`."""
    import torch

    rel = x.to(torch.float32).abs() * fmt.relative_bound
    return torch.maximum(rel, scale * fmt.subnormal_bound)
