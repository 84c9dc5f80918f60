"""kvtier's store as SGLang's HiCache L3 backend, against the real SGLang interface.

SGLang's side runs in the SGLang virtualenv (benchmarks/peers/.venv-sglang, made by
.ci/sglang-venv.sh) as tests/sglang_hicache_worker.py child processes: SGLang's own host pools
built on the CPU, SGLang's dynamic loader constructing the backend from the launch flag's JSON.
Without that virtualenv these tests skip on a user's machine and fail under CI. The config and
import-boundary tests at the end run here, without SGLang.
"""

from __future__ import annotations

import ast
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import missing
from kvtier.integrations.sglang import extra_config
from kvtier.integrations.sglang.config import (
    BackendOptions,
    PoolShape,
    Shard,
    StorageScope,
    fingerprint,
    page_hash,
)
from sglang_venv_support import sglang_python
from store_support import RedisServer, needs_redis

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "sglang_hicache_worker.py"
BENCH = ROOT / "benchmarks" / "bench_sglang_hicache.py"
REPLY_TIMEOUT_S = 120

# every host pool class and memory layout SGLang's flat pages support, MHA and MLA
LAYOUTS = [
    ("mha", "layer_first"),
    ("mha", "page_first"),
    ("mha", "page_first_direct"),
    ("mha", "page_head"),
    ("mla", "layer_first"),
    ("mla", "page_first"),
    ("mla", "page_first_direct"),
]


class WorkerError(AssertionError):
    pass


class Worker:
    """One tests/sglang_hicache_worker.py process: an engine's storage side, driven by RPC."""

    def __init__(self, log: Path) -> None:
        python = sglang_python()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [str(python), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=ROOT,
            env=env,
        )
        ready = self._reply()
        if not ready.get("ok"):
            raise WorkerError(f"worker did not start: {ready}")
        self.has_redis_py = bool(ready["result"]["redis_py"])

    def require_redis_py(self) -> None:
        if not self.has_redis_py:
            missing("redis-py is not installed in the SGLang virtualenv: run .ci/sglang-venv.sh")

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            tail = self.log_path.read_text()[-3000:]
            if "ModuleNotFoundError" in tail or "ImportError" in tail:
                missing(f"the SGLang virtualenv cannot run the worker: {tail.splitlines()[-1]}")
            raise WorkerError(f"worker gave no reply; its log ends:\n{tail}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def send(self, op: str, **fields: Any) -> dict[str, Any]:
        """The raw reply to one request: {"ok": ..., "result"|"error": ...}."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def __call__(self, op: str, **fields: Any) -> Any:
        reply = self.send(op, **fields)
        if not reply["ok"]:
            raise WorkerError(f"{op}: {reply['error']}\n{reply.get('traceback', '')}")
        return reply["result"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(tmp_path_factory.mktemp("worker") / "worker.log")
    yield w
    w.close()


@pytest.fixture(scope="module")
def other_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(tmp_path_factory.mktemp("worker2") / "worker.log")
    yield w
    w.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)
    srv.start()
    yield srv
    srv.stop()


_names = iter(range(1_000_000))


def open_instance(
    w: Worker, url: str, *, kind: str = "mha", layout: str = "layer_first", **fields: Any
) -> str:
    """A new backend instance in worker `w`, loaded from the launch flag's JSON; its name."""
    name = f"i{next(_names)}"
    flag = json.dumps(extra_config(url))
    w("open", name=name, pool={"kind": kind, "layout": layout}, extra_config_json=flag, **fields)
    return name


def keys(w: Worker, n: int, seed: int) -> list[str]:
    result: list[str] = w("keys", n=n, seed=seed)
    return result


# -- SGLang's dynamic loader ---------------------------------------------------------------------


def test_dynamic_loader_builds_the_backend_from_the_launch_flag(
    worker: Worker, tmp_path: Path
) -> None:
    flag = json.dumps(extra_config((tmp_path / "l3").as_uri()))
    info = worker(
        "open", name="loader", pool={"kind": "mha", "layout": "page_first"}, extra_config_json=flag
    )
    assert info["class"] == "kvtier.integrations.sglang.KvtierHiCacheStorage"
    assert info["is_hicache_storage"]
    assert info["pool_class"] == "MHATokenToKVPoolHost"
    assert set(info["fingerprints"]) == {"kv"}
    assert worker("version") == "0.5.23"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, 'needs "url"'),
        ({"url": "file://tmp/x"}, "names host 'tmp'"),
        ({"url": "redis://:6379/0"}, "no host"),
        ({"url": "/tmp/x", "ttl_s": 5}, "ttl_s applies to Redis stores"),
        ({"url": "/tmp/x", "capacity_bytes": -1}, "capacity_bytes must be a positive integer"),
        ({"url": "redis://h:6379/0", "ttl_s": 10**20}, "ttl_s must be a whole number"),
        ({"url": " /tmp/x"}, "whitespace at its start or end"),
    ],
)
def test_bad_configs_fail_the_launch_with_one_clear_message(
    worker: Worker, extra: dict[str, Any], message: str
) -> None:
    flag = {
        "backend_name": "kvtier",
        "module_path": "kvtier.integrations.sglang",
        "class_name": "KvtierHiCacheStorage",
        **extra,
    }
    reply = worker.send("open", name="bad", pool={"kind": "mha"}, extra_config=flag)
    assert not reply["ok"]
    assert reply["error"].startswith("ValueError: ")
    assert message in reply["error"]


