"""The store's options and their range checks, in one place for every reader (`open_store`, the
stores, the SGLang backend's launch config): a value out of range is refused when the options
are read, in one line naming it, never discovered later as every put failing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kvtier.errors import KvtierError

# Beyond these a value is a typo, not a setting: a TTL of 10^9 s is 31.7 years (omit ttl_s for
# none; Redis refuses expiries past 2^63 ms); a socket timeout of an hour already stalls SGLang's
# backup and prefetch threads that long on a dead server; no disk holds 2^63 bytes.
MAX_TTL_S = 10**9
MAX_TIMEOUT_S = 3600.0
MAX_CAPACITY_BYTES = 2**63 - 1


def check_capacity(value: object) -> int | None:
    return _optional_count(
        value, MAX_CAPACITY_BYTES, "capacity_bytes must be a positive integer up to 2^63 - 1"
    )


def check_ttl(value: object) -> int | None:
    return _optional_count(
        value,
        MAX_TTL_S,
        f"ttl_s must be a whole number of seconds from 1 to {MAX_TTL_S:,} (31.7 years; "
        "omit it for no expiry)",
    )


def _optional_count(value: object, limit: int, refusal: str) -> int | None:
    """`value` when it is None or an integer from 1 to `limit`; else `refusal`, naming it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
        raise KvtierError(f"{refusal}, got {value!r}")
    return value


def check_timeout(value: object, name: str = "timeout_s") -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_TIMEOUT_S
    ):
        raise KvtierError(
            f"{name} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, "
            f"got {value!r}"
        )
    return float(value)


def check_url_text(url: str) -> None:
    """A URL is used exactly as given: no whitespace at its ends, no control character."""
    if url != url.strip():
        raise KvtierError(f"store URL {url!r} has whitespace at its start or end")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise KvtierError(f"store URL {url!r} holds a control character")


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """`open_store`'s options, each checked when the record is built: `capacity_bytes` caps a
    disk store (LRU eviction), `ttl_s` expires Redis keys, `timeout_s` bounds a Redis call."""

    capacity_bytes: int | None = None
    ttl_s: int | None = None
    timeout_s: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity_bytes", check_capacity(self.capacity_bytes))
        object.__setattr__(self, "ttl_s", check_ttl(self.ttl_s))
        object.__setattr__(self, "timeout_s", check_timeout(self.timeout_s))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> StoreOptions:
        """The options among `values` (a parsed config: other keys are not read), checked."""
        return cls(**{name: values[name] for name in STORE_OPTION_KEYS if name in values})


STORE_OPTION_KEYS = tuple(f.name for f in fields(StoreOptions))
