"""One L3 store for the whole fleet: every replica saves the host pages it evicts there and
prefetches from it.

The store's pages are `AccountingStore`'s (one instance behind every replica's tiered cache, so a
prefix one replica saved is a hit for all). Reads go through one reader in issue order at the
store's bandwidth (`--shared-store-gbps`), whichever replica asked: the fleet shares the store's
throughput. A read's first byte comes `latency_s` after the prefetch is issued; the prefetch
policy still counts its timeout from the issue, and `best_effort` stops it at once, as SGLang's
`can_terminate_prefetch` does. The tokens in prefetch are capped at the fleet's sum of the
replicas' `prefetch_capacity_limit`s (each replica's own cap is not enforced apart).
"""

from __future__ import annotations

from kvtier.sim.servers.prefetch import Prefetch, PrefetchPolicy, PrefetchQueue, PrefetchRules


class SharedStoreQueue(PrefetchQueue):
    def __init__(
        self, rules: PrefetchRules, s_per_token: float, capacity: int, latency_s: float
    ) -> None:
        super().__init__(rules, s_per_token, capacity)
        self.latency_s = latency_s

    def issue(self, rid: int, op: Prefetch) -> bool:
        if not super().issue(rid, op):
            return False
        op.issued_s += self.latency_s  # the reader starts it no earlier than its first byte
        return True

    def ready_at(self, rid: int) -> float:
        op = self.ops[rid]
        issued = op.issued_s - self.latency_s
        policy = self.rules.policy
        if policy is PrefetchPolicy.BEST_EFFORT:
            return issued
        done = self.complete_at(rid)
        if policy is PrefetchPolicy.TIMEOUT:
            return min(done, issued + self.rules.timeout_s(op.tokens))
        return done
