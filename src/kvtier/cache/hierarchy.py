"""The tiered cache an engine embeds: radix tree + device/host page pools + copies between them.

Mirrors SGLang's HiRadixCache (mem_cache/hiradix_cache.py) and HiCacheController
(managers/cache_controller.py), v0.5.x:
  * write policies: write_through (back up to the host on insert, threshold 1),
    write_through_selective (once a node's hit count reaches 2), write_back (back up when evicted
    from the device; eviction waits for the copy);
  * device eviction frees the device run of a backed-up leaf (it stays on the host) or drops it;
  * host eviction drops host-only leaves, handing them to the L3 store when one is configured;
  * load_back copies a matched host-only suffix to newly allocated device pages, all or nothing.
Pages with a copy in flight are pinned (unevictable) until `poll()` sees the copy complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvtier.cache.eviction import EvictionPolicy
from kvtier.cache.keys import PageKey, TokenPages, as_run, store_key
from kvtier.cache.pages import PageSeq, join
from kvtier.cache.pool import PagePool, RunPool
from kvtier.cache.radix import InsertResult, MatchResult, RadixTree, TreeNode
from kvtier.cache.storage import ImmediateTransfer, Tier
from kvtier.cache.types import (
    WRITE_THRESHOLD,
    CacheCounters,
    CacheSizes,
    EvictResult,
    LoadBackHandle,
    WritePolicy,
)

# the result types live in kvtier.cache.types; importing them from here keeps working
__all__ = [
    "CacheCounters",
    "CacheSizes",
    "EvictResult",
    "LoadBackHandle",
    "TieredCache",
    "WritePolicy",
]

if TYPE_CHECKING:
    from kvtier.cache.storage import PageStorage, PageStoreHook, TransferEngine, TransferHandle

_new = tuple.__new__


class _Copy:
    """A submitted copy and the nodes it pins."""

    __slots__ = ("handle", "nodes")

    def __init__(self, handle: TransferHandle, nodes: list[TreeNode]) -> None:
        self.handle = handle
        self.nodes = nodes


class TieredCache:
    """Radix KV cache over a device pool, an optional host pool and an optional L3 store.

    With AccountingStorage and ImmediateTransfer it moves no bytes (the simulator's mode); with
    tensor storages and an asynchronous TransferEngine it moves real KV. One thread (the
    scheduler's) drives it; copies complete on their own, and `poll()` takes note of them.

    `device` / `host` give the tiers' sizes (num_pages) and bytes; `transfer` copies between
    them (default: synchronous). `write_threshold` overrides the policy's hit count for backing a
    node up to the host (1 for write_through, 2 for write_through_selective, none for
    write_back). `page_runs` picks how page indices are kept: as `Pages` runs (RunPool; for
    requests of many pages each, as at page size 1) or as lists (PagePool; for requests of a
    few pages, as the simulator's blocks). `store` needs a host tier: host eviction saves pages
    there, match_prefix counts its continuation, fetch_from_store brings it back.
    """

    def __init__(
        self,
        device: PageStorage,
        host: PageStorage | None = None,
        transfer: TransferEngine | None = None,
        *,
        write_policy: WritePolicy | str = WritePolicy.WRITE_THROUGH,
        eviction: EvictionPolicy | str = EvictionPolicy.LRU,
        store: PageStoreHook | None = None,
        write_threshold: int | None = None,
        page_runs: bool = True,
    ) -> None:
        if store is not None and host is None:
            raise ValueError("an L3 store needs a host tier to stage its pages")
        self.write_policy = WritePolicy(write_policy)
        self.write_threshold = (
            write_threshold
            if write_threshold is not None
            else WRITE_THRESHOLD.get(self.write_policy, 0)
        )
        self.device = device
        self.host = host
        self.store = store
        self.transfer: TransferEngine = transfer if transfer is not None else ImmediateTransfer()
        self.tree = RadixTree(eviction, page_runs)
        self.tree.on_split = self._on_split
        pool = RunPool if page_runs else PagePool
        self.device_pool: RunPool | PagePool = pool(device.num_pages)
        self.host_pool: RunPool | PagePool = pool(host.num_pages if host is not None else 0)
        # Device pages handed to callers by alloc_device and not yet inserted or freed.
        self.held_device_pages = 0
        self._copies: list[_Copy] = []
        self._device_evicted = self._host_evicted = 0
        self._written_to_host = self._loaded_from_host = 0
        self._saved_to_store = self._loaded_from_store = 0

    # ---- lookup, insertion, locks ---------------------------------------------------------

    def match_prefix(self, keys: Sequence[PageKey]) -> MatchResult:
        """Longest cached prefix; `num_store_pages` counts the store's pages that follow it."""
        match = self.tree.match_prefix(keys)
        if self.store is None:
            return match
        done = match.num_device_pages + match.num_host_pages
        if done == len(keys):
            return match
        hashes = [store_key(k) for k in keys[done:]]
        return match._replace(num_store_pages=self.store.contains_prefix(hashes))

    def insert(
        self, keys: Sequence[PageKey], device_pages: Sequence[int], match: MatchResult | None = None
    ) -> InsertResult:
        """Cache pages the caller filled (from alloc_device, or the tree's own prefix pages).
        The caller frees its duplicates: device_pages[its own start : result.prefix_len].
        `match`: the caller's match of `keys`, locked since; the insert resumes where it ended."""
        result = self.tree.insert(keys, device_pages, match)
        n = keys.n if type(keys) is TokenPages else len(keys)  # no Python-level __len__
        self.held_device_pages -= n - result.prefix_len
        if self.host is not None and self.write_threshold:
            self._write_through(result.last_node)
        return result

    def lock(self, node: TreeNode) -> None:
        """Protect `node`'s prefix from eviction on every tier (one lock per call)."""
        self.tree.lock(node)

    def unlock(self, node: TreeNode) -> None:
        self.tree.unlock(node)

    # ---- device pages for callers ------------------------------------------------------------

    @property
    def evicted_pages(self) -> int:
        """Pages evicted from either tier so far."""
        return self._device_evicted + self._host_evicted

    @property
    def num_free_device_pages(self) -> int:
        return self.device_pool.num_free

    def alloc_device(self, n: int) -> PageSeq | None:
        """`n` device pages for the caller, evicting unprotected cached pages as needed;
        None (nothing taken) when even that cannot make room."""
        pool = self.device_pool
        pages = pool.alloc(n) if n <= pool.num_free else self._alloc(Tier.DEVICE, n)
        if pages is not None:
            self.held_device_pages += n
        return pages

    def free_device(self, pages: Sequence[int]) -> None:
        """Return device pages the caller got from alloc_device and did not insert."""
        self.device_pool.free(pages)
        self.held_device_pages -= len(pages)

    def _alloc(self, tier: Tier, n: int) -> PageSeq | None:
        pool = self.device_pool if tier is Tier.DEVICE else self.host_pool
        if n <= pool.num_free or n > pool.capacity:
            return pool.alloc(n)
        self.evict(tier, n - pool.num_free)
        pages = pool.alloc(n)
        if pages is None and self._copies:
            # pinned pages may be what blocks: let in-flight copies land and retry once
            self.flush()
            self.evict(tier, n - pool.num_free)
            pages = pool.alloc(n)
        return pages

    # ---- eviction -------------------------------------------------------------------------

    def evict(self, tier: Tier, num_pages: int) -> EvictResult:
        """Free at least `num_pages` pages of `tier` when enough are evictable, by the policy."""
        if tier is Tier.DEVICE:
            return self._evict_device(num_pages)
        if tier is Tier.HOST:
            return self._evict_host(num_pages)
        raise ValueError(f"cannot evict {tier} pages from the tree")

    def _evict_device(self, num_pages: int) -> EvictResult:
        if self.host is None:
            freed = self._drop_device_leaves(num_pages)
            self._device_evicted += freed
            return _new(EvictResult, (freed, 0))  # NamedTuple fields, no Python-level __new__
        freed = written = 0
        while freed < num_pages:
            pass_freed, pass_written = self._evict_device_pass(num_pages - freed)
            if not pass_freed:
                break
            freed += pass_freed
            written += pass_written
        self._device_evicted += freed
        self._written_to_host += written
        return _new(EvictResult, (freed, written))  # NamedTuple fields, no Python-level __new__

    def _drop_device_leaves(self, num_pages: int) -> int:
        """Device-only eviction: drop leaves until `num_pages` are freed. Without a host tier
        every node is on the device, so a candidate (no device child) is a leaf."""
        tree, pool = self.tree, self.device_pool
        freed = 0
        while freed < num_pages:
            node = tree.pop_candidate(Tier.DEVICE)
            if node is None:
                break
            pages = node.device
            tree.drop_leaf(node)
            pool.free(pages)  # type: ignore[arg-type]
            freed += node.size
        return freed

    def _evict_device_pass(self, num_pages: int) -> tuple[int, int]:
        """Evict leaves until `num_pages` are freed or staged for write-back, then land the
        write-backs. A leaf skipped because part of its subtree is staged is requeued for the
        next pass."""
        tree, pool = self.tree, self.device_pool
        write_back = self.host is not None and self.write_policy is WritePolicy.WRITE_BACK
        freed = 0
        staged: list[tuple[TreeNode, PageSeq]] = []
        staged_pages = 0
        skipped: list[TreeNode] = []
        while freed + staged_pages < num_pages:
            node = tree.pop_candidate(Tier.DEVICE)
            if node is None:
                break
            pages = node.device
            assert pages is not None
            if node.host is None and write_back:
                host_pages = self._alloc(Tier.HOST, len(pages))
                if host_pages is not None:
                    # the device run is released once the copy lands, below
                    tree.set_host(node, host_pages)
                    tree.pin(node)
                    tree.set_device(node, None)
                    staged.append((node, pages))
                    staged_pages += len(pages)
                    tree.offer(node.parent)  # type: ignore[arg-type]
                    continue
            if node.host is None:
                if not self._drop(node):
                    skipped.append(node)
                    continue
            else:
                tree.set_device(node, None)
                tree.offer(node)
                tree.offer(node.parent)  # type: ignore[arg-type]
            pool.free(pages)
            freed += node.size
        written = 0
        if staged:
            src = join([pages for _, pages in staged])
            dst = join([node.host for node, _ in staged])  # type: ignore[misc]
            # NOTE: SGLang's write_back eviction blocks here too (writing_check(write_back=True))
            handle = self.transfer.submit(self.device, src, self.host, dst)  # type: ignore[arg-type]
            handle.wait()
            for node, pages in staged:
                pool.free(pages)
                tree.unpin(node)
            written = len(src)
        for node in skipped:
            tree.offer(node)
        return freed + written, written

    def _drop(self, node: TreeNode) -> bool:
        """Remove a device leaf with no host copy, with its host-only subtree; False when part
        of that subtree is pinned. The caller frees the node's device run."""
        if not node.children:  # a leaf, as most are
            self.tree.drop_leaf(node)
            return True
        below = self.tree.nodes_below(node)
        if any(n.pinned for n in below):
            return False
        for n in reversed(below):  # children before parents
            self.host_pool.free(n.host)  # type: ignore[arg-type]
            self._host_evicted += len(n.host)  # type: ignore[arg-type]
            self.tree.set_host(n, None)
            self.tree.remove(n)
        self.tree.set_device(node, None)
        self.tree.remove(node)
        return True

    def _evict_host(self, num_pages: int) -> EvictResult:
        tree, pool, store = self.tree, self.host_pool, self.store
        freed = written = 0
        while freed < num_pages:
            node = tree.pop_candidate(Tier.HOST)
            if node is None:
                break
            pages = node.host
            assert pages is not None
            if store is not None and not node.stored:
                blobs = self.host.read_page_bytes(pages)  # type: ignore[union-attr]
                store.save([store_key(k) for k in node.keys], blobs)
                written += len(pages)
            tree.set_host(node, None)
            tree.remove(node)
            pool.free(pages)
            freed += len(pages)
        self._host_evicted += freed
        self._saved_to_store += written
        return EvictResult(freed, written)

    # ---- copies between tiers ---------------------------------------------------------------

    def _write_through(self, last: TreeNode) -> None:
        """Back up to the host every node on the path to `last` whose hit count reached the
        threshold and that has no host copy yet (SGLang HiRadixCache.write_backup)."""
        tree, threshold = self.tree, self.write_threshold
        todo: list[TreeNode] = []
        node: TreeNode | None = last
        while node is not None and node is not tree.root:
            if node.host is None and node.hit_count >= threshold:
                todo.append(node)
            node = node.parent
        if not todo:
            return
        src: list[PageSeq] = []
        dst: list[PageSeq] = []
        nodes: list[TreeNode] = []
        for node in reversed(todo):
            host_pages = self._alloc(Tier.HOST, len(node.keys))
            if host_pages is None:
                break
            tree.set_host(node, host_pages)
            tree.pin(node)
            src.append(node.device)  # type: ignore[arg-type]
            dst.append(host_pages)
            nodes.append(node)
        if nodes:
            src_pages = join(src)
            handle = self.transfer.submit(self.device, src_pages, self.host, join(dst))  # type: ignore[arg-type]
            self._written_to_host += len(src_pages)
            self._track(_Copy(handle, nodes))

    def load_back(self, match: MatchResult) -> LoadBackHandle | None:
        """Copy the host-only part of `match` to new device pages (evicting device pages to make
        room), all or nothing; None when there is nothing to load or no room. The loaded nodes
        stay pinned until the copy completes and `poll()` sees it."""
        if match.num_host_pages == 0:
            return None
        tree = self.tree
        nodes = tree.path(match.last_node, match.last_device_node)
        if any(n.device is not None or n.host is None for n in nodes):
            raise ValueError("stale match: the tree changed since match_prefix")
        n = sum(len(node.keys) for node in nodes)
        tree.lock(match.last_node)  # eviction below must not take the matched path
        pages = self._alloc(Tier.DEVICE, n)
        tree.unlock(match.last_node)
        if pages is None:
            return None
        src: list[PageSeq] = []
        at = 0
        for node in nodes:
            size = len(node.keys)
            tree.set_device(node, pages[at : at + size])
            tree.pin(node)
            src.append(node.host)  # type: ignore[arg-type]
            at += size
        handle = self.transfer.submit(self.host, join(src), self.device, pages)  # type: ignore[arg-type]
        self._loaded_from_host += n
        self._track(_Copy(handle, nodes))
        prefix = match.device_pages + pages  # type: ignore[operator]  # one cache: both lists or both Pages
        return LoadBackHandle(handle, prefix, n, match.last_node)

    def fetch_from_store(self, keys: Sequence[PageKey], match: MatchResult) -> MatchResult:
        """Bring the store's pages after `match` into the host tier (synchronously) and match
        again; returns `match` unchanged when nothing could be fetched."""
        store, tree = self.store, self.tree
        if store is None or match.num_store_pages == 0:
            return match
        start = match.num_device_pages + match.num_host_pages
        want = as_run(keys)[start : start + match.num_store_pages]
        tree.lock(match.last_node)
        host_pages = self._alloc(Tier.HOST, len(want))
        tree.unlock(match.last_node)
        if host_pages is None:
            return match
        blobs = store.load([store_key(k) for k in want])
        got = next((i for i, b in enumerate(blobs) if b is None), len(blobs))
        if got < len(want):
            self.host_pool.free(host_pages[got:])
            host_pages = host_pages[:got]
        if got == 0:
            return match
        self.host.write_page_bytes(host_pages, blobs[:got])  # type: ignore[union-attr,arg-type]
        tree.attach_host(match.last_node, want[:got], host_pages)
        self._loaded_from_store += got
        return self.match_prefix(keys)

    def _track(self, copy: _Copy) -> None:
        if copy.handle.done():
            self._finish(copy)
        else:
            self._copies.append(copy)

    def _finish(self, copy: _Copy) -> None:
        for node in copy.nodes:
            self.tree.unpin(node)

    def _on_split(self, old: TreeNode, new: TreeNode) -> None:
        for copy in self._copies:
            if any(n is old for n in copy.nodes):
                copy.nodes.append(new)

    def poll(self) -> int:
        """Release the pins of copies that completed; returns how many completed."""
        if not self._copies:
            return 0
        pending: list[_Copy] = []
        done = 0
        for copy in self._copies:
            if copy.handle.done():
                self._finish(copy)
                done += 1
            else:
                pending.append(copy)
        self._copies = pending
        return done

    def flush(self) -> None:
        """Wait for every copy in flight, then release their pins."""
        for copy in self._copies:
            copy.handle.wait()
        self.poll()

    @property
    def copies_in_flight(self) -> int:
        return len(self._copies)

    # ---- sizes ----------------------------------------------------------------------------------

    def size_info(self) -> CacheSizes:
        return CacheSizes(
            self.tree.size(Tier.DEVICE),
            self.device_pool.num_free,
            self.device_pool.capacity,
            self.tree.size(Tier.HOST),
            self.host_pool.num_free,
            self.host_pool.capacity,
        )

    def counters(self) -> CacheCounters:
        return CacheCounters(
            self._device_evicted,
            self._host_evicted,
            self._written_to_host,
            self._loaded_from_host,
            self._saved_to_store,
            self._loaded_from_store,
        )

    def check_integrity(self, held_device_pages: Sequence[int] | None = None) -> None:
        """Raise AssertionError on any broken invariant (see kvtier.cache.integrity)."""
        from kvtier.cache.integrity import check_cache

        check_cache(self, held_device_pages)
