"""kvtier against a real vLLM server: vLLM's CPU build serving a tiny random-weight Llama.

Two server starts, one per pool size, each driven by a short workload of shared prefixes (and a
third, one request at a time, for when a streamed response's headers leave):

- large pool: VLLM_CPU_KVCACHE_SPACE=1 (1 GiB, the CPU worker's explicit budget), requests one at
  a time; nothing ever waits.
- small pool: --kv-cache-memory-bytes of 20 blocks of 128 tokens (2,560 tokens, 2.5 requests of
  max_model_len 1,024), 16 requests of 688 tokens with 8 in flight: requests queue while the pool
  is full, and running ones are preempted when decoding finds no free block.

Each start's log and /metrics are then read by kvtier: `explain` must recompute the KV token
count the server printed; `observe` must report the hit rate and preemptions vLLM's own counters
give, `kv-bound` for the small pool and `not-saturated` for the large one.

The server runs from `.venv-vllm-cpu` (`.ci/vllm-cpu.sh`); without it the tests skip, and fail
under CI. All traffic goes to 127.0.0.1; every server is stopped by a finalizer.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import vllm_cpu_support as cpu
from kvtier.engines.vllm import pool
from kvtier.engines.vllm.log import parse_vllm
from kvtier.logs.lines import read_lines
from vllm_cpu_support import VllmServer, counter, kvtier_json

pytestmark = pytest.mark.vllm_cpu

MODEL = cpu.TinyLlama()
CPU_BLOCK = 128  # platforms/cpu.py CpuPlatform.check_and_update_config: the CPU default
MAX_MODEL_LEN = 1024
SMALL_POOL_BLOCKS = 20
SMALL_POOL_BYTES = SMALL_POOL_BLOCKS * CPU_BLOCK * MODEL.kv_bytes_per_token
STATS_INTERVAL_S = 0.5  # VLLM_LOG_STATS_INTERVAL: a periodic line every half second
PREFIX, SUFFIX = 256, 32  # two full blocks shared per group, then a tail of its own
START_TIMEOUT_S = 300
COMMON_ARGS = ("--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager")


@dataclass(frozen=True, slots=True)
class Served:
    """What one server start left behind: its log, its final /metrics, kvtier's live scrape."""

    log: Path
    metrics: str
    live_observe: dict[str, object]
    requests: int


def _serve(
    model_dir: Path,
    out: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    workload: Callable[[VllmServer], int],
    finalizers: list[Callable[[], None]],
) -> Served:
    server = VllmServer(model_dir, out / "server.log", args, env)
    finalizers.append(server.stop)
    server.start(timeout=START_TIMEOUT_S)
    try:
        requests = workload(server)
        # the periodic line after the last request carries the final hit rate
        time.sleep(4 * STATS_INTERVAL_S)
        metrics = server.metrics()
        live = kvtier_json("observe", f"{server.url}/metrics", "--samples", "1", "--json")
        assert _counters(server.metrics()) == _counters(metrics), "the server was not idle"
    finally:
        server.stop()
    (out / "metrics.txt").write_text(metrics)
    return Served(out / "server.log", metrics, live, requests)


@pytest.fixture(scope="module")
def finalizers() -> Iterator[list[Callable[[], None]]]:
    """Stops every server started in this module, whatever happened to its test."""
    stops: list[Callable[[], None]] = []
    yield stops
    for stop in stops:
        stop()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cpu.require_installed()
    return cpu.build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), MODEL)


@pytest.fixture(scope="module")
def large_pool(
    model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    finalizers: list[Callable[[], None]],
) -> Served:
    def light(server: VllmServer) -> int:
        prompts = cpu.shared_prefix_prompts(groups=2, per_group=4, prefix=PREFIX, suffix=SUFFIX)
        cpu.run_workload(server, prompts, 8, in_flight=1, request_timeout=60, deadline_s=120)
        return len(prompts)

    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOG_STATS_INTERVAL": str(STATS_INTERVAL_S)}
    out = tmp_path_factory.mktemp("large-pool")
    return _serve(model_dir, out, COMMON_ARGS, env, light, finalizers)


@pytest.fixture(scope="module")
def small_pool(
    model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    finalizers: list[Callable[[], None]],
    large_pool: Served,  # one server at a time on a 2-core machine
) -> Served:
    def crowded(server: VllmServer) -> int:
        prompts = cpu.shared_prefix_prompts(groups=2, per_group=8, prefix=PREFIX, suffix=SUFFIX)
        cpu.run_workload(server, prompts, 400, in_flight=8, request_timeout=120, deadline_s=240)
        return len(prompts)

    args = (*COMMON_ARGS, "--kv-cache-memory-bytes", str(SMALL_POOL_BYTES))
    env = {"VLLM_LOG_STATS_INTERVAL": str(STATS_INTERVAL_S)}
    out = tmp_path_factory.mktemp("small-pool")
    return _serve(model_dir, out, args, env, crowded, finalizers)


