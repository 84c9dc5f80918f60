"""Random operation sequences against the tiered cache, every invariant checked after each step.

Each run draws a configuration (write policy, eviction policy, tier sizes, L3 store or not,
copies that land at once or only when the machine says so, page indices as runs or lists, keys
as chained hashes or as token keys viewing each request's int64 array) and then admits,
finishes and aborts requests, inserts, matches, locks, unlocks, evicts, loads back and completes
copies. After every
step: `check_integrity` (page ownership, sizes, locks, pins, tree shape) and the data check (each
settled page holds its own key on every tier). At teardown everything is released and every page
of every tier must be back in its free list.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cache_support import DictStore, ManualTransfer, TaggedStorage, check_tags
from kvtier.cache import (
    Admission,
    EvictionPolicy,
    ImmediateTransfer,
    Tier,
    TieredCache,
    TreeNode,
    WritePolicy,
    abort,
    admit,
    finish,
    page_hashes,
    page_keys,
)
from kvtier.cache.keys import KeyRun, PageKey

OPERATIONS = 0
MIN_OPERATIONS = 100_000

TOKENS = st.lists(st.integers(0, 3), max_size=10)
BURST = 200  # operations per burst rule


def _keys(tokens: list[int], prior: PageKey = b"", packed: bool = False) -> KeyRun:
    """Page size 1 over a 4-letter alphabet: many shared prefixes. Chained like real page hashes
    or, `packed`, token keys viewing an int64 array of their own (as an engine's buffer)."""
    if packed:
        return page_keys(array("q", tokens), 1)
    assert isinstance(prior, bytes)
    return page_hashes(tokens, 1, prior)


def _on_tokens(op: str, name: str) -> Callable[..., None]:
    """A rule running the machine's `op` method on a drawn token list, shown as `name` in a
    shrunk failure's steps."""

    def apply(self: CacheMachine, tokens: list[int]) -> None:
        self.step(getattr(self, op), tokens)

    apply.__name__ = apply.__qualname__ = name
    return rule(tokens=TOKENS)(apply)  # type: ignore[no-any-return]


class CacheMachine(RuleBasedStateMachine):
    cache: TieredCache
    device: TaggedStorage

    @initialize(
        write_policy=st.sampled_from(list(WritePolicy)),
        eviction=st.sampled_from(list(EvictionPolicy)),
        device_pages=st.integers(4, 24),
        host_pages=st.sampled_from([0, 6, 16, 40]),
        with_store=st.booleans(),
        manual=st.booleans(),
        page_runs=st.booleans(),
        packed=st.booleans(),
    )
    def setup(
        self,
        write_policy: WritePolicy,
        eviction: EvictionPolicy,
        device_pages: int,
        host_pages: int,
        with_store: bool,
        manual: bool,
        page_runs: bool,
        packed: bool,
    ) -> None:
        self.device = TaggedStorage(Tier.DEVICE, device_pages)
        host = TaggedStorage(Tier.HOST, host_pages) if host_pages else None
        self.manual = ManualTransfer() if manual else None
        self.cache = TieredCache(
            self.device,
            host,
            self.manual or ImmediateTransfer(),
            write_policy=write_policy,
            eviction=eviction,
            store=DictStore() if with_store and host else None,
            page_runs=page_runs,
        )
        self.running: list[Admission] = []
        self.locks: list[TreeNode] = []
        # token keys cannot name store pages: packed keys only in a cache without a store
        self.packed = packed and self.cache.store is None
        # KV events (hash keys only: a token key recurs on other paths): the device's keys as
        # the tree's log of stored / removed runs replays them
        if not self.packed:
            self.cache.tree.device_log = []
        self.announced: set[PageKey] = set()

    # ---- operations (hypothesis rules and random bursts both call these) ----

    def op_admit(self, tokens: list[int], extra: int) -> None:
        keys = _keys(tokens, packed=self.packed)
        adm = admit(self.cache, keys, extra)
        if adm is None:
            return
        assert len(adm.pages) == len(keys) + extra and len(set(adm.pages)) == len(adm.pages)
        assert adm.device_hit + adm.host_hit + adm.store_hit == adm.num_cached
        self.device.fill(adm.pages[adm.num_cached : len(keys)], keys[adm.num_cached :])
        self.running.append(adm)

    def op_finish(self, index: int, grow: list[int]) -> None:
        adm = self.running.pop(index)
        grow = grow[: len(adm.pages) - len(adm.keys)]
        more = _keys(grow, adm.keys[-1] if adm.keys else b"", self.packed)
        n = len(adm.keys)
        self.device.fill(adm.pages[n : n + len(more)], more)
        prefix_len = finish(self.cache, adm, adm.keys + more)
        assert adm.num_cached <= prefix_len <= n + len(more)

    def op_abort(self, index: int) -> None:
        abort(self.cache, self.running.pop(index))

    def op_insert(self, tokens: list[int]) -> None:
        keys = _keys(tokens, packed=self.packed)
        pages = self.cache.alloc_device(len(keys))
        if pages is None:
            return
        self.device.fill(pages, keys)
        result = self.cache.insert(keys, pages)
        self.cache.free_device(pages[: result.prefix_len])

    def op_match_and_lock(self, tokens: list[int]) -> None:
        keys = _keys(tokens, packed=self.packed)
        match = self.cache.match_prefix(keys)
        cached = match.num_device_pages + match.num_host_pages + match.num_store_pages
        assert cached <= len(keys)
        self.cache.lock(match.last_node)
        self.locks.append(match.last_node)

    def op_unlock(self, index: int) -> None:
        self.cache.unlock(self.locks.pop(index))

    def op_load_back(self, tokens: list[int]) -> None:
        match = self.cache.match_prefix(_keys(tokens, packed=self.packed))
        load = self.cache.load_back(match)
        if load is not None:
            assert load.num_loaded == match.num_host_pages
            assert len(load.device_pages) == match.num_device_pages + match.num_host_pages

    def op_evict(self, tier: Tier, n: int) -> None:
        if tier is Tier.HOST and self.cache.host is None:
            return
        result = self.cache.evict(tier, n)
        if result.freed < n:
            tree = self.cache.tree
            assert not any(tree.is_candidate(node, tier) for node in tree.nodes())

    def op_complete(self, n: int) -> None:
        if self.manual is not None:
            self.manual.complete(n)
        self.cache.poll()

    def op_flush(self) -> None:
        self.cache.flush()
        assert self.cache.copies_in_flight == 0

    def step(self, op: Callable[..., None], *args: object) -> None:
        global OPERATIONS
        OPERATIONS += 1
        op(*args)

    # ---- hypothesis rules: shrinkable single operations ----

    @rule(tokens=TOKENS, extra=st.integers(0, 2))
    def admit_request(self, tokens: list[int], extra: int) -> None:
        self.step(self.op_admit, tokens, extra)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), grow=st.lists(st.integers(0, 3), max_size=2))
    def finish_request(self, data: st.DataObject, grow: list[int]) -> None:
        self.step(self.op_finish, data.draw(st.integers(0, len(self.running) - 1)), grow)

    insert_fresh = _on_tokens("op_insert", "insert_fresh")
    match_and_lock = _on_tokens("op_match_and_lock", "match_and_lock")
    load_back = _on_tokens("op_load_back", "load_back")

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def abort_request(self, data: st.DataObject) -> None:
        self.step(self.op_abort, data.draw(st.integers(0, len(self.running) - 1)))

    @precondition(lambda self: self.locks)
    @rule(data=st.data())
    def unlock(self, data: st.DataObject) -> None:
        self.step(self.op_unlock, data.draw(st.integers(0, len(self.locks) - 1)))

    @rule(tier=st.sampled_from([Tier.DEVICE, Tier.HOST]), n=st.integers(1, 12))
    def evict(self, tier: Tier, n: int) -> None:
        self.step(self.op_evict, tier, n)

    @rule(n=st.integers(1, 3))
    def complete_copies(self, n: int) -> None:
        self.step(self.op_complete, n)

    @rule()
    def flush(self) -> None:
        self.step(self.op_flush)

    # ---- a burst: many operations from one seeded generator, checked after each ----

    @rule(seed=st.integers(0, 2**32 - 1))
    def burst(self, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(BURST):
            self.step(*self._random_op(rng))
            self.consistent()

    def _random_op(self, rng: random.Random) -> tuple[Callable[..., None], ...]:
        def tokens() -> list[int]:
            return [rng.randrange(4) for _ in range(rng.randrange(11))]

        kind = rng.randrange(10)
        if kind == 0:
            return (self.op_admit, tokens(), rng.randrange(3))
        if kind == 1 and self.running:
            grow = [rng.randrange(4) for _ in range(rng.randrange(3))]
            return (self.op_finish, rng.randrange(len(self.running)), grow)
        if kind == 2 and self.running:
            return (self.op_abort, rng.randrange(len(self.running)))
        if kind == 3:
            return (self.op_insert, tokens())
        if kind == 4 and len(self.locks) < 6:
            return (self.op_match_and_lock, tokens())
        if kind in (4, 5) and self.locks:
            return (self.op_unlock, rng.randrange(len(self.locks)))
        if kind == 6:
            return (self.op_load_back, tokens())
        if kind == 7:
            return (self.op_evict, rng.choice([Tier.DEVICE, Tier.HOST]), rng.randint(1, 12))
        if kind == 8:
            return (self.op_complete, rng.randint(1, 3))
        if kind == 9:
            return (self.op_flush,)
        return (self.op_admit, tokens(), rng.randrange(3))

    @invariant()
    def consistent(self) -> None:
        held = [p for adm in self.running for p in adm.pages[adm.num_cached :]]
        self.cache.check_integrity(held)
        check_tags(self.cache)
        tree = self.cache.tree
        if tree.device_log is not None:
            for stored, keys in tree.device_log:
                (self.announced.update if stored else self.announced.difference_update)(keys)
            tree.device_log = []
            on_device = {k for n in tree.nodes() if n.device is not None for k in n.keys}
            assert self.announced == on_device

    def teardown(self) -> None:
        if not hasattr(self, "cache"):
            return
        cache = self.cache
        for adm in self.running:
            abort(cache, adm)
        for node in self.locks:
            cache.unlock(node)
        cache.flush()
        cache.evict(Tier.DEVICE, cache.device_pool.capacity)
        cache.evict(Tier.HOST, cache.host_pool.capacity)
        cache.check_integrity([])
        assert not cache.tree.root.children, "pages left in the tree after releasing everything"
        assert cache.device_pool.num_free == cache.device_pool.capacity
        assert cache.host_pool.num_free == cache.host_pool.capacity


CacheMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_cache_machine = CacheMachine.TestCase


def test_machine_ran_enough_operations() -> None:
    if OPERATIONS == 0:
        pytest.skip("the state machine did not run in this session")
    print(f"cache state machine: {OPERATIONS} operations")
    assert OPERATIONS >= MIN_OPERATIONS
