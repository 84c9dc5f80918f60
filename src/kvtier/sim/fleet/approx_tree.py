"""sglang-router's approximate radix tree, over trace blocks instead of characters.

sglang-router 0.3.2 `src/policies/tree.rs` (`Tree`): one tree for all workers ("tenants"); a
node holds a run of text, the tenants whose routed requests passed through it with a last-access
epoch each, and `last_tenant`, the tenant that created it (a split copies it to the new parent).
`prefix_match_with_counts` walks while whole nodes match, stops inside a node that matches in
part, and names that node's `last_tenant` (if it still holds the tenant; else the first of its
tenants); every eighth epoch it refreshes that tenant's access time. `insert` adds the tenant to
every node on the path (counting their characters to it), splits a node that matches in part and
hangs the rest as a new leaf stamped with the next epoch. `evict_tenant_by_size` takes leaves in
epoch order and drops a tenant from them while its character count is over the limit.

Here a character is a trace block: a node's text is a run of block ids, each weighing its
tokens times `chars_per_token`. Text that differs in one block differs from that block's first
character on, so the matches are the router's when each block's text starts with a character
of its own (the side-by-side test sends such text). The epoch counter is global, as the
router's static counter is.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple


class _Node:
    __slots__ = ("chars", "children", "keys", "last", "parent", "tenants")

    def __init__(
        self, keys: list[int], chars: list[int], parent: _Node | None, last: int | None
    ) -> None:
        self.keys = keys
        self.chars = chars
        self.children: dict[int, _Node] = {}
        self.tenants: dict[int, int] = {}  # tenant -> last access epoch
        self.parent = parent
        self.last = last

    @property
    def size(self) -> int:
        return sum(self.chars)


class Match(NamedTuple):
    tenant: int | None  # None: the node holds no tenant (the router's "empty")
    matched_chars: int
    input_chars: int


def _shared(keys: Sequence[int], start: int, node: _Node) -> int:
    n = 0
    limit = min(len(keys) - start, len(node.keys))
    while n < limit and keys[start + n] == node.keys[n]:
        n += 1
    return n


class ApproxTree:
    def __init__(self) -> None:
        self.root = _Node([], [], None, None)
        self.char_count: dict[int, int] = {}
        self._epoch = 0

    def _next_epoch(self) -> int:
        self._epoch += 1
        return self._epoch - 1

    def insert(self, keys: Sequence[int], chars: Sequence[int], tenant: int) -> None:
        self.root.tenants.setdefault(tenant, 0)
        self.char_count.setdefault(tenant, 0)
        prev, i = self.root, 0
        while i < len(keys):
            node = prev.children.get(keys[i])
            if node is None:
                leaf = _Node(list(keys[i:]), list(chars[i:]), prev, tenant)
                leaf.tenants[tenant] = self._next_epoch()
                self.char_count[tenant] += leaf.size
                prev.children[keys[i]] = leaf
                return
            shared = _shared(keys, i, node)
            if shared < len(node.keys):
                node = self._split(prev, node, shared)
            if tenant not in node.tenants:
                self.char_count[tenant] += node.size
                node.tenants[tenant] = 0
            prev, i = node, i + shared
        prev.tenants[tenant] = self._next_epoch()

    def _split(self, parent: _Node, node: _Node, at: int) -> _Node:
        head = _Node(node.keys[:at], node.chars[:at], parent, node.last)
        head.tenants = dict(node.tenants)
        node.keys, node.chars = node.keys[at:], node.chars[at:]
        node.parent = head
        head.children[node.keys[0]] = node
        parent.children[head.keys[0]] = head
        return head

    def match(self, keys: Sequence[int], chars: Sequence[int]) -> Match:
        prev, i, matched = self.root, 0, 0
        while i < len(keys):
            node = prev.children.get(keys[i])
            if node is None:
                break
            shared = _shared(keys, i, node)
            matched += sum(node.chars[:shared])
            prev = node
            if shared < len(node.keys):
                break
            i += shared
        tenant = prev.last if prev.last in prev.tenants else next(iter(prev.tenants), None)
        prev.last = tenant
        epoch = self._next_epoch()
        if tenant is not None and epoch & 0x7 == 0:
            prev.tenants[tenant] = epoch
        return Match(tenant, matched, sum(chars))

    def evict(self, max_size: int) -> None:
        """`evict_tenant_by_size`: leaves in epoch order until each tenant is within the size."""
        heap: list[tuple[int, int, int, _Node]] = []
        seq = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            for tenant in self._leaf_of(node):
                heap.append((node.tenants[tenant], seq, tenant, node))
                seq += 1
        heapq.heapify(heap)
        while heap:
            _, _, tenant, node = heapq.heappop(heap)
            if self.char_count.get(tenant, 0) <= max_size or tenant not in self._leaf_of(node):
                continue
            self.char_count[tenant] = max(0, self.char_count[tenant] - node.size)
            del node.tenants[tenant]
            parent = node.parent
            if parent is None:
                continue
            if not node.children and not node.tenants and node.keys:
                parent.children.pop(node.keys[0], None)
            if tenant in self._leaf_of(parent):
                heapq.heappush(heap, (parent.tenants[tenant], seq, tenant, parent))
                seq += 1

    @staticmethod
    def _leaf_of(node: _Node) -> list[int]:
        inner = {t for child in node.children.values() for t in child.tenants}
        return [t for t in node.tenants if t not in inner]
