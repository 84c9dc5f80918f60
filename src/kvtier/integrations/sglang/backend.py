"""The SGLang HiCache storage backend over kvtier's page stores.

`KvtierHiCacheBackend` holds the whole implementation; SGLang's class is built from it and
SGLang's `HiCacheStorage` by `sglang_class()`, the first time it is asked for, so importing this
module imports torch but not SGLang.

Pages move between SGLang's host pool and the store as the pool's flat pages
(`get_data_page(index, flat=True)` / `set_from_flat_data_page`), the same bytes SGLang's `file`
backend writes, so any host pool class and memory layout (pinned or not) works without CUDA.
Each registered pool (the KV pool, and the named pools of hybrid models) gets its own store
under its own fingerprint (see `config.py`). Every call returns per-page results and never
raises for anything the store does: a page that is missing, damaged, written under another
fingerprint or of the wrong size is a miss, and a store that cannot be reached gives misses and
refused writes (kvtier's `ResilientStore`) until it answers again.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import shutil
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from kvtier.errors import KvtierError
from kvtier.integrations.sglang.config import (
    CLASS_NAME,
    TESTED_SGLANG_VERSIONS,
    BackendOptions,
    PoolShape,
    StorageScope,
    fingerprint,
    page_hash,
)
from kvtier.integrations.sglang.pages import PageMemory, tensor_bytes, tensor_memory
from kvtier.store import DiskStore, RedisStore, ResilientStore, StoreFingerprint, open_store
from kvtier.store.base import StoreStats

logger = logging.getLogger(__name__)

REQUIRED_CALLS = ("batch_get_v1", "batch_set_v1", "register_mem_host_pool_v2")
KV_POOL = "kv"
IO_CHUNK_BYTES = 4 << 20  # staged pages per store call: about this many bytes (see _chunks)
SCAN_BATCH = 512  # keys unlinked per round trip when a Redis store is cleared


@dataclass
class _Pool:
    """One registered host pool and the store its pages live in."""

    name: str
    host_pool: Any
    fingerprint: StoreFingerprint
    store: ResilientStore
    page_bytes: int
    step: int  # host indices per page in the calls' host_indices (the logical page size)
    memory: PageMemory | None  # where its pages lie, when the store can move them in place
    put_lock: threading.Lock = field(default_factory=threading.Lock)


class KvtierHiCacheBackend:
    """kvtier's disk or Redis store behind SGLang's `HiCacheStorage` calls.

    Built by SGLang's dynamic loader as `cls(storage_config, kwargs)`; the store is opened when
    SGLang registers its host pool, since the pool's geometry is part of the fingerprint.
    """

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        self.storage_config = storage_config
        self.options = BackendOptions.from_extra_config(storage_config.extra_config)
        self.scope = StorageScope.from_config(storage_config, self.options.model_id)
        self.enable_storage_metrics = bool(getattr(storage_config, "enable_storage_metrics", 0))
        self.registered_pools: dict[Any, Any] = {}
        self.mem_pool_host: Any = None
        self._pools: dict[str, _Pool] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._logged: set[str] = set()
        self._size_mismatches = 0
        self._metrics: dict[str, list[float]] = {
            "prefetch_pgs": [],
            "backup_pgs": [],
            "prefetch_bandwidth": [],
            "backup_bandwidth": [],
        }

    # -- registration ------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """The anchor (KV) host pool: opens the store its pages live in."""
        self.mem_pool_host = mem_pool_host
        self._attach(KV_POOL, mem_pool_host)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A named pool of a hybrid model (SGLang's v2 calls): a store of its own."""
        self.registered_pools[host_pool_name] = host_pool
        self._attach(str(host_pool_name), host_pool)

    def on_host_pools_registered(self) -> None:
        return None

    def _attach(self, name: str, host_pool: Any) -> None:
        with self._lock:
            known = self._pools.get(name)
            if known is not None and known.host_pool is host_pool:
                return
            page_bytes = _flat_page_bytes(host_pool)
            fp = fingerprint(self.scope, name, PoolShape.of(host_pool, page_bytes))
            try:
                store = open_store(self.options.url, fp, self.options.store)
            except KvtierError as exc:
                raise ValueError(f"kvtier SGLang backend: {exc}") from None
            step = int(getattr(host_pool, "logical_page_size", host_pool.page_size))
            if known is not None:
                known.store.close()
            memory = PageMemory.of(host_pool, page_bytes)
            self._pools[name] = _Pool(name, host_pool, fp, store, page_bytes, step, memory)
            logger.info(
                "kvtier HiCache store for pool %r at %s: fingerprint %s, %d-byte pages",
                name,
                _shown_url(self.options.url),
                fp.digest.hex(),
                page_bytes,
            )

    # -- v1 interface (`"interface_v1": 1`): pages of the KV host pool, by host index --------

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """How many leading pages of `keys` the store holds (header-checked)."""
        pool = self._pool(KV_POOL)
        if pool is None or not keys:
            return 0
        return pool.store.exists_prefix([page_hash(k) for k in keys])

    def batch_get_v1(
        self, keys: list[str], host_indices: torch.Tensor, extra_info: Any = None
    ) -> list[bool]:
        """Read each page into the host pool at its slot of `host_indices`; True per page read
        and verified, False for a miss (the slot is then left as it was)."""
        return self._get_pages(KV_POOL, keys, host_indices, metrics=True)

    def batch_set_v1(
        self, keys: list[str], host_indices: torch.Tensor, extra_info: Any = None
    ) -> list[bool]:
        """Write the host pool's pages at `host_indices` under `keys`; True per page stored."""
        return self._set_pages(KV_POOL, keys, host_indices, metrics=True)

    # -- pool-transfer interface (v2): named pools of hybrid models ---------------------------

    def batch_exists_v2(
        self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None
    ) -> Any:
        """SGLang's `PoolTransferResult`: the KV prefix the store holds, cut to what every
        extra pool can restore under its hit policy (all pages, or the trailing pages); a pool
        with a policy this backend does not know restores nothing."""
        hs = _hicache_storage()
        kv = self._pool(KV_POOL)
        hashes = [page_hash(k) for k in keys]
        kv_pages = kv.store.exists_prefix(hashes) if kv is not None and hashes else 0
        hit_count: dict[Any, int] = {hs.PoolName.KV: kv_pages} if kv_pages else {}
        restorable = set(range(1, kv_pages + 1))
        for transfer in pool_transfers or []:
            if not restorable:
                break
            pool = self._pool(str(transfer.name))
            pool_restorable: set[int] = set()
            if pool is not None and transfer.hit_policy == hs.PoolHitPolicy.ALL_PAGES:
                boundary = pool.store.exists_prefix(hashes[:kv_pages])
                pool_restorable = set(range(1, boundary + 1))
            elif pool is not None and transfer.hit_policy == hs.PoolHitPolicy.TRAILING_PAGES:
                trailing = max(1, len(transfer.keys) if transfer.keys else 1)
                held = [pool.store.exists_prefix([h]) == 1 for h in hashes[:kv_pages]]
                pool_restorable = {
                    n for n in range(1, kv_pages + 1) if all(held[max(0, n - trailing) : n])
                }
            elif pool is not None:
                self._log_once(f"policy {transfer.hit_policy}: restores nothing here")
            boundary = max(pool_restorable, default=0)
            if boundary:
                hit_count[transfer.name] = boundary
            restorable &= pool_restorable
        ordered = sorted(restorable)
        return hs.PoolTransferResult(ordered[-1] if ordered else 0, hit_count, ordered)

    def batch_get_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        """Read each transfer's pages into its pool; per pool name, True per page read."""
        return {
            t.name: self._get_pages(str(t.name), t.keys or [], t.host_indices, metrics=False)
            for t in transfers
        }

    def batch_set_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[str, list[bool]]:
        """Write each transfer's pages from its pool; per pool name, True per page stored."""
        return {
            t.name: self._set_pages(str(t.name), t.keys or [], t.host_indices, metrics=False)
            for t in transfers
        }

    # -- per-key interface: flat page tensors (SGLang's generic path) --------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def get(
        self, key: str, target_location: Any = None, target_sizes: Any = None
    ) -> torch.Tensor | None:
        """The page as a flat tensor (written into `target_location` when given), or None."""
        return self.batch_get([key], [target_location])[0]

    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        pool = self._pool(KV_POOL)
        if pool is None or not keys:
            return [None] * len(keys)
        targets = list(target_locations or [None] * len(keys))
        if len(targets) != len(keys):
            self._log_once("batch_get: target count differs from key count")
            return [None] * len(keys)
        pages: list[torch.Tensor] = []
        for target in targets:
            size_ok = target is None or target.numel() * target.element_size() == pool.page_bytes
            if target is None or not size_ok or tensor_memory(target) is None:
                pages.append(torch.empty(pool.page_bytes, dtype=torch.uint8))
            else:
                pages.append(target)
        views = [[tensor_bytes(page)] for page in pages]
        found = pool.store.get_into([page_hash(k) for k in keys], views)
        out: list[torch.Tensor | None] = []
        for ok, page, target in zip(found, pages, targets, strict=True):
            if not ok:
                out.append(None)
            elif target is None:
                out.append(page.view(pool.host_pool.dtype))
            elif page is target:
                out.append(target)
            elif target.numel() * target.element_size() != pool.page_bytes:
                self._count_mismatch()
                out.append(None)
            else:
                try:
                    target.copy_(page.view(target.dtype).view(target.shape))
                except Exception as exc:  # a target this cannot write (not host memory)
                    self._log_once(f"batch_get target refused: {type(exc).__name__}: {exc}")
                    out.append(None)
                else:
                    out.append(target)
        return out

    def set(
        self,
        key: str,
        value: Any = None,
        target_location: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        return self.batch_set([key], [value])

    def batch_set(
        self,
        keys: list[str],
        values: Any = None,
        target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        """Store flat page tensors; True when every page was stored."""
        pool = self._pool(KV_POOL)
        values = list(values or [])
        if pool is None or len(values) != len(keys):
            return False
        if not keys:
            return True
        payloads = [tensor_bytes(v) for v in values]
        if any(p.nbytes != pool.page_bytes for p in payloads):
            self._count_mismatch()
            return False
        return all(self._put(pool, [page_hash(k) for k in keys], [[p] for p in payloads]))

    # -- administration -----------------------------------------------------------------------

    def clear(self) -> bool:
        """Remove every page of this backend's fingerprints (all of them, whichever process
        wrote them); True when every store was cleared."""
        ok = True
        for pool in list(self._pools.values()):
            try:
                _clear_store(pool.store, self.options.store.timeout_s)
            except Exception as exc:  # a store that cannot be reached: report, do not raise
                logger.error("kvtier HiCache store for pool %r not cleared: %s", pool.name, exc)
                ok = False
        return ok

    def get_stats(self) -> Any:
        """SGLang's `StorageMetrics` (pages and GB/s of each v1 batch since the last call) when
        storage metrics are on, else None."""
        if not self.enable_storage_metrics:
            return None
        try:
            from sglang.srt.observability.metrics_collector import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
                StorageMetrics,
            )
        except ImportError:
            return None
        metrics = StorageMetrics()
        with self._lock:
            for name, values in self._metrics.items():
                getattr(metrics, name).extend(values)
                values.clear()
        return metrics

    def kvtier_stats(self) -> dict[str, StoreStats]:
        """kvtier's counters of each pool's store (hits, misses, corrupt, foreign, refused...)."""
        return {name: pool.store.stats() for name, pool in self._pools.items()}

    @property
    def size_mismatches(self) -> int:
        """Pages found under a matching fingerprint whose size is not a page of the pool."""
        return self._size_mismatches

    def fingerprints(self) -> dict[str, StoreFingerprint]:
        return {name: pool.fingerprint for name, pool in self._pools.items()}

    def close(self) -> None:
        for pool in self._pools.values():
            pool.store.close()

    # -- internals ----------------------------------------------------------------------------

    def _pool(self, name: str) -> _Pool | None:
        pool = self._pools.get(name)
        if pool is None:
            self._log_once(f"no host pool {name!r} registered: its pages are misses")
        return pool

    def _page_starts(self, pool: _Pool, count: int, host_indices: Any) -> list[int] | None:
        """The host index of each page's first slot; None when `host_indices` is not `count`
        whole pages."""
        if host_indices is None:
            return None if count else []
        if host_indices.numel() != count * pool.step:
            self._log_once(
                f"pool {pool.name!r}: {host_indices.numel()} host indices for {count} pages "
                f"of {pool.step}"
            )
            return None
        if host_indices.device.type == "cpu":  # through numpy: a tenth of torch's cost
            starts: list[int] = host_indices.numpy()[:: pool.step].tolist()
        else:
            starts = host_indices[:: pool.step].tolist()
        return starts

    def _targets(
        self, name: str, keys: list[str], host_indices: Any
    ) -> tuple[_Pool, list[int]] | None:
        """The registered pool `name` and the first host slot of each page, or None when there
        is nothing to move (no keys, an unknown pool, indices that do not fit the pages)."""
        pool = self._pool(name)
        starts = None if pool is None else self._page_starts(pool, len(keys), host_indices)
        if pool is None or starts is None or not keys:
            return None
        return pool, starts

    def _get_pages(
        self, name: str, keys: list[str], host_indices: Any, metrics: bool
    ) -> list[bool]:
        """Read pages into the pool: in place (the store fills the page's runs of the pool's
        memory), or through a staging buffer set into the pool for a pool without them."""
        target = self._targets(name, keys, host_indices)
        if target is None:
            return [False] * len(keys)
        pool, starts = target
        began = time.perf_counter()
        hashes = [page_hash(k) for k in keys]
        results: list[bool] = []
        for lo, hi in self._batches(pool, len(keys)):
            runs, staged = self._page_runs(pool, starts[lo:hi], reading=True)
            found = pool.store.get_into(hashes[lo:hi], runs)
            for i, ok in enumerate(found):
                if ok and i in staged:
                    found[i] = self._load(pool, starts[lo + i], staged[i])
            results += found
        if metrics:
            self._record("prefetch", pool, sum(results), time.perf_counter() - began)
        return results

    def _set_pages(
        self, name: str, keys: list[str], host_indices: Any, metrics: bool
    ) -> list[bool]:
        """Write pages from the pool: from its memory in place, or staged for a pool without
        page runs."""
        target = self._targets(name, keys, host_indices)
        if target is None:
            return [False] * len(keys)
        pool, starts = target
        began = time.perf_counter()
        results = [False] * len(keys)
        for lo, hi in self._batches(pool, len(keys)):
            try:
                runs, _ = self._page_runs(pool, starts[lo:hi], reading=False)
            except Exception as exc:  # a pool that cannot give these pages: they fail
                self._log_once(f"pool {name!r} gave no flat page: {type(exc).__name__}: {exc}")
                continue
            hashes = [page_hash(k) for k in keys[lo:hi]]
            results[lo:hi] = self._put(pool, hashes, runs)
        if metrics:
            self._record("backup", pool, sum(results), time.perf_counter() - began)
        return results

    def _batches(self, pool: _Pool, count: int) -> list[tuple[int, int]]:
        """Pages moved in place go to the store as one batch; staged pages in runs of about
        IO_CHUNK_BYTES, so each is still in the CPU's cache when the store takes it."""
        return [(0, count)] if pool.memory is not None else _chunks(count, pool.page_bytes)

    def _page_runs(
        self, pool: _Pool, starts: list[int], *, reading: bool
    ) -> tuple[list[list[memoryview]], dict[int, torch.Tensor]]:
        """Per page, the memory the store moves it through: the page's runs in the pool, or a
        slice of this thread's staging buffer (filled from the pool when writing). The staged
        pages' slices by position, to be set into the pool after a read."""
        runs: list[list[memoryview]] = []
        staged: dict[int, torch.Tensor] = {}
        staging = None
        for i, start in enumerate(starts):
            page = None if pool.memory is None else pool.memory.runs(pool.host_pool, start)
            if page is None:
                if staging is None:
                    staging = self._staging(len(starts) * pool.page_bytes)
                slot = staging[i * pool.page_bytes : (i + 1) * pool.page_bytes]
                if not reading:
                    _copy_page(pool, start, slot)
                staged[i] = slot
                page = [tensor_bytes(slot)]
            runs.append(page)
        return runs, staged

    def _put(self, pool: _Pool, hashes: list[bytes], pages: list[list[memoryview]]) -> list[bool]:
        """Store pages; per page whether it is in the store now (written, or already there).

        The store reports how many pages it refused; with none refused all are in, with all
        refused none are, and in between each page is probed."""
        if not hashes:
            return []
        with pool.put_lock:
            before = pool.store.stats().refused
            pool.store.put_parts(hashes, pages)
            refused = pool.store.stats().refused - before
        if refused <= 0:
            return [True] * len(hashes)
        if refused >= len(hashes):
            return [False] * len(hashes)
        return [pool.store.exists_prefix([h]) == 1 for h in hashes]

    def _load(self, pool: _Pool, start: int, page: torch.Tensor) -> bool:
        try:
            pool.host_pool.set_from_flat_data_page(start, page.view(pool.host_pool.dtype))
        except Exception as exc:  # a slot the pool refuses: that page is a miss
            self._log_once(f"pool {pool.name!r} refused a page: {type(exc).__name__}: {exc}")
            return False
        return True

    def _staging(self, nbytes: int) -> torch.Tensor:
        """This thread's reusable byte buffer of `nbytes` (SGLang reads and writes from
        separate threads)."""
        buf: torch.Tensor | None = getattr(self._local, "staging", None)
        if buf is None or buf.numel() < nbytes:
            buf = torch.empty(nbytes, dtype=torch.uint8)
            self._local.staging = buf
        return buf[:nbytes]

    def _record(self, kind: str, pool: _Pool, pages: int, seconds: float) -> None:
        if not self.enable_storage_metrics or pages == 0:
            return
        with self._lock:
            self._metrics[f"{kind}_pgs"].append(pages)
            self._metrics[f"{kind}_bandwidth"].append(
                pages * pool.page_bytes / 1e9 / max(seconds, 1e-9)
            )

    def _count_mismatch(self) -> None:
        with self._lock:
            self._size_mismatches += 1
        self._log_once("a stored page's size is not the host pool's page size: a miss")

    def _log_once(self, message: str) -> None:
        with self._lock:
            if message in self._logged:
                return
            self._logged.add(message)
        logger.warning("kvtier HiCache store: %s", message)


def _chunks(count: int, page_bytes: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of `count` pages of about IO_CHUNK_BYTES each (one page at least): a batch
    goes to the store in runs small enough to stay in the CPU's cache between the copy, the
    checksum and the write, and large enough to pipeline small pages to Redis."""
    step = max(1, IO_CHUNK_BYTES // max(page_bytes, 1))
    return [(lo, min(count, lo + step)) for lo in range(0, count, step)]


def _flat_page_bytes(host_pool: Any) -> int:
    try:
        page = host_pool.get_data_page(0, flat=False)
        return int(page.numel() * page.element_size())
    except Exception as exc:
        raise ValueError(
            f"kvtier SGLang backend: host pool {type(host_pool).__name__} gives no flat pages "
            f"(get_data_page failed: {type(exc).__name__}: {exc}); this backend moves whole "
            "flat pages and cannot store this pool"
        ) from None


def _copy_page(pool: _Pool, start: int, slot: torch.Tensor) -> None:
    """The flat page at host index `start` copied into `slot` in row-major order (what
    `get_data_page(flat=True)` gives, without a new tensor per page)."""
    page = pool.host_pool.get_data_page(start, flat=False)
    if page.numel() * page.element_size() != pool.page_bytes:
        page = pool.host_pool.get_data_page(start, flat=True)
    slot.view(page.dtype).view(page.shape).copy_(page)


def _clear_store(store: ResilientStore, timeout_s: float) -> None:
    """Remove every page of the store's fingerprint: its directory on disk, its keys in Redis."""
    inner = store.inner
    if isinstance(inner, DiskStore):
        probe = inner.path_of(b"\0")
        fp_dir = probe.parent.parent
        if fp_dir.is_symlink():
            fp_dir.unlink()
        elif fp_dir.exists():
            # descriptor-based on Linux: follows no symlink inside the directory
            shutil.rmtree(fp_dir)
        os.makedirs(fp_dir, exist_ok=True)
    elif isinstance(inner, RedisStore):
        from kvtier.store.redis_store import connect

        client = connect(inner.url, timeout_s=timeout_s)
        try:
            pattern = f"{inner.prefix}:{{{inner.fingerprint.digest.hex()}}}:*"
            batch: list[Any] = []
            for key in client.scan_iter(match=pattern, count=SCAN_BATCH):
                batch.append(key)
                if len(batch) >= SCAN_BATCH:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        finally:
            client.close()


def _shown_url(url: str) -> str:
    from kvtier.store.redis_url import redact

    return redact(url)


_CLASS: type | None = None
_CLASS_LOCK = threading.Lock()


def _hicache_storage() -> Any:
    """SGLang's `sglang.srt.mem_cache.hicache_storage` module, checked for the calls used."""
    module = importlib.import_module("sglang.srt.mem_cache.hicache_storage")
    missing = [name for name in REQUIRED_CALLS if not hasattr(module.HiCacheStorage, name)]
    if missing:
        raise ImportError(
            f"kvtier's SGLang backend needs HiCacheStorage.{', '.join(missing)}, which this "
            f"SGLang ({sglang_version()}) lacks; it supports SGLang "
            f"{', '.join(TESTED_SGLANG_VERSIONS)}"
        )
    return module


def sglang_version() -> str:
    """The installed SGLang's version, or "unknown"."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def sglang_class() -> type:
    """SGLang's storage class: `KvtierHiCacheBackend` on SGLang's `HiCacheStorage` (built once;
    imports SGLang)."""
    global _CLASS
    with _CLASS_LOCK:
        if _CLASS is None:
            base = _hicache_storage().HiCacheStorage
            version = sglang_version()
            if version not in TESTED_SGLANG_VERSIONS:
                logger.warning(
                    "kvtier's SGLang backend is tested with SGLang %s; this is %s",
                    ", ".join(TESTED_SGLANG_VERSIONS),
                    version,
                )

            def body(ns: dict[str, Any]) -> None:
                ns["__module__"] = "kvtier.integrations.sglang"
                ns["__qualname__"] = CLASS_NAME
                ns["__doc__"] = KvtierHiCacheBackend.__doc__

            _CLASS = types.new_class(CLASS_NAME, (KvtierHiCacheBackend, base), exec_body=body)
        return _CLASS
