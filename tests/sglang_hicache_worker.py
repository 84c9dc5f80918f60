"""SGLang's side of the HiCache backend tests, run with the SGLang virtualenv's python.

    benchmarks/peers/.venv-sglang/bin/python tests/sglang_hicache_worker.py

It builds SGLang's real host pools on the CPU, has SGLang's own dynamic loader construct
kvtier's backend, and then answers requests, one JSON object per line on stdin, one JSON reply
per line on stdout ({"ok": true, "result": ...} or {"ok": false, "error": "..."}), so a test
can drive one or several instances while it kills and restarts the Redis server under them.
The helpers (`host_pool`, `storage_config`, `page_content`) are shared with
benchmarks/bench_sglang_hicache.py.

Page contents are a function of the page's key and a writer tag, so a reader can tell a page it
was served from the one it asked for without talking to the writer.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks" / "peers")]

warnings.filterwarnings("ignore", module=r"sglang\..*")
import stubs  # noqa: E402  (benchmarks/peers/stubs.py: CPU stand-ins for GPU-only imports)

stubs.install()

import torch  # noqa: E402
from sglang.srt.mem_cache.device_pool_info import (  # noqa: E402
    KVBufferLayout,
    KVBuffers,
    MHABufferInfo,
    MLABufferInfo,
)
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    HiCacheStorage,
    HiCacheStorageConfig,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
)
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import (  # noqa: E402
    HybridCacheController,
)
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_hash_str  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
CPU = torch.device("cpu")


def host_pool(
    kind: str,
    layout: str,
    *,
    layers: int = 2,
    heads: int = 2,
    head_dim: int = 16,
    kv_lora_rank: int = 32,
    rope_dim: int = 8,
    page_size: int = 4,
    device_tokens: int = 256,
    ratio: float = 2.0,
    dtype: str = "bfloat16",
) -> Any:
    """One of SGLang's host KV pools, built on the CPU (plain memory) for a small model."""
    torch_dtype = DTYPES[dtype]

    def ptrs(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64)

    common: dict[str, Any] = dict(
        pin_memory=False,
        device="cpu",
        device_capacity_tokens=device_tokens,
        start_layer=0,
        end_layer=layers,
    )
    if kind == "mha":
        k = tuple(
            torch.zeros(device_tokens, heads, head_dim, dtype=torch_dtype) for _ in range(layers)
        )
        v = tuple(
            torch.zeros(device_tokens, heads, head_dim, dtype=torch_dtype) for _ in range(layers)
        )
        buffers = KVBuffers(
            k=k, v=v, k_data_ptrs=ptrs(k), v_data_ptrs=ptrs(v), layout=KVBufferLayout.NHD
        )
        info = MHABufferInfo(
            buffers=buffers,
            page_size=page_size,
            head_num=heads,
            head_dim=head_dim,
            v_head_dim=head_dim,
            dtype=torch_dtype,
            device=CPU,
        )
        return MHATokenToKVPoolHost(info, ratio, 0, page_size, layout, **common)
    if kind == "mla":
        width = kv_lora_rank + rope_dim
        rows = tuple(torch.zeros(device_tokens, 1, width, dtype=torch_dtype) for _ in range(layers))
        info_mla = MLABufferInfo(
            buffers=rows,
            data_ptrs=ptrs(rows),
            layer_indices=tuple(range(layers)),
            device_layer_num=layers,
            page_size=page_size,
            kv_lora_rank=kv_lora_rank,
            qk_rope_head_dim=rope_dim,
            kv_cache_dim=width,
            dtype=torch_dtype,
            device=CPU,
        )
        return MLATokenToKVPoolHost(
            info_mla, ratio, 0, page_size, layout, target_layer_num=layers, **common
        )
    raise ValueError(f"unknown pool kind {kind!r}")


# one pipeline stage, no context parallelism, pages laid out layer first
ONE_STAGE: dict[str, Any] = {
    "pp_rank": 0, "pp_size": 1, "attn_cp_rank": 0, "attn_cp_size": 1, "is_page_first_layout": False
}  # fmt: skip


def storage_config(
    extra: dict[str, Any],
    *,
    model: str = "test/model",
    mla: bool = False,
    tp_rank: int = 0,
    tp_size: int = 1,
    metrics: bool = False,
) -> HiCacheStorageConfig:
    """The HiCacheStorageConfig SGLang's cache controller builds for one rank."""
    return HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        **ONE_STAGE,
        is_mla_model=mla,
        enable_storage_metrics=metrics,
        model_name=model,
        extra_config=extra,
    )


def keys_for(n: int, seed: int, page_size: int) -> list[str]:
    """`n` chained page keys as SGLang computes them (SHA-256 hex) for a seeded token run."""
    tokens = [(seed * 7919 + i) % 32000 for i in range(n * page_size)]
    return list(get_hash_str(tokens, None, page_size=page_size))


def page_content(key: str, tag: str, nbytes: int) -> torch.Tensor:
    """The bytes writer `tag` puts in page `key` (a function of both)."""
    seed = int.from_bytes(hashlib.sha256(f"{tag}:{key}".encode()).digest()[:8], "little")
    gen = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)


