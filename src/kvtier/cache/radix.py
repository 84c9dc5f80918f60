"""Radix tree over page keys; each node knows on which tiers its run of pages lives.

A node holds a run of page keys and, per tier, the page indices of those pages:

    node.keys    [k0, k1, k2]          one key per page (a list, or a packed TokenPages)
    node.device  Pages[17..19] | None  device pool indices (None: evicted from the device)
    node.host    Pages[201, 7..8]      host pool indices (None: no host copy)

Page indices are `Pages` (runs of consecutive indices: a node of thousands of pages costs what
a node of one does) or, in a tree built with page_runs=False, plain lists (cheaper when nodes
hold a few pages each).

Invariants (checked by kvtier.cache.integrity):
  * a node in the tree has pages on the device, on the host, or both;
  * the device-resident nodes form a prefix-closed subtree: a device node's parent is on the device
    (eviction goes leaf first, load-back loads whole chains);
  * `lock_ref` counts the locks held on the node or below it (a lock walks up to the root);
  * a node is protected on every tier while `lock_ref > 0` or `pinned > 0` (a copy in flight).

The tree moves no bytes and owns no allocator: kvtier.cache.hierarchy.TieredCache frees pages
and drives eviction through `pop_candidate`. Mirrors the node model of SGLang's
mem_cache/radix_cache.py and hiradix_cache.py (v0.5.x): value/host_value, lock_ref, hit_count,
splitting a node where a match ends inside it; keys are pages, not tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from heapq import heappop, heappush
from operator import getitem
from typing import Any, NamedTuple

from kvtier.cache.eviction import EvictionPolicy, priority_of
from kvtier.cache.keys import KeyRun, PageKey, TokenPages, as_run
from kvtier.cache.pages import EMPTY, Pages, PageSeq, join
from kvtier.cache.storage import Tier

_new = tuple.__new__

_IN_DEVICE_HEAP = 1
_IN_HOST_HEAP = 2


class TreeNode:
    """One run of pages. Fields are plain attributes for speed; mutate them only via RadixTree."""

    __slots__ = (
        "children",
        "created",
        "device",
        "hit_count",
        "host",
        "keys",
        "last_access",
        "lock_ref",
        "parent",
        "pinned",
        "queued",
        "size",
        "stored",
    )

    def __init__(self, keys: KeyRun, size: int, parent: TreeNode | None, tick: int) -> None:
        self.keys = keys
        self.size = size  # len(keys), read without a Python-level __len__
        self.device: PageSeq | None = None
        self.host: PageSeq | None = None
        self.stored = False
        self.parent = parent
        self.children: dict[PageKey, TreeNode] = {}
        self.lock_ref = 0
        self.pinned = 0
        self.last_access = tick
        self.created = tick
        self.hit_count = 0
        self.queued = 0

    @property
    def protected(self) -> bool:
        return self.lock_ref > 0 or self.pinned > 0

    def __repr__(self) -> str:
        where = ("D" if self.device is not None else "") + ("H" if self.host is not None else "")
        return f"TreeNode({len(self.keys)} pages, {where or '-'}, lock={self.lock_ref})"


class MatchResult(NamedTuple):
    """Longest cached prefix of a key sequence.

    `device_pages` are the device indices of the leading pages resident on the device
    (`num_device_pages` of them); the next `num_host_pages` pages exist only on the host (load
    them with TieredCache.load_back); the next `num_store_pages` after those are in the L3
    store (0 without a store). `last_device_node` ends the device part (the root when none),
    `last_node` the whole match.
    """

    device_pages: PageSeq
    num_host_pages: int
    last_device_node: TreeNode
    last_node: TreeNode
    num_device_pages: int  # len(device_pages), kept so that reading it costs no call
    num_store_pages: int = 0


class InsertResult(NamedTuple):
    """`prefix_len` leading pages were already on the device: the caller's pages at those
    positions are duplicates (free those the caller allocated itself). The rest are now owned
    by the tree. `last_node` holds the last inserted page."""

    prefix_len: int
    last_node: TreeNode


class TierSize(NamedTuple):
    """Pages of one tier held by the tree: evictable (unprotected) + protected = total."""

    evictable: int
    protected: int

    @property
    def total(self) -> int:
        return self.evictable + self.protected


class RadixTree:
    """Page-keyed radix tree with per-tier page runs, path locks and lazy eviction heaps.
    Its page sequences are `Pages` (page_runs) or lists."""

    def __init__(
        self, eviction: EvictionPolicy | str = EvictionPolicy.LRU, page_runs: bool = True
    ) -> None:
        self.page_runs = page_runs
        self.priority = priority_of(eviction)
        self.clock = 0
        self.root = TreeNode([], 0, None, 0)
        self.root.device = EMPTY if page_runs else []
        self.root.lock_ref = 1  # NOTE: the root is never evictable
        self.device_total = 0
        self.device_protected = 0
        self.host_total = 0
        self.host_protected = 0
        self._heaps: tuple[list[tuple[object, int, TreeNode]], ...] = ([], [])
        self._seq = 0
        # Called as on_split(old_suffix, new_prefix) when a pinned node is split.
        self.on_split: Callable[[TreeNode, TreeNode], None] | None = None
        # KV events (None: off): each change to the device's keys in order, (stored, keys),
        # as SGLang's radix cache queues BlockStored / BlockRemoved for its publisher
        self.device_log: list[tuple[bool, KeyRun]] | None = None

    # ---- lookup and insertion -------------------------------------------------------------

    def match_prefix(self, keys: Sequence[PageKey]) -> MatchResult:
        """Longest prefix of `keys` in the tree (device or host), splitting the node where the
        match ends inside it. Touches the matched nodes (last_access)."""
        self.clock += 1
        node = last_device = self.root
        path = self._walk(node, 0, _reader(keys), self.clock)
        device_parts: list[PageSeq] = []
        num_host = num_device = 0
        for node in path:
            if node.device is not None:
                device_parts.append(node.device)
                num_device += node.size
                last_device = node
            else:
                num_host += node.size
        if len(device_parts) == 1:
            device = device_parts[0]
        elif not device_parts:
            device = EMPTY if self.page_runs else []
        else:
            device = join(device_parts)
        # NOTE: tuple.__new__ builds the NamedTuple without its Python-level __new__
        return _new(MatchResult, (device, num_host, last_device, node, num_device, 0))

    def insert(
        self,
        keys: Sequence[PageKey],
        device_pages: Sequence[int],
        match: MatchResult | None = None,
    ) -> InsertResult:
        """Cache `keys` with their device pages. Pages already on the device are reported as
        duplicates; host-only nodes on the path take the caller's device pages back.

        `match`: the caller's match of these same keys, its device part locked since (so still
        in the tree): the walk starts where that part ends, its nodes stamped as a walk would."""
        reader = keys, get, src, scale, n = _reader(keys)
        if self.page_runs:
            if type(device_pages) is not Pages:
                device_pages = Pages.of(device_pages)
            size = device_pages.n
        else:
            if type(device_pages) is not list:
                device_pages = list(device_pages)
            size = len(device_pages)
        if n != size:
            raise ValueError(f"{n} keys but {size} device pages")
        self.clock += 1
        tick = self.clock
        node = self.root
        prefix_len = i = 0
        if match is not None and match.num_device_pages <= n:
            node = up = match.last_device_node
            i = prefix_len = match.num_device_pages
            while up.parent is not None:  # what the walk down would do to these nodes
                up.last_access = tick
                up.hit_count += 1
                up = up.parent
            if up is not self.root:
                raise ValueError("stale match: its last device node left the tree")
        path = self._walk(node, i, reader, tick)
        for node in path:
            m = node.size
            node.hit_count += 1
            if node.device is None:
                self.set_device(node, device_pages[i : i + m])
                self.offer(node)
            elif prefix_len == i:
                prefix_len += m
            i += m
        if i < n:
            leaf = TreeNode(keys[i:] if i else keys, n - i, node, tick)
            leaf.hit_count = 1
            node.children[get(src, i * scale)] = leaf
            # what set_device and offer do for a new leaf
            leaf.device = device_pages[i:] if i else device_pages
            self.device_total += n - i
            if self.device_log is not None:
                self.device_log.append((True, leaf.keys))
            leaf.queued = _IN_DEVICE_HEAP
            self._seq += 1
            heappush(self._heaps[0], (self.priority(leaf), self._seq, leaf))
            node = leaf
        return _new(InsertResult, (prefix_len, node))

    def attach_host(
        self, parent: TreeNode, keys: Sequence[PageKey], host_pages: PageSeq
    ) -> TreeNode:
        """Add a host-only leaf under `parent` (pages fetched from the L3 store)."""
        if not keys or len(keys) != len(host_pages) or keys[0] in parent.children:
            raise ValueError("attach_host needs new, non-empty keys with one host page each")
        self.clock += 1
        leaf = TreeNode(as_run(keys)[:], len(keys), parent, self.clock)
        leaf.stored = True
        parent.children[keys[0]] = leaf
        self.set_host(leaf, host_pages)
        self.offer(leaf)
        return leaf

    def _walk(self, node: TreeNode, i: int, reader: _Reader, tick: int) -> list[TreeNode]:
        """The nodes below `node` that match the keys from position `i` on, top-down, each
        stamped `tick`; the node where the match ends inside it is split there, so every node of
        the path matches in full (its `size` pages)."""
        keys, get, src, scale, n = reader
        common = _COMMON_LEN[scale > 1]
        children = node.children
        path: list[TreeNode] = []
        while i < n:
            child = children.get(get(src, i * scale))
            if child is None:
                break
            m = common(child.keys, keys, i)
            if m < child.size:
                child = self._split(child, m)
            child.last_access = tick
            path.append(child)
            children = child.children
            i += m
        return path

    def _split(self, node: TreeNode, m: int) -> TreeNode:
        """Cut `node` after `m` pages; the new node is the prefix and becomes `node`'s parent."""
        parent = node.parent
        assert parent is not None
        prefix = node.keys[:m]
        if type(prefix) is TokenPages:
            prefix = prefix.owned()  # now shared by two requests at least: compared in place
        new = TreeNode(prefix, m, parent, node.created)
        # Both halves keep the node's access time; the caller stamps the matched prefix only.
        # SGLang stamps the node before cutting it, so its unmatched suffix looks just used
        # although no request touched those pages; for an LRU the suffix's last use is the
        # right age (a 0.19% matched-token difference on the peer benchmark, see peers.md).
        new.last_access = node.last_access
        new.hit_count = node.hit_count
        new.lock_ref = node.lock_ref
        new.pinned = node.pinned
        new.stored = node.stored
        if node.device is not None:
            new.device = node.device[:m]
            node.device = node.device[m:]
        if node.host is not None:
            new.host = node.host[:m]
            node.host = node.host[m:]
        node.keys = node.keys[m:]
        node.size -= m
        node.parent = new
        new.children = {node.keys[0]: node}
        parent.children[new.keys[0]] = new
        if node.pinned and self.on_split is not None:
            self.on_split(node, new)
        return new

    def touch(self, node: TreeNode) -> None:
        """Stamp `node` and its ancestors as just used (their eviction order), as an insert
        that walks to it does."""
        self.clock += 1
        tick = self.clock
        while node.parent is not None:
            node.last_access = tick
            node = node.parent

    # ---- locks and pins ---------------------------------------------------------------------

    def lock(self, node: TreeNode) -> None:
        """Protect `node` and its ancestors on every tier (SGLang inc_lock_ref)."""
        root = self.root
        device = host = 0  # pages that become protected
        while node is not root:
            if node.lock_ref == 0 and node.pinned == 0:
                if node.device is not None:
                    device += len(node.device)
                if node.host is not None:
                    host += len(node.host)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]
        self.device_protected += device
        self.host_protected += host

    def unlock(self, node: TreeNode) -> None:
        """Undo one `lock(node)` (SGLang dec_lock_ref)."""
        root = self.root
        device = host = 0  # pages that stop being protected
        try:
            while node is not root:
                if node.lock_ref <= 0:
                    raise ValueError(f"unlock of {node!r} without a matching lock")
                node.lock_ref -= 1
                if node.lock_ref == 0 and node.pinned == 0:
                    if node.device is not None:
                        device += len(node.device)
                        if not node.queued & _IN_DEVICE_HEAP:
                            self.offer(node)
                    else:
                        self.offer(node)
                    if node.host is not None:
                        host += len(node.host)
                node = node.parent  # type: ignore[assignment]
        finally:
            self.device_protected -= device
            self.host_protected -= host

    def pin(self, node: TreeNode) -> None:
        """Protect this node alone while a copy of its pages is in flight."""
        if node.lock_ref == 0 and node.pinned == 0:
            self._protect(node, 1)
        node.pinned += 1

    def unpin(self, node: TreeNode) -> None:
        if node.pinned <= 0:
            raise ValueError(f"unpin of {node!r} without a matching pin")
        node.pinned -= 1
        if node.pinned == 0 and node.lock_ref == 0:
            self._protect(node, -1)
            self.offer(node)

    def _protect(self, node: TreeNode, sign: int) -> None:
        if node.device is not None:
            self.device_protected += sign * len(node.device)
        if node.host is not None:
            self.host_protected += sign * len(node.host)

    # ---- page runs --------------------------------------------------------------------------

    def set_device(self, node: TreeNode, pages: PageSeq | None) -> None:
        """Replace the node's device run (None: evicted from the device), keeping sizes."""
        delta = (0 if pages is None else len(pages)) - (
            0 if node.device is None else len(node.device)
        )
        if self.device_log is not None and (pages is None) != (node.device is None):
            self.device_log.append((pages is not None, node.keys))
        node.device = pages
        self.device_total += delta
        if node.lock_ref or node.pinned:
            self.device_protected += delta

    def set_host(self, node: TreeNode, pages: PageSeq | None) -> None:
        """Replace the node's host run (None: no host copy), keeping sizes."""
        delta = (0 if pages is None else len(pages)) - (0 if node.host is None else len(node.host))
        node.host = pages
        self.host_total += delta
        if node.lock_ref or node.pinned:
            self.host_protected += delta

    def drop_leaf(self, node: TreeNode) -> None:
        """Drop an unprotected device leaf with no host copy: its device run (which the caller
        frees) and the node itself, as set_device(node, None) and remove do."""
        self.device_total -= node.size
        node.device = None
        if self.device_log is not None:
            self.device_log.append((False, node.keys))
        self.remove(node)

    def remove(self, node: TreeNode) -> None:
        """Unlink a childless node whose page runs are already cleared."""
        parent = node.parent
        if parent is None or node.children or node.device is not None or node.host is not None:
            raise ValueError(f"cannot remove {node!r}: it has children or pages")
        keys = node.keys
        del parent.children[keys.unpack(keys.tokens, 0) if type(keys) is TokenPages else keys[0]]
        node.parent = None
        if parent is not self.root:
            self.offer(parent)

    # ---- eviction candidates ----------------------------------------------------------------

    def offer(self, node: TreeNode) -> None:
        """Queue a node that may have become evictable on its outermost tier; checked on pop."""
        if node is self.root:
            return
        if node.device is not None:
            if not node.queued & _IN_DEVICE_HEAP:
                node.queued |= _IN_DEVICE_HEAP
                self._push(0, node)
        elif node.host is not None and not node.queued & _IN_HOST_HEAP:
            node.queued |= _IN_HOST_HEAP
            self._push(1, node)

    def _push(self, heap: int, node: TreeNode) -> None:
        self._seq += 1
        heappush(self._heaps[heap], (self.priority(node), self._seq, node))

    def pop_candidate(self, tier: Tier) -> TreeNode | None:
        """Next node to evict from `tier` by the policy, or None. A device candidate is an
        unprotected device node with no device child; a host candidate an unprotected host-only
        node with no child."""
        device = tier is Tier.DEVICE
        idx, bit = (0, _IN_DEVICE_HEAP) if device else (1, _IN_HOST_HEAP)
        heap = self._heaps[idx]
        while heap:
            prio, _, node = heappop(heap)
            node.queued &= ~bit
            if node.parent is None or node.lock_ref or node.pinned:
                continue
            if device:
                if node.device is None or (
                    node.children and any(c.device is not None for c in node.children.values())
                ):
                    continue
            elif node.device is not None or node.host is None or node.children:
                continue
            if self.priority(node) != prio:  # touched since queued: requeue at its current place
                node.queued |= bit
                self._push(idx, node)
                continue
            return node
        return None

    def is_candidate(self, node: TreeNode, tier: Tier) -> bool:
        # NOTE: pop_candidate inlines this test
        if node.parent is None or node.lock_ref or node.pinned:
            return False
        if tier is Tier.DEVICE:
            if node.device is None:
                return False
            return not node.children or all(c.device is None for c in node.children.values())
        return node.device is None and node.host is not None and not node.children

    def is_queued(self, node: TreeNode, tier: Tier) -> bool:
        return bool(node.queued & (_IN_DEVICE_HEAP if tier is Tier.DEVICE else _IN_HOST_HEAP))

    # ---- sizes --------------------------------------------------------------------------------

    def size(self, tier: Tier) -> TierSize:
        if tier is Tier.DEVICE:
            return TierSize(self.device_total - self.device_protected, self.device_protected)
        if tier is Tier.HOST:
            return TierSize(self.host_total - self.host_protected, self.host_protected)
        raise ValueError(f"the tree does not hold {tier} pages")

    def nodes(self) -> list[TreeNode]:
        """Every node below the root, parents before children."""
        return self.nodes_below(self.root)

    def nodes_below(self, node: TreeNode) -> list[TreeNode]:
        """Every node under `node` (not `node` itself), parents before children."""
        out: list[TreeNode] = []
        stack = list(node.children.values())
        while stack:
            child = stack.pop()
            out.append(child)
            stack.extend(child.children.values())
        return out

    def path(self, node: TreeNode, stop: TreeNode) -> list[TreeNode]:
        """Nodes from `stop`'s child down to `node` (top-down); `stop` must be an ancestor."""
        out: list[TreeNode] = []
        while node is not stop:
            if node.parent is None:
                raise ValueError("stale node: no longer in the tree")
            out.append(node)
            node = node.parent
        out.reverse()
        return out


