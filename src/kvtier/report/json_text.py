"""`--json` output as strict JSON: a non-finite number is refused, never printed as NaN."""

from __future__ import annotations

import json
import math
from typing import Any

from kvtier.errors import KvtierError
from kvtier.payload import to_json


def json_text(data: Any) -> str:
    """`data` (a payload dataclass, or JSON-ready data) as indented JSON; NaN or Infinity
    (which JSON has no spelling for) is an error."""
    data = to_json(data)
    try:
        return json.dumps(data, indent=2, allow_nan=False)
    except ValueError:
        raise KvtierError(
            f"a result is not a finite number ({_first_non_finite(data)}); no JSON printed"
        ) from None


def _first_non_finite(data: Any, path: str = "") -> str:
    stack: list[tuple[Any, str]] = [(data, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where.lstrip(".") or "the value"
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return "a value"
