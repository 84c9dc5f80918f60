"""Circuit breaker: a failing store costs misses and counted errors, never an exception, and
the store is tried again after a delay that doubles per consecutive failure."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kvtier.store.base import StoreCounters, StoreStats, StoreUnavailable
from kvtier.store.resilient import ResilientStore
from store_support import FP, Clock, chain, payloads


class FlakyStore:
    """A dict store that raises StoreUnavailable while `down`, counting the calls it gets."""

    fingerprint = FP

    def __init__(self) -> None:
        self.pages: dict[bytes, bytes] = {}
        self.down = False
        self.calls = 0
        self._counters = StoreCounters()

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise StoreUnavailable("connection refused")

    def put(self, hashes: Sequence[bytes], payloads: Sequence[bytes]) -> int:
        self._check()
        self.pages.update(zip(hashes, payloads, strict=True))
        self._counters.add(puts=len(hashes))
        return len(hashes)

    def get(self, hashes: Sequence[bytes]) -> list[bytes | None]:
        self._check()
        out = [self.pages.get(h) for h in hashes]
        hits = sum(p is not None for p in out)
        self._counters.add(gets=len(out), hits=hits)
        return out

    def exists_prefix(self, hashes: Sequence[bytes]) -> int:
        self._check()
        return next((i for i, h in enumerate(hashes) if h not in self.pages), len(hashes))

    def delete(self, hashes: Sequence[bytes]) -> int:
        self._check()
        return sum(self.pages.pop(h, None) is not None for h in hashes)

    def stats(self) -> StoreStats:
        return self._counters.snapshot()

    def close(self) -> None:
        return None


def test_backoff_doubles_up_to_the_cap_and_resets_on_success() -> None:
    inner, clock = FlakyStore(), Clock()
    store = ResilientStore(inner, base_delay_s=1, max_delay_s=4, clock=clock)
    hashes, blobs = chain(2), payloads(2)
    inner.down = True
    attempts = []
    for t in range(20):
        clock.now = float(t)
        before = inner.calls
        assert store.get(hashes) == [None, None]
        if inner.calls > before:
            attempts.append(t)
    assert attempts == [0, 1, 3, 7, 11, 15, 19]  # delays 1, 2, 4, then capped at 4
    assert store.stats().errors == 7
    inner.down = False
    clock.now = 23.0
    assert store.put(hashes, blobs) == 2
    assert not store.is_open
    inner.down = True
    clock.now = 24.0
    store.exists_prefix(hashes)
    clock.now = 25.0  # one failure after a success: the delay is back to 1 s
    store.exists_prefix(hashes)
    assert inner.calls == 7 + 1 + 2


def test_every_call_shape_survives_an_outage() -> None:
    inner, clock = FlakyStore(), Clock()
    store = ResilientStore(inner, clock=clock)
    hashes, blobs = chain(3), payloads(3)
    store.put(hashes, blobs)
    inner.down = True
    assert store.exists_prefix(hashes) == 0
    assert store.put(hashes, blobs) == 0
    assert store.get(hashes) == [None] * 3
    assert store.delete(hashes) == 0
    assert store.stats() == StoreStats(puts=3, errors=1, refused=3, skipped=3, gets=3)
    inner.down = False
    clock.now = 100.0
    assert store.get(hashes) == blobs
    assert store.last_error == "connection refused"


def test_a_callers_mismatched_batch_is_its_own_error() -> None:
    store = ResilientStore(FlakyStore())
    with pytest.raises(ValueError, match="2 hashes but 1 payloads"):
        store.put(chain(2), payloads(1))


class ExplodingStore(FlakyStore):
    """Raises whatever it is told to from every call."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def _check(self) -> None:
        self.calls += 1
        raise self.exc


@pytest.mark.parametrize("exc", [MemoryError(), OSError(5, "I/O error"), TypeError("bug")])
def test_nothing_the_store_raises_escapes(exc: Exception) -> None:
    store = ResilientStore(ExplodingStore(exc), clock=Clock())
    hashes, blobs = chain(2), payloads(2)
    assert store.get(hashes) == [None, None]
    assert store.is_open and store.stats().errors == 1
    assert store.last_error is not None and type(exc).__name__ in store.last_error
    assert store.put(hashes, blobs) == 0  # skipped while open
    store.close()