# -- host pool -> store -> other host slots ------------------------------------------------------


@pytest.mark.parametrize(("kind", "layout"), LAYOUTS)
def test_pages_round_trip_byte_exact_into_other_slots(
    worker: Worker, tmp_path: Path, kind: str, layout: str
) -> None:
    name = open_instance(worker, (tmp_path / "l3").as_uri(), kind=kind, layout=layout)
    ks = keys(worker, 8, seed=1)
    assert worker("set_v1", name=name, keys=ks, slots=list(range(8))) == [True] * 8
    assert worker("exists", name=name, keys=ks) == 8
    read = worker("get_v1", name=name, keys=ks, slots=list(range(8, 16)))
    assert read == {"got": [True] * 8, "exact": [True] * 8}

    # SGLang's generic path (no interface_v1): flat page tensors in and out
    gs = keys(worker, 4, seed=2)
    assert worker("set_generic", name=name, keys=gs, slots=[16, 17, 18, 19]) is True
    read = worker("get_generic", name=name, keys=gs, slots=[20, 21, 22, 23])
    assert read == {"got": [True] * 4, "exact": [True] * 4}

    # a chain held only in part: the prefix, then misses
    fresh = keys(worker, 3, seed=3)
    chain = [*ks[:2], *fresh]
    assert worker("exists", name=name, keys=chain) == 2
    read = worker("get_v1", name=name, keys=chain, slots=[24, 25, 26, 27, 28])
    assert read["got"] == [True, True, False, False, False]
    assert worker("exists_one", name=name, key=fresh[0]) is False


def test_pages_are_shared_exactly_where_the_bytes_agree(worker: Worker, tmp_path: Path) -> None:
    url = (tmp_path / "l3").as_uri()
    ks = keys(worker, 4, seed=4)
    slots = [0, 1, 2, 3]
    writer = open_instance(worker, url, layout="layer_first")
    assert worker("set_v1", name=writer, keys=ks, slots=slots) == [True] * 4

    # same model, another host layout: same size, other byte order; SGLang's file backend
    # would serve it
    other_layout = open_instance(worker, url, layout="page_first")
    assert worker("exists", name=other_layout, keys=ks) == 0
    # another model name
    other_model = open_instance(worker, url, model="test/other")
    assert worker("get_v1", name=other_model, keys=ks, slots=slots)["got"] == [False] * 4
    # another TP rank of an MHA model holds other heads
    rank1 = open_instance(worker, url, tp_rank=1, tp_size=2)
    assert worker("exists", name=rank1, keys=ks) == 0
    # a new instance of the same configuration (a restart) reads them
    again = open_instance(worker, url)
    read = worker("get_v1", name=again, keys=ks, slots=[4, 5, 6, 7], tag="model-a")
    assert read["exact"] == [True] * 4

    # MLA KV is the same on every TP rank: rank 1 of 2 reads rank 0's pages, as in SGLang
    mla0 = open_instance(worker, url, kind="mla", tp_rank=0, tp_size=2)
    assert worker("set_v1", name=mla0, keys=ks, slots=slots) == [True] * 4
    mla1 = open_instance(worker, url, kind="mla", tp_rank=1, tp_size=2)
    assert worker("get_v1", name=mla1, keys=ks, slots=[4, 5, 6, 7])["exact"] == [True] * 4


