"""What the simulated scheduler asks of the KV cache, in trace blocks.

The simulator keys the cache by trace block: one Mooncake `hash_ids` entry is one page key. A
request's pages are its prompt blocks (shared through the tree); the tokens the running requests
generate share `hold_loose`'s pages while they run; a finished request's enter the tree below its
prompt under keys of its own (a trace has no ids for generated text, so nothing matches them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol


class PrefixHit(NamedTuple):
    """Leading blocks of a prompt found in each tier, in order: device, then host, then store.
    `backed_up`: the device part ends at the root or at a node with a host copy (SGLang starts an
    L3 prefetch only then: `Scheduler._prefetch_kvcache`, `req.last_node.backuped`)."""

    device: int
    host: int
    store: int
    backed_up: bool = True

    @property
    def blocks(self) -> int:
        return self.device + self.host + self.store


class CachePort(Protocol):
    """The tiered cache as the scheduler drives it; one instance per simulated server."""

    device_pages: int  # capacity of the device tier, in blocks
    loose_pages: int  # device pages held for the running requests' generated tokens

    def match(self, blocks: Sequence[int]) -> PrefixHit:
        """Longest cached prefix of `blocks` across tiers; refreshes its recency."""
        ...

    def admit(
        self, rid: int, blocks: Sequence[int], store_pages: int, load_back: bool
    ) -> PrefixHit:
        """Pin the longest cached prefix (the last `match` of `blocks`) and load its host part and
        up to `store_pages` of its store part to the device (neither when `load_back` is False).
        Returns the hit as served (a part that could not be loaded is recomputed, not a hit).
        The other prompt blocks get their pages from `grow`."""
        ...

    def room(self, locked: bool = False) -> int:
        """Device pages free or held by unpinned cached pages (evictable now); `locked`: with
        the last match's device prefix pinned."""
        ...

    def grow(self, rid: int, pages: int) -> bool:
        """`pages` more device pages for the request, evicting as needed; False, and no
        change, when the device cannot give them."""
        ...

    def hold_loose(self, pages: int) -> bool:
        """Hold `pages` device pages for the running requests' generated tokens, evicting as
        needed; False, and no change, when the device cannot give them."""
        ...

    def commit(self, rid: int, blocks: int | None = None) -> None:
        """Prefill finished (or a chunk of it: its first `blocks` prompt blocks): the request's
        prompt blocks enter the tree (still pinned)."""
        ...

    def free_up(self, pages: int) -> None:
        """Evict unpinned device pages until `pages` are free or nothing more is evictable."""
        ...

    @property
    def spare_tokens(self) -> int:
        """Tokens the cached outputs on the device leave unused in their last pages."""
        ...

    def release(self, rid: int, used: bool = True, output_pages: int = 0, spare: int = 0) -> None:
        """The request finished (or was retracted: `used` False): unpin its blocks (stamped as
        used when `used`) and free its own pages; `output_pages` pages of its generated tokens
        enter the tree below its prompt, under keys no prompt has, `spare` tokens of the last
        unused."""
        ...

    def evictions(self) -> dict[str, int]:
        """Pages evicted so far, per tier name."""
        ...
