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
*unit*, the run of full engine blocks whose last token lies in one trace block (`prompt_units`);
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
from dataclasses import dataclass

Key = int  # a trace block id (>= 0), or a request's own block (< 0, `own_key`)
OWN_SHIFT = 32  # own blocks of request r at position k: -1 - (r << OWN_SHIFT) - k


def own_key(rid: int, position: int) -> Key:
    return -1 - (rid << OWN_SHIFT) - position


def prompt_units(
    blocks: Sequence[int], input_len: int, trace_block: int, block_size: int
) -> tuple[tuple[Key, int], ...]:
    """(key, engine blocks) of each unit of a prompt's full engine blocks, in order.

    vLLM block b of the prompt (tokens b x size ... (b + 1) x size - 1) is named by the trace
    block holding its last token; that trace block's id names the whole prefix up to it, so equal
    ids give equal blocks. When the trace block is a multiple of the engine block, a unit is one
    trace block's full engine blocks; otherwise every engine block is a unit of its own, named by
    its trace block and its end within it.
    """
    full = input_len // block_size
    if trace_block % block_size == 0:
        per = trace_block // block_size
        units = [(key, per) for key in blocks[: full // per]]
        if full % per:
            units.append((blocks[full // per], full % per))
        return tuple(units)
    out = []
    for b in range(full):
        end = (b + 1) * block_size
        t = (end - 1) // trace_block
        key = (
            blocks[t] if end == (t + 1) * trace_block else (blocks[t] << 20) + end - t * trace_block
        )
        out.append((key, 1))
    return tuple(out)


@dataclass(slots=True, eq=False)
class Unit:
    """A cached unit: its engine blocks and how many running requests hold it."""

    key: Key
    blocks: int
    ref: int = 0


class BlockPool:
    """`num_blocks` engine blocks (the null block already taken out)."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.cached: dict[Key, Unit] = {}
        self.queue: OrderedDict[Key, Unit] = OrderedDict()  # free cached units, LRU first
        self.queued_blocks = 0
        self.plain = num_blocks  # free unhashed blocks, at the queue's front
        self.evicted = 0  # cached blocks whose hash was dropped
        self.version = 0  # counts the changes that can make a failed admission fit

    @property
    def free(self) -> int:
        """get_num_free_blocks: the free queue's length."""
        return self.plain + self.queued_blocks

    def match(
        self, units: Sequence[tuple[Key, int]], max_blocks: int
    ) -> tuple[list[Unit], int, int]:
        """The cached units leading `units`, no more than `max_blocks` engine blocks in all;
        their blocks, and those of them in the free queue (held by nobody: touching them takes
        them off it)."""
        hit: list[Unit] = []
        total = idle = 0
        if not self.caching:
            return hit, total, idle
        cached = self.cached
        for key, n in units:
            unit = cached.get(key)
            if unit is None or unit.blocks != n or total + n > max_blocks:
                break
            hit.append(unit)
            total += n
            if not unit.ref:
                idle += n
        return hit, total, idle

    def touch(self, units: Sequence[Unit]) -> None:
        self.version += 1
        for unit in units:
            if unit.ref == 0:
                del self.queue[unit.key]
                self.queued_blocks -= unit.blocks
            unit.ref += 1

    def take(self, n: int) -> None:
        """get_new_blocks(n): the queue's front first, evicting cached units as it goes."""
        if n > self.free:
            raise ValueError(f"cannot take {n} blocks, {self.free} free")
        while self.plain < n:
            _, unit = self.queue.popitem(last=False)
            self.queued_blocks -= unit.blocks
            del self.cached[unit.key]
            self.evicted += unit.blocks
            self.plain += unit.blocks
        self.plain -= n

    def cache(self, key: Key, n: int) -> Unit | None:
        """Hash `n` blocks the caller holds under `key`; None when caching is off or `key` is
        cached already (the caller's copy stays unhashed)."""
        if not self.caching or key in self.cached:
            return None
        unit = Unit(key, n, 1)
        self.cached[key] = unit
        self.version += 1
        return unit

    def release(self, held: Sequence[Unit], private: int) -> None:
        """free(): the request's cached units, tail first, to the queue's end; its `private`
        unhashed blocks to the front."""
        self.version += 1
        self.plain += private
        for unit in reversed(held):
            unit.ref -= 1
            if unit.ref == 0:
                self.queue[unit.key] = unit
                self.queued_blocks += unit.blocks


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
