"""The scheduler's view of kvtier's own tiered cache, in accounting mode.

`TieredCachePort` drives `kvtier.cache.hierarchy.TieredCache` over `AccountingStorage` and
`ImmediateTransfer` (no bytes move; time is the timing model's business) exactly as an engine
would: match, lock the matched prefix, load its host part back, allocate pages for the rest,
insert after prefill, unlock when done. One page of the cache is one trace block.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from kvtier.cache import request
from kvtier.cache.hierarchy import TieredCache, WritePolicy
from kvtier.cache.keys import as_run
from kvtier.cache.radix import MatchResult, TreeNode
from kvtier.cache.storage import AccountingStorage, Tier
from kvtier.sim.servers.cache_port import PrefixHit
from kvtier.sim.servers.store import AccountingStore


def output_key(rid: int, index: int) -> bytes:
    """The page key of a request's `index`-th page of generated tokens: 12 bytes, so it never
    meets a trace block (an integer, 8 bytes in the store: `store_key`), a chained digest (16
    bytes) nor another request's output."""
    return rid.to_bytes(8, "little") + index.to_bytes(4, "little")


class TieredCachePort:
    """`CachePort` over a `TieredCache` with `device_pages` device and `host_pages` host pages,
    and an L3 store of `store_pages` when that is positive (it needs a host tier), or `store`,
    one that other servers share."""

    def __init__(
        self,
        device_pages: int,
        host_pages: int = 0,
        write_policy: WritePolicy | str = WritePolicy.WRITE_THROUGH,
        store_pages: int = 0,
        store: AccountingStore | None = None,
    ) -> None:
        self.device_pages = device_pages
        host = AccountingStorage(Tier.HOST, host_pages) if host_pages > 0 else None
        if store is None and store_pages > 0:
            store = AccountingStore(store_pages)
        self.store = store
        self.cache = TieredCache(
            AccountingStorage(Tier.DEVICE, device_pages),
            host,
            write_policy=write_policy,
            store=self.store,
            page_runs=False,  # a request holds a few blocks: lists beat runs of one or two
        )
        self._held: dict[int, request.Admission] = {}
        self._last: tuple[Sequence[int], MatchResult] | None = None
        self._loose: list[int] = []  # pages of the running requests' generated tokens
        self.loose_pages = 0
        self._inserts = 0  # admissions and commits: either may lengthen a match
        self._moved = -1  # _inserts + evicted pages at the last match
        self._hit = PrefixHit(0, 0, 0)
        # (cached output's node, unused tokens), in the order they entered the tree
        self._spare: deque[tuple[TreeNode, int]] = deque()
        self._spare_total = 0

    def match(self, blocks: Sequence[int]) -> PrefixHit:
        cache = self.cache
        moved = self._inserts + cache.evicted_pages
        last = self._last
        if last is not None and last[0] is blocks and moved == self._moved:
            # nothing entered or left the tree since: the same match, stamped as a walk would
            cache.tree.touch(last[1].last_node)
            return self._hit
        m = cache.match_prefix(blocks)
        self._last, self._moved = (blocks, m), moved
        node = m.last_device_node
        backed_up = node is cache.tree.root or node.host is not None
        self._hit = PrefixHit(m.num_device_pages, m.num_host_pages, m.num_store_pages, backed_up)
        return self._hit

    def admit(
        self, rid: int, blocks: Sequence[int], store_pages: int, load_back: bool
    ) -> PrefixHit:
        cache = self.cache
        if self._last is not None and self._last[0] is blocks:
            m = self._last[1]
        else:
            m = cache.match_prefix(blocks)
        self._last = None
        if not load_back:
            m = m._replace(num_host_pages=0, num_store_pages=0, last_node=m.last_device_node)
        elif m.num_store_pages > store_pages:
            m = m._replace(num_store_pages=store_pages)
        adm = request.hold(cache, as_run(blocks)[:], m)
        self._inserts += 1
        self._held[rid] = adm
        return PrefixHit(adm.device_hit, adm.host_hit, adm.store_hit)

    def room(self, locked: bool = False) -> int:
        tree = self.cache.tree
        room = self.cache.device_pool.num_free + tree.device_total - tree.device_protected
        if locked and self._last is not None:
            # what lock(last device node) would take out of the evictable pages
            node, root = self._last[1].last_device_node, tree.root
            while node is not root:
                if not node.lock_ref and not node.pinned:
                    room -= node.size
                node = node.parent  # type: ignore[assignment]
        return room

    def grow(self, rid: int, pages: int) -> bool:
        adm = self._held[rid]
        new = self.cache.alloc_device(pages) if pages > 0 else []
        if new is None:
            return False
        adm.pages = adm.pages + new  # type: ignore[operator]  # lists: page_runs=False
        return True

    def hold_loose(self, pages: int) -> bool:
        loose = self._loose
        have = len(loose)
        if pages < have:
            self.cache.free_device(loose[pages:])
            del loose[pages:]
        elif pages > have:
            new = self.cache.alloc_device(pages - have)
            if new is None:
                return False
            loose.extend(new)
        self.loose_pages = pages
        return True

    def free_up(self, pages: int) -> None:
        """Evict unpinned device pages until `pages` are free (or nothing is evictable)."""
        short = pages - self.cache.device_pool.num_free
        if short > 0:
            self.cache.evict(Tier.DEVICE, short)

    def commit(self, rid: int, blocks: int | None = None) -> None:
        """Insert the prompt's first `blocks` pages (all: None) and move the lock onto them
        (SGLang's checkpoint after each prefill chunk, cache_unfinished_req after the last)."""
        adm = self._held[rid]
        cache = self.cache
        # pages it could not be given (the device ran short) stay uncached
        n = min(len(adm.keys) if blocks is None else blocks, len(adm.pages))
        if n <= adm.num_cached:
            return
        self._inserts += 1
        # the insert resumes below the locked path it already holds
        held = MatchResult(adm.pages[: adm.num_cached], 0, adm.last_node, adm.last_node,
                           adm.num_cached)  # fmt: skip
        keys = adm.keys if n == len(adm.keys) else adm.keys[:n]
        result = cache.insert(keys, adm.pages[:n], held)
        if result.prefix_len > adm.num_cached:
            cache.free_device(adm.pages[adm.num_cached : result.prefix_len])
        cache.lock(result.last_node)
        cache.unlock(adm.last_node)
        # from here on only the pages past the n-th, adm.pages[n:], are the request's own
        adm.num_cached, adm.last_node = n, result.last_node

    @property
    def spare_tokens(self) -> int:
        """Tokens the cached outputs' last pages leave unused, for outputs still on the device.
        The outputs leave the device in the order they entered: none is matched or touched
        again, so each policy ranks them by their finish (LRU and FIFO by it, LFU at no hit)."""
        spare = self._spare
        while spare and spare[0][0].device is None:
            self._spare_total -= spare.popleft()[1]
        return self._spare_total

    def release(self, rid: int, used: bool = True, output_pages: int = 0, spare: int = 0) -> None:
        """Unpin and free the request's own pages. Its prompt's path counts as used now when
        `used` (SGLang's release_kv_cache inserts prompt and output, stamping the path); a
        retracted request's is not (release_kv_cache(checkpoint=False) only unlocks).
        `output_pages`: pages of generated tokens that enter the tree below the prompt, under
        keys of this request's own (`output_key`), unlocked like the prompt; `spare` tokens of
        the last are unused (`spare_tokens`)."""
        adm = self._held.pop(rid)
        cache = self.cache
        whole = len(adm.pages) == adm.num_cached == len(adm.keys)
        if used and output_pages > 0 and whole:
            new = cache.alloc_device(output_pages)
            if new is not None:
                self._inserts += 1
                keys = adm.keys + [output_key(rid, i) for i in range(output_pages)]  # type: ignore[operator]
                held = MatchResult(adm.pages, 0, adm.last_node, adm.last_node, adm.num_cached)
                # the insert stamps the path and the new leaf as used
                result = cache.insert(keys, adm.pages + new, held)  # type: ignore[operator]
                cache.unlock(adm.last_node)
                if spare:
                    self._spare.append((result.last_node, spare))
                    self._spare_total += spare
                return
        if used:
            cache.tree.touch(adm.last_node)
        if len(adm.pages) > adm.num_cached:
            request.abort(cache, adm)
        else:  # a committed prompt holds no page of its own
            cache.unlock(adm.last_node)

    def evictions(self) -> dict[str, int]:
        c = self.cache.counters()
        out = {Tier.DEVICE.value: c.device_evicted, Tier.HOST.value: c.host_evicted}
        if self.store is not None:
            out[Tier.STORE.value] = self.store.evicted
        return out
