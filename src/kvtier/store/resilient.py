"""A circuit breaker around a page store, so a failing store never stops the cache.

    closed --failure--> open --delay elapsed--> half-open --success--> closed
                         ^                          |
                         +---------failure----------+   (delay doubles, up to max_delay_s)

While the circuit is open no call reaches the store: lookups report misses (counted as
`skipped`), writes are dropped (counted as `refused`). Each failed call counts one error and
opens the circuit: `StoreUnavailable`, and any other exception the store lets out (a bug, a
MemoryError), so nothing a store does reaches the cache. The one exception raised here is a
caller's own mistake, a `ValueError` for hash and payload counts that differ. Faults of single
pages (a corrupt file, a key of another type) are handled by the stores themselves, page by page,
and never reach the breaker. The store behind the breaker comes back without intervention once
it answers again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from kvtier.store.base import (
    Buffer,
    PageHash,
    PageStore,
    StoreCounters,
    StoreStats,
    StoreUnavailable,
)

_T = TypeVar("_T")


class ResilientStore:
    """Wraps `inner`; same interface, never raises for anything the store does."""

    def __init__(
        self,
        inner: PageStore,
        *,
        base_delay_s: float = 0.5,
        max_delay_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.fingerprint = inner.fingerprint
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until: float | None = None
        self._counters = StoreCounters()
        self.last_error: str | None = None

    @property
    def is_open(self) -> bool:
        """True while calls are being skipped."""
        return self._open_until is not None and self._clock() < self._open_until

    def put(self, hashes: Sequence[PageHash], payloads: Sequence[Buffer]) -> int:
        if len(hashes) != len(payloads):
            raise ValueError(f"{len(hashes)} hashes but {len(payloads)} payloads")
        return self._call(lambda: self.inner.put(hashes, payloads), refused=len(hashes))

    def put_parts(self, hashes: Sequence[PageHash], pages: Sequence[Sequence[Buffer]]) -> int:
        if len(hashes) != len(pages):
            raise ValueError(f"{len(hashes)} hashes but {len(pages)} payloads")
        return self._call(lambda: self.inner.put_parts(hashes, pages), refused=len(hashes))

    def get_into(
        self, hashes: Sequence[PageHash], targets: Sequence[Sequence[Buffer]]
    ) -> list[bool]:
        if len(hashes) != len(targets):
            raise ValueError(f"{len(hashes)} hashes but {len(targets)} targets")
        return self._lookup(
            lambda: self.inner.get_into(hashes, targets), len(hashes), False, "results"
        )

    def get(self, hashes: Sequence[PageHash]) -> list[bytes | None]:
        return self._lookup(lambda: self.inner.get(hashes), len(hashes), None, "pages")

    def exists_prefix(self, hashes: Sequence[PageHash]) -> int:
        return self._call(lambda: self.inner.exists_prefix(hashes))

    def delete(self, hashes: Sequence[PageHash]) -> int:
        return self._call(lambda: self.inner.delete(hashes))

    def stats(self) -> StoreStats:
        """The inner store's counters plus errors, refusals and skips seen here."""
        return self.inner.stats() + self._counters.snapshot()

    def close(self) -> None:
        try:
            self.inner.close()
        except Exception as exc:
            self.last_error = _describe(exc)

    def _call(self, call: Callable[[], int], refused: int = 0) -> int:
        """`call()` through the breaker; 0 when the circuit is open or the call fails, in which
        case `refused` pages are counted as not written."""
        if self._allow():
            try:
                result = call()
            except Exception as exc:
                self._fail(exc)
            else:
                self._succeed()
                return result
        self._counters.add(refused=refused)
        return 0

    def _lookup(self, call: Callable[[], Iterable[_T]], n: int, miss: _T, what: str) -> list[_T]:
        """`call()`'s answer for each of `n` pages through the breaker; `miss` for every page
        (counted as skipped) when the circuit is open, the call fails or answers for other than
        `n` pages (`what` names its answers in the error)."""
        if self._allow():
            try:
                found = list(call())
                if len(found) != n:
                    raise StoreUnavailable(f"{len(found)} {what} for {n} hashes")
            except Exception as exc:
                self._fail(exc)
            else:
                self._succeed()
                return found
        self._counters.add(skipped=n, gets=n)
        return [miss] * n

    def _allow(self) -> bool:
        with self._lock:
            return self._open_until is None or self._clock() >= self._open_until

    def _fail(self, exc: Exception) -> None:
        with self._lock:
            self._failures += 1
            delay = min(self.base_delay_s * 2 ** (self._failures - 1), self.max_delay_s)
            self._open_until = self._clock() + delay
            self.last_error = _describe(exc)
        self._counters.add(errors=1)

    def _succeed(self) -> None:
        with self._lock:
            self._failures = 0
            self._open_until = None


def _describe(exc: Exception) -> str:
    """A failure in one line: the store's own message, or the type of anything unexpected."""
    if isinstance(exc, StoreUnavailable):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