def _counters(metrics: str) -> tuple[float, float, float]:
    return (
        counter(metrics, "prefix_cache_hits_total"),
        counter(metrics, "prefix_cache_queries_total"),
        counter(metrics, "num_preemptions_total"),
    )


def _printed_pool(log: Path) -> int:
    found = re.findall(r"CPU KV cache size: ([\d,]+) tokens", log.read_text())
    assert len(found) == 1, "one 'CPU KV cache size' line per start"
    return int(found[0].replace(",", ""))


def _printed_preemptions(log: Path) -> int:
    return sum(int(n) for n in re.findall(r"Preemptions: (\d+)", log.read_text()))


def _observe(source: Path) -> dict[str, object]:
    return kvtier_json("observe", str(source), "--json")


def _explain(log: Path) -> dict[str, object]:
    return kvtier_json("explain", str(log), "--json")


def _tokens(section: object) -> int:
    assert isinstance(section, dict)
    return int(section["kv_tokens"])


# ---- explain: the pool the server printed, recomputed from its startup lines


@pytest.mark.parametrize(
    ("pool", "tokens"),
    [
        # VLLM_CPU_KVCACHE_SPACE=1 -> kv_cache_memory_bytes = 1 GiB (CpuPlatform); blocks =
        # 1 GiB // (page x layers); logged int(blocks / blocks per request x max_model_len)
        ("large_pool", (1 << 30) // (CPU_BLOCK * MODEL.kv_bytes_per_token) * CPU_BLOCK),
        ("small_pool", SMALL_POOL_BLOCKS * CPU_BLOCK),
    ],
)
def test_explain_recomputes_the_printed_cpu_kv_tokens(
    pool: str, tokens: int, request: pytest.FixtureRequest
) -> None:
    served: Served = request.getfixturevalue(pool)
    assert _printed_pool(served.log) == tokens
    explained = _explain(served.log)
    assert explained["engine"] == "vllm"
    assert _tokens(explained["observed"]) == tokens
    assert _tokens(explained["predicted"]) == tokens
    assert explained["kv_bytes_per_token"] == MODEL.kv_bytes_per_token


# ---- observe: hit rate, preemptions and the verdict, from the log and from /metrics


def _check_hit_rate(report: dict[str, object], metrics: str, tolerance: float) -> None:
    hits, queries, _ = _counters(metrics)
    assert queries > 0 and hits > 0, "the shared prefixes gave no prefix-cache hits"
    rate = report["hit_rate"]
    assert isinstance(rate, float)
    assert abs(rate - hits / queries) <= tolerance, (rate, hits, queries)


def test_observe_large_pool_log_is_not_saturated(large_pool: Served) -> None:
    report = _observe(large_pool.log)
    assert report["diagnosis"] == "not-saturated", report["reason"]
    assert report["queue_max"] == 0
    assert report["pool_tokens"] == _printed_pool(large_pool.log)
    assert report["skipped_lines"] == 0
    # the printed rate is a percentage with one decimal: within half of 0.1%
    _check_hit_rate(report, large_pool.metrics, 0.0005 + 1e-9)
    assert report["preemptions"] == _counters(large_pool.metrics)[2] == 0


@pytest.mark.parametrize("source", ["saved", "live"])
def test_observe_large_pool_metrics_is_not_saturated(large_pool: Served, source: str) -> None:
    report = large_pool.live_observe if source == "live" else _observe(_metrics_file(large_pool))
    assert report["diagnosis"] == "not-saturated", report["reason"]
    assert report["hit_rate_source"] == "counters"
    _check_hit_rate(report, large_pool.metrics, 1e-4)
    assert report["preemptions"] == 0
    assert report["pool_tokens"] == _printed_pool(large_pool.log)


def test_observe_small_pool_log_is_kv_bound(small_pool: Served) -> None:
    report = _observe(small_pool.log)
    assert report["diagnosis"] == "kv-bound", report["reason"]
    assert isinstance(report["queue_max"], int) and report["queue_max"] > 0
    assert isinstance(report["kv_usage_max"], float) and report["kv_usage_max"] >= 0.9
    assert report["pool_tokens"] == SMALL_POOL_BLOCKS * CPU_BLOCK
    assert report["skipped_lines"] == 0
    _check_hit_rate(report, small_pool.metrics, 0.0005 + 1e-9)
    # vLLM 0.32 zeroes the interval's preemption count before printing it, so its log shows none;
    # observe counts what the log prints
    assert report["preemptions"] == _printed_preemptions(small_pool.log)


@pytest.mark.parametrize("source", ["saved", "live"])
def test_observe_small_pool_metrics_is_kv_bound(small_pool: Served, source: str) -> None:
    report = small_pool.live_observe if source == "live" else _observe(_metrics_file(small_pool))
    preempted = _counters(small_pool.metrics)[2]
    assert preempted > 0, "the small pool preempted no request"
    assert report["diagnosis"] == "kv-bound", report["reason"]
    assert report["preemptions"] == preempted
    assert report["hit_rate_source"] == "counters"
    _check_hit_rate(report, small_pool.metrics, 1e-4)
    assert report["pool_tokens"] == SMALL_POOL_BLOCKS * CPU_BLOCK


def _metrics_file(served: Served) -> Path:
    return served.log.with_name("metrics.txt")


# ---- without a server: the CPU build's startup lines, as vllm-cpu 0.32.0 printed them here

CPU_STARTUP = """\
(APIServer pid=13683) INFO 12-01 12:20:26 [api_utils.py:286] non-default args: {'host': \
'127.0.0.1', 'port': 33941, 'model': '/tmp/m', 'max_model_len': 1024, 'enforce_eager': True, \
'kv_cache_memory_bytes': 1343488}
(Worker pid=14193) INFO 12-01 12:20:43 [cpu_worker.py:260] Explicitly set (0.0/23.54) GiB for KV \
cache on node 0.
(EngineCore pid=13848) INFO 12-01 12:20:43 [kv_cache_utils.py:2327] CPU KV cache size: 2,560 \
tokens, Maximum concurrency for 1,024 tokens per request: 2.50x
"""


def test_cpu_startup_lines_parse() -> None:
    startup = parse_vllm(read_lines(CPU_STARTUP))
    assert startup.kv_tokens is not None and startup.kv_tokens.value == 2560
    assert startup.kv_device is not None and startup.kv_device.value == "CPU"
    assert startup.max_model_len is not None and startup.max_model_len.value == MAX_MODEL_LEN
    assert startup.concurrency is not None and startup.concurrency.value == 2.5
    # the worker prints 0.0 GiB; the arguments give the exact budget
    override = startup.kv_memory_override_gib
    assert override is not None and override.value * (1 << 30) == 1343488


def test_cpu_default_block_size() -> None:
    assert pool.default_block_size("CPU") == CPU_BLOCK
    assert pool.default_block_size("GPU") == pool.default_block_size(None) == 16


# ---- the response headers of a streamed completion leave before its first token (llm-d's
# active-request scorer in llm-d-inference-scheduler v0.3.x drops a request from its count when
# they come back: sim/fleet/llmd.py `active-until-finish=0`)


def _stream(server: VllmServer, tokens: int) -> http.client.HTTPResponse:
    """A streamed completion's response, returned once its headers have arrived."""
    conn = http.client.HTTPConnection(cpu.HOST, server.port, timeout=120)
    prompt = cpu.shared_prefix_prompts(groups=1, per_group=1, prefix=PREFIX, suffix=SUFFIX)[0]
    body = {
        "model": str(server.model_dir),
        "prompt": prompt,
        "max_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
    }
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn.getresponse()


def _events(response: http.client.HTTPResponse) -> list[bytes]:
    """The stream's `data:` lines to its end."""
    return [line for line in iter(response.readline, b"") if line.startswith(b"data:")]


def _second_waits(server: VllmServer, deadline_s: float) -> bool:
    """Whether vLLM's scheduler gauges show one request running and one waiting before the
    deadline (they are set as each step's stats are logged)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        metrics = server.metrics()
        if (
            counter(metrics, "num_requests_running")
            == 1
            == counter(metrics, "num_requests_waiting")
        ):
            return True
        time.sleep(0.05)
    return False


def test_streamed_response_headers_leave_before_the_first_token(
    model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    finalizers: list[Callable[[], None]],
    small_pool: Served,  # one server at a time
) -> None:
    """With --max-num-seqs 1 a second streamed request waits in the scheduler while the first
    runs; its 200 and headers are back already, so before its own first token (vLLM serves a
    stream as a StreamingResponse, which sends its headers on start). Once it waits it cannot
    have started: the first request holds the only slot for 600 tokens."""
    out = tmp_path_factory.mktemp("one-seq")
    args = (*COMMON_ARGS, "--max-num-seqs", "1")
    server = VllmServer(model_dir, out / "server.log", args, {"VLLM_CPU_KVCACHE_SPACE": "1"})
    finalizers.append(server.stop)
    server.start(timeout=START_TIMEOUT_S)
    try:
        first = _stream(server, 600)  # 288 + 600 tokens, under the 1,024
        assert first.readline().startswith(b"data:")  # the first request runs
        second = _stream(server, 4)  # returns once its headers are in
        assert second.status == 200
        assert _second_waits(server, 5.0), "the second request was not seen waiting"
        assert _events(first)[-1].strip() == b"data: [DONE]"
        assert len(_events(second)) == 5  # 4 tokens and [DONE], after the first finished
    finally:
        server.stop()
