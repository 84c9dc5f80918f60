"""vLLM V1's KV block pool as the simulator keeps it, in engine blocks of `block_size` tokens.

Mirrors vllm/v1/core/block_pool.py and kv_cache_manager.py (read in v0.32.0):
  * `BlockPool.__init__` takes one null block out of num_gpu_blocks: requests share the rest;
  * a full block is cached under its chained hash when the step that computes it is scheduled
    (`allocate_slots` -> `cache_blocks`), so a request scheduled later, even in the same step,
    hits it; `get_computed_blocks` walks the prompt's chain of full blocks, at most
    num_tokens - 1 tokens, so the last token is always computed;
  * `touch` takes a hit block that nobody holds off the free queue; `free` returns a request's
    blocks in reverse order, so its tail is evicted first; `free_blocks` puts a hashed block at
    the queue's end and an unhashed one at its front; `get_new_blocks` pops the front, dropping
    the hash of a cached block it takes (LRU eviction);
  * with `--enable-prefix-caching` off nothing is hashed and nothing hits.

Units: a trace names prefixes by trace block, not by engine block, so the pool keeps one entry per
*unit*, the run of full engine blocks whose last token lies in one trace block (`prompt_chain`);
with vLLM's block no larger than the trace's and dividing it, a unit is block_tokens / block_size
engine blocks under the trace block's id, and a lookup matches whole units. A unit is cached,
held, freed and evicted whole: where vLLM would evict the tail blocks of a unit one at a time,
the simulator drops the unit (the blocks it did not need join the free count). Blocks past the
prompt's units (the prompt's partial last block, the output) are the request's own, named by
request and position, so only the same request (after a preemption) hits them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

Key = int  # a trace block id (>= 0), or a request's own block (< 0, `own_key`)
OWN_SHIFT = 32  # own blocks of request r at position k: -1 - (r << OWN_SHIFT) - k


def own_key(rid: int, position: int) -> Key:
    return -1 - (rid << OWN_SHIFT) - position


class Chain(NamedTuple):
    """A prompt's units in order: unit i is named `keys[i]` and has `per` engine blocks, but the
    last, which has `last` (the prompt's partial trace block). A named tuple: one is built at
    every arrival (0.24 us against a frozen dataclass's 0.40 us)."""

    keys: tuple[Key, ...]
    per: int
    last: int

    def size(self, i: int) -> int:
        return self.last if i == len(self.keys) - 1 else self.per

    def blocks(self, count: int) -> int:
        """Engine blocks of the first `count` units."""
        n = len(self.keys)
        if count < n:
            return count * self.per
        return (n - 1) * self.per + self.last if n else 0

    def within(self, blocks: int) -> int:
        """How many units, from the first, lie within the first `blocks` engine blocks."""
        n = len(self.keys)
        whole = blocks // self.per
        if whole < n - 1:
            return whole
        return n if (n - 1) * self.per + self.last <= blocks else n - 1

    def pairs(self, start: int = 0, end: int | None = None) -> list[tuple[Key, int]]:
        """(key, engine blocks) of units start ... end - 1."""
        stop = len(self.keys) if end is None else end
        return [(self.keys[i], self.size(i)) for i in range(start, stop)]


def prompt_chain(blocks: Sequence[int], input_len: int, trace_block: int, block_size: int) -> Chain:
    """The units of a prompt's full engine blocks.

    vLLM block b of the prompt (tokens b x size ... (b + 1) x size - 1) is named by the trace
    block holding its last token; that trace block's id names the whole prefix up to it, so equal
    ids give equal blocks. When the trace block is a multiple of the engine block, a unit is one
    trace block's full engine blocks; otherwise every engine block is a unit of its own, named by
    its trace block and its end within it.
    """
    full = input_len // block_size
    if trace_block % block_size == 0:
        per = trace_block // block_size
        whole, part = divmod(full, per)
        return Chain(tuple(blocks[: whole + (part > 0)]), per, part or per)
    keys = []
    for b in range(full):
        end = (b + 1) * block_size
        t = (end - 1) // trace_block
        keys.append(
            blocks[t] if end == (t + 1) * trace_block else (blocks[t] << 20) + end - t * trace_block
        )
    return Chain(tuple(keys), 1, 1)


class BlockPool:
    """`num_blocks` engine blocks (the null block already taken out).

    A cached unit is its key: `cached` gives its engine blocks, `refs` how many running requests
    hold it (absent: nobody, and it waits in `queue`), so a request's units are a list of keys
    and caching, holding and freeing them allocate nothing per unit."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.cached: dict[Key, int] = {}  # key -> engine blocks
        self.refs: dict[Key, int] = {}  # key -> requests holding it (>= 1)
        self.queue: OrderedDict[Key, int] = OrderedDict()  # free cached units, LRU first
        self.queued_blocks = 0
        self.plain = num_blocks  # free unhashed blocks, at the queue's front
        self.evicted = 0  # cached blocks whose hash was dropped
        self.version = 0  # counts the changes that can make a failed admission fit
        self.watched: set[Key] = set()  # the failed waiting head's hit
        self.lost = 0  # evictions of watched units
        self.holds = 0  # touches and releases: the changes to who holds cached units
        # units cached or evicted since the last take_events (None: KV events off)
        self.touched: set[Key] | None = None

    @property
    def free(self) -> int:
        """get_num_free_blocks: the free queue's length."""
        return self.plain + self.queued_blocks

    def match(
        self, chain: Chain, max_blocks: int, extra: tuple[Key, int] | None = None
    ) -> tuple[list[Key], int, int]:
        """The cached units leading `chain` (then `extra`, when the whole chain is), no more
        than `max_blocks` engine blocks in all; their blocks, and those of them in the free
        queue (held by nobody: touching them takes them off it)."""
        hit: list[Key] = []
        total = idle = 0
        if not self.caching:
            return hit, total, idle
        cached, refs = self.cached, self.refs
        keys, n = chain.keys, chain.per
        last = len(keys) - 1
        for i, key in enumerate(keys):
            if i == last:
                n = chain.last
            if cached.get(key) != n or total + n > max_blocks:
                return hit, total, idle
            hit.append(key)
            total += n
            if key not in refs:
                idle += n
        if extra is not None:
            key, n = extra
            if cached.get(key) == n and total + n <= max_blocks:
                hit.append(key)
                total += n
                idle += 0 if key in refs else n
        return hit, total, idle

    def touch(self, keys: Sequence[Key]) -> None:
        self.version += 1
        self.holds += 1
        refs, queue = self.refs, self.queue
        taken = 0
        for key in keys:
            held = refs.get(key)
            if held is None:
                taken += queue.pop(key)
                refs[key] = 1
            else:
                refs[key] = held + 1
        self.queued_blocks -= taken

    def take(self, n: int) -> None:
        """get_new_blocks(n): the queue's front first, evicting cached units as it goes."""
        if n > self.free:
            raise ValueError(f"cannot take {n} blocks, {self.free} free")
        queue, cached, watched, touched = self.queue, self.cached, self.watched, self.touched
        short = n - self.plain
        freed = 0
        while freed < short:
            key, blocks = queue.popitem(last=False)
            del cached[key]
            freed += blocks
            if key in watched:  # a shorter hit can admit the failed head
                self.lost += 1
                self.version += 1
            if touched is not None:
                touched.add(key)
        self.queued_blocks -= freed
        self.evicted += freed
        self.plain += freed - n

    def ahead(self, limit: int) -> int:
        """Blocks `take` can evict before a watched unit, counted up to `limit`."""
        total, watched = 0, self.watched
        for key, n in self.queue.items():
            if total >= limit or key in watched:
                break
            total += n
        return total

    def cache(self, key: Key, n: int) -> bool:
        """Hash `n` blocks the caller holds under `key`; False when caching is off or `key` is
        cached already (the caller's copy stays unhashed)."""
        if not self.caching or key in self.cached:
            return False
        self.cached[key] = n
        self.refs[key] = 1
        self.version += 1
        if self.touched is not None:
            self.touched.add(key)
        return True

    def cache_run(self, chain: Chain, start: int, end: int, held: list[Key]) -> None:
        """`cache` units start ... end - 1 of `chain` in order, appending those it caches to
        `held`. A loop: a chunk's 16 or so units took 2.2-3.4 us in it against 4.7-5.6 us as
        bulk dict updates."""
        cached, refs, keys, per, touched = (
            self.cached,
            self.refs,
            chain.keys,
            chain.per,
            self.touched,
        )
        last = len(keys) - 1
        for i in range(start, end):
            key = keys[i]
            if key not in cached:
                cached[key] = per if i < last else chain.last
                refs[key] = 1
                held.append(key)
                if touched is not None:
                    touched.add(key)

    def held_blocks(self, keys: Sequence[Key]) -> int:
        """Blocks of the cached units `keys` that running requests hold."""
        return sum(map(self.cached.__getitem__, filter(self.refs.__contains__, keys)))

    def release(self, held: Sequence[Key], blocks: int) -> None:
        """free(): a request's `blocks` engine blocks; its cached units `held`, tail first, to
        the queue's end, the rest (unhashed) to the front."""
        self.version += 1
        self.holds += 1
        cached, refs, queue = self.cached, self.refs, self.queue
        kept = queued = 0  # blocks of its cached units others still hold, and the rest
        for key in reversed(held):
            n = cached[key]
            count = refs.pop(key)
            if count == 1:
                queue[key] = n
                queued += n
            else:
                refs[key] = count - 1
                kept += n
        self.plain += blocks - kept - queued
        self.queued_blocks += queued


class HostLRU:
    """A CPU tier of `capacity` engine blocks holding units, least recently used dropped first
    (the offloading connector's LRUOffloadingManager)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.units: OrderedDict[Key, int] = OrderedDict()
        self.blocks = 0
        self.evicted = 0

    def match(self, units: Sequence[tuple[Key, int]], max_blocks: int) -> int:
        """Engine blocks of the units of `units` held here, from the first on."""
        total = 0
        held = self.units
        for key, n in units:
            if held.get(key) != n or total + n > max_blocks:
                break
            total += n
        return total

    def touch(self, units: Sequence[tuple[Key, int]]) -> None:
        """The units a request loads from here become the most recently used."""
        for key, _ in units:
            self.units.move_to_end(key)

    def store(self, key: Key, n: int) -> None:
        held = self.units
        if key in held:
            held.move_to_end(key)
            return
        if n > self.capacity:
            return
        held[key] = n
        self.blocks += n
        while self.blocks > self.capacity:
            _, dropped = held.popitem(last=False)
            self.blocks -= dropped
            self.evicted += dropped
