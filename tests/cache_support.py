"""Test doubles for the tiered cache: storages that carry a tag per page, a transfer engine whose
copies land only when told, and an in-memory L3 store."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvtier.cache import PageStorage, Tier, TieredCache


class TaggedStorage:
    """A PageStorage whose page "bytes" are one tag (the page key), so a test can check that
    every copy the cache makes lands on the right page."""

    def __init__(self, tier: Tier, num_pages: int) -> None:
        self.tier = tier
        self.num_pages = num_pages
        self.tags: list[bytes | None] = [None] * num_pages

    def copy_pages(
        self, src_pages: Sequence[int], dst: PageStorage, dst_pages: Sequence[int]
    ) -> None:
        assert isinstance(dst, TaggedStorage) and len(src_pages) == len(dst_pages)
        for s, d in zip(src_pages, dst_pages, strict=True):
            dst.tags[d] = self.tags[s]

    def read_page_bytes(self, pages: Sequence[int]) -> list[bytes]:
        return [self.tags[p] or b"" for p in pages]

    def write_page_bytes(self, pages: Sequence[int], blobs: Sequence[bytes]) -> None:
        for p, b in zip(pages, blobs, strict=True):
            self.tags[p] = b

    def fill(self, pages: Sequence[int], tags: Sequence[bytes]) -> None:
        """What a forward pass does: write the KV of these keys into these pages."""
        self.write_page_bytes(pages, tags)


PageNumbers = Sequence[int]


class ManualHandle:
    def __init__(self, copy: Callable[[], None]) -> None:
        self._copy: Callable[[], None] | None = copy

    def done(self) -> bool:
        return self._copy is None

    def wait(self) -> None:
        if self._copy is not None:
            self._copy()
            self._copy = None

    def wait_layer(self, layer: int) -> None:
        self.wait()


class ManualTransfer:
    """Copies land when `complete` (or a handle's wait) says so, oldest first."""

    def __init__(self) -> None:
        self.handles: list[ManualHandle] = []

    def submit(
        self, src: PageStorage, src_pages: PageNumbers, dst: PageStorage, dst_pages: PageNumbers
    ) -> ManualHandle:
        s, d = list(src_pages), list(dst_pages)
        handle = ManualHandle(lambda: src.copy_pages(s, dst, d))
        self.handles.append(handle)
        return handle

    def complete(self, n: int) -> None:
        for handle in self.handles[:n]:
            handle.wait()
        self.handles = [h for h in self.handles if not h.done()]

    def close(self) -> None:
        self.complete(len(self.handles))


class DictStore:
    """An unbounded in-memory PageStoreHook."""

    def __init__(self) -> None:
        self.blobs: dict[bytes, bytes] = {}

    def save(self, hashes: Sequence[bytes], blobs: Sequence[bytes]) -> None:
        self.blobs.update(zip(hashes, blobs, strict=True))

    def contains_prefix(self, hashes: Sequence[bytes]) -> int:
        return next((n for n, h in enumerate(hashes) if h not in self.blobs), len(hashes))

    def load(self, hashes: Sequence[bytes]) -> list[bytes | None]:
        return [self.blobs.get(h) for h in hashes]


def check_tags(cache: TieredCache) -> None:
    """Every settled page of every node holds its own key on each tier it lives on."""
    dev = cache.device
    host = cache.host
    assert isinstance(dev, TaggedStorage)
    for node in cache.tree.nodes():
        if node.pinned:
            continue  # a copy is in flight: its destination is not settled yet
        if node.device is not None:
            assert [dev.tags[p] for p in node.device] == node.keys, f"device data of {node!r}"
        if node.host is not None:
            assert isinstance(host, TaggedStorage)
            assert [host.tags[p] for p in node.host] == node.keys, f"host data of {node!r}"