def test_pool_transfer_calls_for_a_named_pool(worker: Worker, tmp_path: Path) -> None:
    name = open_instance(worker, (tmp_path / "l3").as_uri())
    sidecar = {"kind": "mha", "layout": "layer_first", "layers": 1, "heads": 1, "head_dim": 8}
    info = worker("add_sidecar", name=name, pool_name="swa", pool=sidecar)
    assert set(info["fingerprints"]) == {"kv", "swa"}
    ks = keys(worker, 6, seed=5)
    assert worker("set_v2", name=name, pool_name="kv", keys=ks, slots=list(range(6))) == [True] * 6
    # the sidecar holds only the last two pages' state
    assert worker("set_v2", name=name, pool_name="swa", keys=ks[4:], slots=[4, 5]) == [True] * 2

    def exists(policy: str) -> Any:
        transfer = {"name": "swa", "policy": policy, "keys": ks[4:]}
        return worker("exists_v2", name=name, keys=ks, transfers=[transfer])

    trailing = exists("trailing_pages")
    assert trailing["kv_hit_pages"] == 6
    assert trailing["restorable"] == [6]  # a prefix of 5 would need page 4's state too
    assert trailing["extra"] == {"kv": 6, "swa": 6}
    everything = exists("all_pages")  # every page's state would be needed: none restorable
    assert everything["kv_hit_pages"] == 0
    assert everything["restorable"] == []

    read = worker("get_v2", name=name, pool_name="swa", keys=ks[3:], slots=[10, 11, 12])
    assert read == {"got": [False, True, True], "exact": [False, True, True]}
    read = worker("get_v2", name=name, pool_name="kv", keys=ks, slots=list(range(10, 16)))
    assert read["exact"] == [True] * 6


def test_storage_metrics_and_kvtier_counters(worker: Worker, tmp_path: Path) -> None:
    name = open_instance(worker, (tmp_path / "l3").as_uri(), metrics=True)
    ks = keys(worker, 5, seed=6)
    worker("set_v1", name=name, keys=ks, slots=list(range(5)))
    worker("get_v1", name=name, keys=ks, slots=list(range(5, 10)))
    stats = worker("stats", name=name)
    assert stats["metrics"]["type"] == "StorageMetrics"
    assert stats["metrics"]["backup_pgs"] == [5]
    assert stats["metrics"]["prefetch_pgs"] == [5]
    kv = stats["kvtier"]["kv"]
    assert (kv["puts"], kv["hits"], kv["corrupt"], kv["errors"]) == (5, 5, 0, 0)
    # drained: the next call reports only what happened since
    assert worker("stats", name=name)["metrics"]["backup_pgs"] == []


def test_clear_removes_every_page_of_the_fingerprint(worker: Worker, tmp_path: Path) -> None:
    url = (tmp_path / "l3").as_uri()
    a, b = open_instance(worker, url), open_instance(worker, url)
    other = open_instance(worker, url, model="test/other")
    ks = keys(worker, 4, seed=7)
    worker("set_v1", name=a, keys=ks, slots=[0, 1, 2, 3])
    worker("set_v1", name=other, keys=ks, slots=[0, 1, 2, 3])
    assert worker("clear", name=b) is True  # pages another instance wrote
    assert worker("exists", name=a, keys=ks) == 0
    assert worker("exists", name=other, keys=ks) == 4  # another fingerprint is untouched
    assert worker("set_v1", name=a, keys=ks, slots=[0, 1, 2, 3]) == [True] * 4
    assert worker("exists", name=b, keys=ks) == 4


# -- Redis -----------------------------------------------------------------------------------


@needs_redis
def test_two_processes_share_one_redis(
    worker: Worker, other_worker: Worker, redis_server: RedisServer
) -> None:
    worker.require_redis_py()
    a = open_instance(worker, redis_server.url, kind="mla")
    b = open_instance(other_worker, redis_server.url, kind="mla")
    ka, kb = keys(worker, 6, seed=8), keys(worker, 6, seed=9)
    assert worker("set_v1", name=a, keys=ka, slots=list(range(6))) == [True] * 6
    assert other_worker("exists", name=b, keys=ka) == 6
    read = other_worker("get_v1", name=b, keys=ka, slots=list(range(6, 12)))
    assert read["exact"] == [True] * 6
    assert other_worker("set_v1", name=b, keys=kb, slots=list(range(6))) == [True] * 6
    assert worker("get_v1", name=a, keys=kb, slots=list(range(6, 12)))["exact"] == [True] * 6
    assert worker("clear", name=a) is True
    assert other_worker("exists", name=b, keys=ka + kb) == 0