def flat_bytes(pool: Any, slot_page: int) -> torch.Tensor:
    """The flat page at host page `slot_page`, as bytes."""
    page = pool.get_data_page(slot_page * pool.page_size, flat=True)
    return page.contiguous().view(torch.uint8)


def slot_indices(pool: Any, slot_pages: list[int]) -> torch.Tensor:
    """SGLang's host_indices for whole pages at these host page numbers."""
    ps = pool.page_size
    if not slot_pages:
        return torch.empty(0, dtype=torch.int64)
    return torch.cat([torch.arange(p * ps, (p + 1) * ps, dtype=torch.int64) for p in slot_pages])


def write_slot(pool: Any, slot_page: int, data: torch.Tensor) -> None:
    pool.set_from_flat_data_page(slot_page * pool.page_size, data.view(pool.dtype))


class Instance:
    """One engine's storage side: a host pool and the backend SGLang's loader made for it."""

    def __init__(self, req: dict[str, Any]) -> None:
        pool_args = req.get("pool", {})
        self.kind = pool_args.get("kind", "mha")
        self.pool = host_pool(
            self.kind, pool_args.get("layout", "layer_first"), **_sizes(pool_args)
        )
        self.tag = req.get("tag", "model-a")
        extra_text = req.get("extra_config_json")
        if extra_text is not None:
            # the launch flag's string, parsed as SGLang's controller parses it
            extra, *_ = HybridCacheController.parse_storage_backend_extra_config(extra_text)
        else:
            extra = dict(req["extra_config"])
        config = storage_config(
            extra,
            model=req.get("model", "test/model"),
            mla=self.kind == "mla",
            tp_rank=req.get("tp_rank", 0),
            tp_size=req.get("tp_size", 1),
            metrics=req.get("metrics", False),
        )
        # what HiCacheController.attach_storage_backend does
        self.backend = StorageBackendFactory.create_backend(
            req.get("backend", "dynamic"), config, self.pool
        )
        self.backend.register_mem_pool_host(self.pool)
        self.backend.on_host_pools_registered()
        self.page_bytes = flat_bytes(self.pool, 0).numel()
        self.sidecar: Any = None

    def describe(self) -> dict[str, Any]:
        cls = type(self.backend)
        fps = getattr(self.backend, "fingerprints", dict)()
        return {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "is_hicache_storage": isinstance(self.backend, HiCacheStorage),
            "page_bytes": self.page_bytes,
            "fingerprints": {k: v.digest.hex() for k, v in fps.items()},
            "layout": self.pool.layout,
            "pool_class": type(self.pool).__name__,
        }

    # -- v1 --------------------------------------------------------------------------------

    def set_v1(self, keys: list[str], slots: list[int]) -> list[bool]:
        for key, slot in zip(keys, slots, strict=True):
            write_slot(self.pool, slot, page_content(key, self.tag, self.page_bytes))
        return list(self.backend.batch_set_v1(keys, slot_indices(self.pool, slots)))

    def get_v1(self, keys: list[str], slots: list[int], tag: str | None = None) -> dict[str, Any]:
        self._scribble(slots)
        got = list(self.backend.batch_get_v1(keys, slot_indices(self.pool, slots)))
        return self._verdict(keys, slots, got, tag)

    # -- SGLang's generic path: flat page tensors --------------------------------------------

    def set_generic(self, keys: list[str], slots: list[int]) -> bool:
        for key, slot in zip(keys, slots, strict=True):
            write_slot(self.pool, slot, page_content(key, self.tag, self.page_bytes))
        ps = self.pool.page_size
        data = [self.pool.get_data_page(slot * ps) for slot in slots]
        return bool(self.backend.batch_set(keys, data))

    def get_generic(self, keys: list[str], slots: list[int]) -> dict[str, Any]:
        """HiCacheController._generic_page_get: dummy pages, then set_from_flat_data_page."""
        self._scribble(slots)
        dummies = [self.pool.get_dummy_flat_data_page() for _ in keys]
        pages = self.backend.batch_get(keys, dummies)
        got = []
        for slot, page in zip(slots, pages, strict=True):
            if page is not None:
                self.pool.set_from_flat_data_page(slot * self.pool.page_size, page)
            got.append(page is not None)
        return self._verdict(keys, slots, got, None)

    # -- v2: a named sidecar pool ------------------------------------------------------------

    def add_sidecar(self, name: str, pool_args: dict[str, Any]) -> dict[str, Any]:
        self.sidecar = host_pool(
            pool_args.get("kind", "mha"),
            pool_args.get("layout", "layer_first"),
            **_sizes(pool_args),
        )
        self.backend.register_mem_host_pool_v2(self.sidecar, PoolName(name))
        return self.describe()

    def _transfer(self, name: str, keys: list[str], slots: list[int], policy: str) -> PoolTransfer:
        pool = self.pool if name == PoolName.KV.value else self.sidecar
        return PoolTransfer(
            name=PoolName(name),
            keys=keys,
            host_indices=slot_indices(pool, slots),
            hit_policy=PoolHitPolicy(policy),
        )

    def set_v2(self, name: str, keys: list[str], slots: list[int]) -> list[bool]:
        pool = self.pool if name == PoolName.KV.value else self.sidecar
        nbytes = flat_bytes(pool, 0).numel()
        for key, slot in zip(keys, slots, strict=True):
            write_slot(pool, slot, page_content(key, self.tag + name, nbytes))
        result = self.backend.batch_set_v2([self._transfer(name, keys, slots, "all_pages")])
        return list(result[PoolName(name)])

    def get_v2(self, name: str, keys: list[str], slots: list[int]) -> dict[str, Any]:
        pool = self.pool if name == PoolName.KV.value else self.sidecar
        nbytes = flat_bytes(pool, 0).numel()
        for slot in slots:
            write_slot(pool, slot, torch.full((nbytes,), 0xAB, dtype=torch.uint8))
        got = list(
            self.backend.batch_get_v2([self._transfer(name, keys, slots, "all_pages")])[
                PoolName(name)
            ]
        )
        exact = [
            ok and torch.equal(flat_bytes(pool, slot), page_content(key, self.tag + name, nbytes))
            for key, slot, ok in zip(keys, slots, got, strict=True)
        ]
        return {"got": got, "exact": exact}

    def exists_v2(self, keys: list[str], transfers: list[dict[str, Any]]) -> dict[str, Any]:
        pts = [self._transfer(t["name"], t.get("keys", keys), [], t["policy"]) for t in transfers]
        for pt in pts:
            pt.host_indices = None
        result = self.backend.batch_exists_v2(keys, pts)
        return {
            "kv_hit_pages": result.kv_hit_pages,
            "extra": {str(k): v for k, v in result.extra_pool_hit_pages.items()},
            "restorable": result.restorable_prefix_pages,
        }

    # -- helpers ----------------------------------------------------------------------------

    def _scribble(self, slots: list[int]) -> None:
        for slot in slots:
            write_slot(self.pool, slot, torch.full((self.page_bytes,), 0xAB, dtype=torch.uint8))

    def _verdict(
        self, keys: list[str], slots: list[int], got: list[bool], tag: str | None
    ) -> dict[str, Any]:
        """Per page: served (True from the backend) and exact (served and byte for byte the
        page written under that key by writer `tag`)."""
        tag = tag or self.tag
        exact = [
            bool(ok)
            and torch.equal(flat_bytes(self.pool, slot), page_content(key, tag, self.page_bytes))
            for key, slot, ok in zip(keys, slots, got, strict=True)
        ]
        return {"got": [bool(g) for g in got], "exact": exact}

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        kv = getattr(self.backend, "kvtier_stats", dict)()
        out["kvtier"] = {name: _asdict(s) for name, s in kv.items()}
        metrics = self.backend.get_stats()
        out["metrics"] = (
            None
            if metrics is None
            else {
                "type": type(metrics).__name__,
                "prefetch_pgs": list(metrics.prefetch_pgs),
                "backup_pgs": list(metrics.backup_pgs),
                "prefetch_bandwidth": len(metrics.prefetch_bandwidth),
            }
        )
        return out


