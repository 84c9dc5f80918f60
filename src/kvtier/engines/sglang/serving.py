"""SGLang's serving lines: the scheduler's periodic batch lines, retractions and the pool size.

Emitters (`managers/scheduler.py`, later `scheduler_metrics_mixin.py`), by era:

    2024-01  new fill batch. #seq: N. #cached_token: N. #new_token: N. ... #remaining_req: N.
             #running_req: N
    2024-04  #running-req: N, #token: N, token usage: X, #queue-req: N       (decode, no title)
    2024-08  Decode batch. #running-req: N, #token: N, token usage: X,
             gen throughput (token/s): X, #queue-req: N
    2024-10  Prefill batch. #new-seq: N, #new-token: N, #cached-token: N, cache hit rate: X%,
             token usage: X, #running-req: N, #queue-req: N
    2025     ... largest-len: 0, #queue-req: 0,                          (trailing commas)
    2025-11  Decode batch, ... cuda graph: True, ...     (a comma after the title; later fields:
             input throughput (token/s), #pending-token)
    hybrid   #full token: N, full token usage: X, #swa token: N, swa token usage: X /
             mamba usage: X
    spec     accept len: X, accept rate: X      (decode line, speculative decoding on; 0.5.5
             `scheduler_metrics_mixin.py`, 0.5.23 `scheduler_components/metrics_reporter.py`:
             accepted tokens / verify forwards since the last decode line)
    PD       pre-allocated usage: X, #prealloc-req: N, #transfer-req: N, #retracted-req: N
             (decode node) / #prealloc-req: N, #inflight-req: N (prefill node)
    retract  KV cache pool is full. Retract requests. #retracted_reqs: N, #new_token_ratio: ...
             (2024: Decode out of memory happened. #retracted_reqs: N, ...)

Field meanings, as the engine computes them:
- `token usage` is the share of the pool held by running requests; evictable radix-cache tokens are
  left out, so a value near 1 means the pool really is full.
- `#cached-token` counts prefix hits from every tier together (device, host and storage);
  `#new-token` is what the batch computes. The token-weighted hit rate is cached / (cached + new).
- `#queue-req` waits for admission; on a PD decode node `#prealloc-req` and `#retracted-req` wait
  for KV space as well, so they count as queued.

Each reading is `(kind, fields)` with engine-neutral field names: kv_usage (0-1, the fullest pool),
running, queued, new_tokens, cached_tokens, prompt_tps, gen_tps, hit_rate (0-1, as printed),
retracted, pool_tokens, accept_len (tokens a decode step makes under speculative decoding).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvtier.logs.records import GROUPED_INT, label_table, labelled_numbers

# What a periodic line starts with (searched anywhere in the line).
DECODE = "Decode batch"
PREFILL = "Prefill batch"
FILL = "new fill batch"
RETRACT = "Retract requests"
DECODE_OOM = "Decode out of memory happened"
POOL = "KV Cache is allocated"
SUMMARY = "max_total_num_tokens="
# The 2024-04 decode line has no title: it starts with its first field.
UNTITLED = "#running-req: "
MARKERS = (DECODE, PREFILL, FILL, RETRACT, DECODE_OOM, POOL, SUMMARY, UNTITLED)

_FILL_PAIR = re.compile(
    r"(#?[a-z_]{1,30}): ([0-9]{1,15}(?:\.[0-9]{1,12})?)(?=$|\s|,(?![0-9])|\.$|\.\s)", re.ASCII
)
_RETRACTED = re.compile(r"#retracted_reqs: (\d{1,9})")
_POOL_TOKENS = re.compile(r"#tokens: " + GROUPED_INT)
_SUMMARY_TOKENS = re.compile(r"max_total_num_tokens=(\d{1,15})")

# printed label -> field (a percentage: divided by 100)
_LABELS = label_table(
    {
        "#running-req": "running",
        "#running_req": "running",
        "#queue-req": "queued",
        "#remaining_req": "queued",
        "#prealloc-req": "prealloc",
        "#retracted-req": "retract_queue",
        "token usage": "kv_usage",
        "full token usage": "kv_full",
        "swa token usage": "kv_swa",
        "mamba usage": "kv_mamba",
        "#new-seq": "new_seqs",
        "#new_seq": "new_seqs",
        "#new-token": "new_tokens",
        "#new_token": "new_tokens",
        "#cached-token": "cached_tokens",
        "#cached_token": "cached_tokens",
        "gen throughput (token/s)": "gen_tps",
        "input throughput (token/s)": "prompt_tps",
        "accept len": "accept_len",
    },
    percents={
        "cache hit rate": "hit_rate",
        "tree_cache_hit_rate": "hit_rate",
    },
)
_USAGES = ("kv_usage", "kv_full", "kv_swa", "kv_mamba")
_WAITING = ("queued", "prealloc", "retract_queue")
# The fields without which a line says nothing about saturation.
_REQUIRED = {"decode": ("running",), "prefill": ("new_tokens",), "fill": ("new_tokens",)}


# The two commonest shapes, read by one pattern each (the general reader gives the same fields).
# The sources are kept without their end anchor: the stream reader also matches them on bytes,
# over whole chunks, and reads the fields with the same builders.
_FAST_DECODE_SOURCE = (
    r"Decode batch[.,] #running-req: (?P<running>\d{1,9}), #token: \d{1,12}, "
    r"token usage: (?P<kv_usage>\d{1,3}\.\d{1,4}), (?:cuda graph: \w{1,5}, )?"
    r"gen throughput \(token/s\): (?P<gen_tps>\d{1,9}\.\d{1,4}), (?:largest-len: \d{1,9}, )?"
    r"#queue-req: (?P<queued>\d{1,9}),? ?"
)
_FAST_PREFILL_SOURCE = (
    r"Prefill batch[.,] #new-seq: (?P<new_seqs>\d{1,9}), #new-token: (?P<new_tokens>\d{1,12}), "
    r"#cached-token: (?P<cached_tokens>\d{1,12}), token usage: (?P<kv_usage>\d{1,3}\.\d{1,4}), "
    r"#running-req: (?P<running>\d{1,9}), #queue-req: (?P<queued>\d{1,9}),? ?"
    r"(?:cuda graph: \w{1,5}, )?"
    r"(?:input throughput \(token/s\): (?P<prompt_tps>\d{1,12}\.\d{1,4}),? ?)?"
)
_FAST_DECODE = re.compile(_FAST_DECODE_SOURCE + "$", re.ASCII)
_FAST_PREFILL = re.compile(_FAST_PREFILL_SOURCE + "$", re.ASCII)

# a fast pattern's groups: digits as str or bytes (None for an optional group not matched)
FastValues = tuple[Any, ...]


def _decode_fields(values: FastValues) -> dict[str, float]:
    running, kv_usage, gen_tps, queued = values  # the groups of _FAST_DECODE, in order
    return {
        "running": float(running),
        "kv_usage": float(kv_usage),
        "gen_tps": float(gen_tps),
        "queued": float(queued),
    }


def _prefill_fields(values: FastValues) -> dict[str, float]:
    new_seqs, new_tokens, cached_tokens, kv_usage, running, queued, prompt_tps = values  # in order
    fields = {
        "new_seqs": float(new_seqs),
        "new_tokens": float(new_tokens),
        "cached_tokens": float(cached_tokens),
        "kv_usage": float(kv_usage),
        "running": float(running),
        "queued": float(queued),
    }
    if prompt_tps is not None:
        fields["prompt_tps"] = float(prompt_tps)
    return fields


# (kind, pattern source without its end anchor, fields from the pattern's groups in order)
FAST: tuple[tuple[str, str, Callable[[FastValues], dict[str, float]]], ...] = (
    ("decode", _FAST_DECODE_SOURCE, _decode_fields),
    ("prefill", _FAST_PREFILL_SOURCE, _prefill_fields),
)
_FAST_BUILD = {_FAST_DECODE: _decode_fields, _FAST_PREFILL: _prefill_fields}


def _fast(pattern: re.Pattern[str], kind: str, segment: str) -> tuple[str, dict[str, float]] | None:
    match = pattern.match(segment)
    if match is None:
        return None
    return kind, _FAST_BUILD[pattern](match.groups())


def _pairs(body: str) -> dict[str, float]:
    return labelled_numbers(body, _LABELS)


def _neutral(kind: str, fields: dict[str, float]) -> tuple[str, dict[str, float]] | None:
    if any(name not in fields for name in _REQUIRED[kind]):
        return None
    usages = [fields.pop(name) for name in _USAGES if name in fields]
    if usages:
        fields["kv_usage"] = max(usages)
    waiting = [fields.pop(name) for name in _WAITING if name in fields]
    if waiting:
        fields["queued"] = sum(waiting)
    return kind, fields


def _batch(kind: str, segment: str, title: str) -> tuple[str, dict[str, float]] | None:
    body = segment[len(title) :].lstrip(".,] ")
    return _neutral(kind, _pairs(body))


def _fill(segment: str) -> tuple[str, dict[str, float]] | None:
    fields: dict[str, float] = {}
    for label, raw in _FILL_PAIR.findall(segment):
        known = _LABELS.get(label)
        if known is not None:
            fields[known[0]] = float(raw) / known[1]
    return _neutral("fill", fields)


def read(segment: str) -> tuple[str, dict[str, float]] | None:
    """One SGLang serving message (`segment` starts at its title), or None when it is unreadable."""
    if segment.startswith(DECODE):
        return _fast(_FAST_DECODE, "decode", segment) or _batch("decode", segment, DECODE)
    if segment.startswith(PREFILL):
        return _fast(_FAST_PREFILL, "prefill", segment) or _batch("prefill", segment, PREFILL)
    if segment.startswith(FILL):
        return _fill(segment)
    if segment.startswith(UNTITLED):
        return _neutral("decode", _pairs(segment))
    if segment.startswith((RETRACT, DECODE_OOM)):
        match = _RETRACTED.search(segment)
        return ("retract", {"retracted": float(match.group(1))}) if match else None
    if segment.startswith(POOL):
        match = _POOL_TOKENS.search(segment)
        return ("pool", {"pool_tokens": float(match.group(1).replace(",", ""))}) if match else None
    if segment.startswith(SUMMARY):
        match = _SUMMARY_TOKENS.match(segment)
        return ("pool", {"pool_tokens": float(match.group(1))}) if match else None
    return None
