"""The pages a disk store's process knows are held, so its probe asks no file about them."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from kvtier.store.base import PageHash

INDEX_LIMIT = 1 << 18  # pages a store remembers as held (about 30 MB of 32-byte hashes)


class PageIndex:
    """The pages this process wrote or read whole, so a probe asks no file about them.

    It is a hint, not the truth: another process may remove or damage a page since, and then
    the read that follows the probe misses it and the page is forgotten. A fingerprint
    directory removed and made again (a clear, from any process) is another directory: the
    index starts afresh. Bounded: past `limit` pages the oldest entries are dropped (a dropped
    page is probed from its header again).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.directory: tuple[int, int, int] | None = None  # where the pages were seen
        self._held: dict[PageHash, None] = {}
        self._lock = threading.Lock()

    def check(self, directory: tuple[int, int, int] | None) -> None:
        """Forget everything unless the fingerprint directory is still `directory`."""
        if directory != self.directory:
            with self._lock:
                self._held.clear()
                self.directory = directory

    def add(self, page_hash: PageHash) -> None:
        with self._lock:
            self._held[page_hash] = None
            if len(self._held) > self.limit:
                del self._held[next(iter(self._held))]

    def forget(self, hashes: Iterable[PageHash]) -> None:
        with self._lock:
            for page_hash in hashes:
                self._held.pop(page_hash, None)

    def prefix(self, hashes: Sequence[PageHash]) -> int:
        """How many leading pages of `hashes` are held."""
        held = self._held
        for i, page_hash in enumerate(hashes):
            if page_hash not in held:
                return i
        return len(hashes)