def _sizes(pool_args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in pool_args.items() if k not in ("kind", "layout")}


def _asdict(stats: Any) -> dict[str, int]:
    return {name: getattr(stats, name) for name in stats.__dataclass_fields__}


def handle(instances: dict[str, Instance], req: dict[str, Any]) -> Any:
    op = req["op"]
    if op == "open":
        inst = Instance(req)
        instances[req["name"]] = inst
        return inst.describe()
    if op == "keys":
        return keys_for(req["n"], req["seed"], req.get("page_size", 4))
    if op == "version":
        import importlib.metadata

        return importlib.metadata.version("sglang")
    inst = instances[req["name"]]
    if op == "set_v1":
        return inst.set_v1(req["keys"], req["slots"])
    if op == "get_v1":
        return inst.get_v1(req["keys"], req["slots"], req.get("tag"))
    if op == "set_generic":
        return inst.set_generic(req["keys"], req["slots"])
    if op == "get_generic":
        return inst.get_generic(req["keys"], req["slots"])
    if op == "exists":
        return inst.backend.batch_exists(req["keys"])
    if op == "exists_one":
        return bool(inst.backend.exists(req["key"]))
    if op == "add_sidecar":
        return inst.add_sidecar(req["pool_name"], req["pool"])
    if op == "set_v2":
        return inst.set_v2(req["pool_name"], req["keys"], req["slots"])
    if op == "get_v2":
        return inst.get_v2(req["pool_name"], req["keys"], req["slots"])
    if op == "exists_v2":
        return inst.exists_v2(req["keys"], req["transfers"])
    if op == "stats":
        return inst.stats()
    if op == "clear":
        return inst.backend.clear()
    if op == "close":
        inst.backend.close()
        return True
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    instances: dict[str, Instance] = {}
    ready = {"redis_py": importlib.util.find_spec("redis") is not None}
    print(json.dumps({"ok": True, "result": ready}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            reply = {"ok": True, "result": handle(instances, req)}
        except Exception as exc:
            reply = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
