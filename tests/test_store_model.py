"""Both stores behave like a dictionary of pages under any sequence of batched operations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtier.store.base import PageStore
from kvtier.store.disk import DiskStore
from kvtier.store.redis_store import RedisStore
from store_support import FP, chain, needs_redis, payloads, running_redis

HASHES = chain(8)
BLOBS = payloads(8, size=64)

operation = st.tuples(
    st.sampled_from(["put", "get", "delete", "prefix"]), st.integers(0, 7), st.integers(1, 4)
)


@pytest.fixture(
    scope="module", params=["disk", pytest.param("redis", marks=[needs_redis, pytest.mark.redis])]
)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PageStore]:
    workdir: Path = tmp_path_factory.mktemp("model")
    if request.param == "disk":
        yield DiskStore(workdir, FP)
    else:
        with running_redis(workdir) as srv:
            yield RedisStore(srv.url, FP)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(operation, max_size=25))
def test_store_matches_a_dict(store: PageStore, ops: list[tuple[str, int, int]]) -> None:
    store.delete(HASHES)
    model: dict[bytes, bytes] = {}
    for name, start, n in ops:
        hashes, blobs = HASHES[start : start + n], BLOBS[start : start + n]
        if name == "put":
            written = store.put(hashes, blobs)
            new = sum(h not in model for h in hashes)
            # disk skips pages it holds (content-addressed); Redis rewrites them
            assert written == (new if isinstance(store, DiskStore) else len(hashes))
            model.update(zip(hashes, blobs, strict=True))
        elif name == "get":
            assert store.get(hashes) == [model.get(h) for h in hashes]
        elif name == "delete":
            assert store.delete(hashes) == sum(model.pop(h, None) is not None for h in hashes)
        else:
            leading = next((i for i, h in enumerate(hashes) if h not in model), len(hashes))
            assert store.exists_prefix(hashes) == leading