@needs_redis
def test_redis_killed_and_restarted_mid_run_gives_misses_not_errors(
    worker: Worker, redis_server: RedisServer
) -> None:
    worker.require_redis_py()
    name = open_instance(worker, redis_server.url)
    ks = keys(worker, 8, seed=10)
    assert worker("set_v1", name=name, keys=ks, slots=list(range(8))) == [True] * 8

    redis_server.kill()
    began = time.monotonic()
    # every call answers, promptly, with misses and refused writes; none raises
    assert worker("get_v1", name=name, keys=ks, slots=list(range(8, 16)))["got"] == [False] * 8
    assert worker("exists", name=name, keys=ks) == 0
    assert worker("set_v1", name=name, keys=ks, slots=list(range(8))) == [False] * 8
    assert worker("get_generic", name=name, keys=ks[:2], slots=[8, 9])["got"] == [False] * 2
    assert worker("set_generic", name=name, keys=ks[:2], slots=[0, 1]) is False
    assert worker("exists_v2", name=name, keys=ks, transfers=[])["kv_hit_pages"] == 0
    assert worker("clear", name=name) is False
    assert time.monotonic() - began < 30
    errors = worker("stats", name=name)["kvtier"]["kv"]["errors"]
    assert errors >= 1

    redis_server.start()  # same port, empty: the pages are gone, the store comes back
    deadline = time.monotonic() + 40
    while worker("set_v1", name=name, keys=ks, slots=list(range(8))) != [True] * 8:
        assert time.monotonic() < deadline, "the store did not come back after the restart"
        time.sleep(0.25)
    read = worker("get_v1", name=name, keys=ks, slots=list(range(8, 16)))
    assert read == {"got": [True] * 8, "exact": [True] * 8}


# -- faults, side by side with SGLang's file backend ------------------------------------------


def test_injected_faults_serve_no_wrong_page(tmp_path: Path) -> None:
    """benchmarks/bench_sglang_hicache.py's fault injection, over 1,000 faults: kvtier serves no
    wrong page, and SGLang's file backend, given the same faults, serves wrong pages (so the
    faults are real)."""
    python = sglang_python()
    out = tmp_path / "faults.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [str(python), str(BENCH), "--faults", "1100", "--no-throughput", "--json", str(out)]
    argv += ["--workdir", str(tmp_path)]
    run = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    faults = json.loads(out.read_text())["faults"]
    kvtier = [row for row in faults if row["backend"] == "kvtier"]
    file = [row for row in faults if row["backend"] == "file"]
    assert sum(row["faults"] for row in kvtier) >= 1000
    assert sum(row["wrong"] for row in kvtier) == 0
    assert sum(row["errors"] for row in kvtier) == 0
    assert sum(row["wrong"] for row in file) > 0
    for row in kvtier:  # every page the faults did not touch is still served
        assert row["untouched_served"] == row["untouched"], row


# -- without SGLang: options, fingerprints, the import boundary -----------------------------


def test_options_are_checked_before_launch() -> None:
    assert extra_config("redis://h:6379/0", ttl_s=60)["ttl_s"] == 60
    with pytest.raises(ValueError, match="ttl_s must be a whole number of seconds from 1"):
        extra_config("redis://h:6379/0", ttl_s=0)
    with pytest.raises(ValueError, match=r"ttl_s .* got 100000000000000000000"):
        extra_config("redis://h:6379/0", ttl_s=10**20)
    with pytest.raises(ValueError, match="timeout_s"):
        extra_config("redis://h:6379/0", timeout_s=1e9)
    with pytest.raises(ValueError, match="whitespace"):
        extra_config("redis://h:6379/0\n")
    with pytest.raises(ValueError, match="timeout_s"):
        BackendOptions.from_extra_config({"url": "/x", "timeout_s": float("nan")})
    assert BackendOptions.from_extra_config({"url": "/x", "interface_v1": 1}).url == "/x"