_Reader = tuple[KeyRun, Callable[[Any, int], PageKey], Any, int, int]


def _reader(keys: Sequence[PageKey]) -> _Reader:
    """`(run, get, src, scale, n)`: `keys` as a run of `n` keys, key i being
    `get(src, i * scale)`, a C-level call (a TokenPages' `[i]` is a Python-level one)."""
    if type(keys) is TokenPages:
        return keys, keys.unpack, keys.tokens, keys.page_bytes, keys.n
    run = keys if type(keys) is list else as_run(keys)
    return run, getitem, run, 1, len(run)


def _common_len(run: list[PageKey], keys: list[PageKey], start: int) -> int:
    """How many leading keys of `run` equal keys[start:]."""
    n = len(run)
    if run == keys[start : start + n]:
        return n
    limit = min(n, len(keys) - start)
    # bisect on run equality: O(log n) Python steps, O(n) keys compared in all
    lo, hi = 0, limit
    if hi == n:
        hi -= 1  # the whole run does not match
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if run[lo:mid] == keys[start + lo : start + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# How many leading keys of a node's run equal the keys from a position on, by the kind of run
# (one tree uses one kind): lists, or TokenPages (packed, compared as bytes).
_COMMON_LEN: tuple[Callable[[Any, Any, int], int], Callable[[Any, Any, int], int]] = (
    _common_len,
    TokenPages.common_len,
)
