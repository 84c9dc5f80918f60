"""`--json` output as strict JSON: a non-finite number is refused, never printed as NaN.

A command hands its payload to `emit`, which prints it; inside `collecting()` (how `kvtier
report` runs a command in-process) the payload object is kept instead, so the report reads the
typed result, never the printed text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kvtier.errors import KvtierError
from kvtier.payload import to_json

_COLLECTED: ContextVar[list[Any] | None] = ContextVar("collected_payloads", default=None)


def emit(payload: Any) -> None:
    """A command's `--json` result: printed, or kept when a caller is `collecting()`."""
    kept = _COLLECTED.get()
    if kept is None:
        print(json_text(payload))
    else:
        kept.append(payload)


@contextmanager
def collecting() -> Iterator[list[Any]]:
    """The payloads the commands run inside emit, in order, as objects."""
    kept: list[Any] = []
    token = _COLLECTED.set(kept)
    try:
        yield kept
    finally:
        _COLLECTED.reset(token)


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