def test_every_field_that_shapes_a_page_changes_the_fingerprint() -> None:
    scope = StorageScope("org/model", tp=Shard(1, 2), rank_replicated=False)
    shape = PoolShape(
        "MHATokenToKVPoolHost", "layer_first", "bfloat16", 64, 4096, (("head_num", 8),)
    )
    base = fingerprint(scope, "kv", shape)
    variants = [
        fingerprint(StorageScope("org/other", Shard(1, 2), False), "kv", shape),
        fingerprint(StorageScope("org/model", Shard(0, 2), False), "kv", shape),
        fingerprint(StorageScope("org/model", Shard(1, 2), False, pp=Shard(1, 2)), "kv", shape),
        fingerprint(StorageScope("org/model", Shard(1, 2), False, cp=Shard(1, 2)), "kv", shape),
        fingerprint(StorageScope("org/model", Shard(1, 2), False, dcp=Shard(1, 2)), "kv", shape),
        fingerprint(scope, "swa", shape),
        fingerprint(scope, "kv", replace(shape, pool_class="MLATokenToKVPoolHost")),
        fingerprint(scope, "kv", replace(shape, layout="page_first")),
        fingerprint(scope, "kv", replace(shape, dtype="float8_e4m3fn")),
        fingerprint(scope, "kv", replace(shape, page_size=32)),
        fingerprint(scope, "kv", replace(shape, page_bytes=8192)),
        fingerprint(scope, "kv", replace(shape, dims=(("head_num", 4),))),
        fingerprint(scope, "kv", replace(shape, format_tag="mxfp8")),
    ]
    digests = {fp.digest for fp in variants}
    assert base.digest not in digests and len(digests) == len(variants)
    # rank-replicated (MLA) KV: one fingerprint for every TP rank and size; a mamba pool stays
    # per rank
    mla = [StorageScope("m", Shard(r, s), True) for r, s in ((0, 1), (0, 2), (1, 2), (3, 8))]
    assert len({fingerprint(s, "kv", shape).digest for s in mla}) == 1
    assert len({fingerprint(s, "mamba", shape).digest for s in mla}) == 4


def test_a_config_names_the_same_key_space_as_before() -> None:
    """The fingerprint of a config read by attribute, spelled out: pages an earlier kvtier
    stored under it stay found (the geometry text and the digest are the key space)."""
    config = SimpleNamespace(
        model_name="org/m", tp_rank=1, tp_size=2, is_mla_model=False, pp_rank=1, pp_size=2
    )
    shape = PoolShape(
        "MHATokenToKVPoolHost", "layer_first", "bfloat16", 64, 4096, (("head_num", 8),)
    )
    fp = fingerprint(StorageScope.from_config(config), "kv", shape)
    assert fp.geometry == (
        "sglang:kv:MHATokenToKVPoolHost:head_num=8:page_bytes=4096:pp=1/2:cp=0/1:dcp=0/1"
    )
    assert (fp.tp_rank, fp.tp_size, fp.digest.hex()) == (1, 2, "0173cfed19c8b41b270b910ef3dc0a6e")
    config.attn_cp_rank, config.attn_cp_size, config.dcp_rank, config.dcp_size = 1, 2, 1, 4
    assert fingerprint(StorageScope.from_config(config, "x/y"), "kv", shape).geometry.endswith(
        ":pp=1/2:cp=1/2:dcp=1/4"
    )


def test_sglang_keys_map_to_page_hashes() -> None:
    sha = "0f" * 32
    assert page_hash(sha) == bytes.fromhex(sha)
    assert len(page_hash("0F" * 32)) == 40  # not lowercase hex: digested, never aliased
    assert page_hash(sha + ".mamba") != page_hash(sha)
    assert len({page_hash(k) for k in ("a", "b", "a.kv", "")}) == 4


def test_kvtier_imports_neither_sglang_nor_the_integration() -> None:
    """Only kvtier.integrations names SGLang; importing the integration package imports
    neither SGLang nor torch, and the class without SGLang is a clear ImportError."""
    src = ROOT / "src" / "kvtier"
    for path in src.rglob("*.py"):
        if "integrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert not name.startswith(("sglang", "kvtier.integrations")), (path, name)
    code = (
        "import importlib.util, sys, kvtier.integrations.sglang as m\n"
        "assert not any(n.split('.')[0] in ('sglang', 'torch') for n in sys.modules)\n"
        "try:\n    print('class', m.KvtierHiCacheStorage.__mro__[1].__name__)\n"
        "except ImportError as e:\n    print('ImportError', e)\n"
        "print('sglang', importlib.util.find_spec('sglang') is not None)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    if "sglang True" in run.stdout:
        assert "class KvtierHiCacheBackend" in run.stdout
    else:
        assert "ImportError No module named 'sglang'" in run.stdout
