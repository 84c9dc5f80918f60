"""A separate process using a store: `python store_worker.py URL put|get|churn PAGES SEED`.

`put` stores a chain of PAGES pages; `get` probes and reads it back and checks every byte;
`churn` writes and reads random runs of the chain 200 times in a disk store capped at a third
of it, so that several such processes race on the same files and evict each other's pages.
Each prints one JSON line of what it saw, for the multi-process tests.
"""

from __future__ import annotations

import json
import random
import sys

from kvtier.store import ResilientStore, StoreOptions, open_store
from kvtier.store.blob import HEADER_SIZE
from store_support import FP, chain, payloads


def churn(store: ResilientStore, hashes: list[bytes], blobs: list[bytes]) -> dict[str, int]:
    rng = random.Random()
    wrong = hits = 0
    for _ in range(200):
        start = rng.randrange(len(hashes))
        run = slice(start, min(len(hashes), start + rng.randint(1, 8)))
        store.put(hashes[run], blobs[run])
        got = store.get(hashes[run])
        wrong += sum(g is not None and g != b for g, b in zip(got, blobs[run], strict=True))
        hits += sum(g is not None for g in got)
    stats = store.stats()
    return {"wrong": wrong, "hits": hits, "corrupt": stats.corrupt, "evicted": stats.evicted}


def main(url: str, action: str, pages: int, seed: int) -> None:
    hashes, blobs = chain(pages, seed), payloads(pages, seed=seed)
    if action == "churn":
        cap = pages // 3 * (HEADER_SIZE + len(hashes[0]) + len(blobs[0]))
        store = open_store(url, FP, StoreOptions(capacity_bytes=cap))
        result: dict[str, object] = dict(churn(store, hashes, blobs))
    elif action == "put":
        store = open_store(url, FP)
        result = {"written": store.put(hashes, blobs)}
    else:
        store = open_store(url, FP)
        got = store.get(hashes)
        result = {
            "prefix": store.exists_prefix(hashes),
            "hits": sum(g is not None for g in got),
            "exact": got == blobs,
        }
    store.close()
    print(json.dumps(result | {"errors": store.stats().errors}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
