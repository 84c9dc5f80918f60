"""Model dtype names, as config.json, torch and engine flags spell them, and their element widths.

The one table of these widths in kvtier: weights, the model-dtype KV cache and reports all read it.
"""

from __future__ import annotations

from kvtier.errors import UnsupportedModel

DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "float": 4,
}


# the torch dtype each spelling names
CANONICAL = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
}


def canonical_dtype(name: str) -> str:
    """'half' -> 'float16', 'torch.float' -> 'float32'; a name not in the table is returned as
    given (lowered, without 'torch.')."""
    key = name.strip().lower().removeprefix("torch.")
    return CANONICAL.get(key, key)


def dtype_bytes(name: str) -> int:
    """Width of one element of a model dtype ("bfloat16", "torch.float16", "fp32", ...)."""
    key = name.strip().lower().removeprefix("torch.") if isinstance(name, str) else ""
    width = DTYPE_BYTES.get(key)
    if width is None:
        raise UnsupportedModel(f"unsupported model dtype {name!r}")
    return width
