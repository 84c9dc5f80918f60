"""A server's Prometheus /metrics, polled or saved, as samples: both engines, across renames.

    kv usage     vLLM kv_cache_usage_perc (was gpu_cache_usage_perc); SGLang token_usage, or
                 num_used_tokens / max_total_num_tokens
    running      vLLM num_requests_running; SGLang num_running_reqs (2024: num_requests_running)
    queued       vLLM num_requests_waiting (+ V0's num_requests_swapped); SGLang num_queue_reqs
                 (2024: num_requests_waiting)
    hit rate     vLLM prefix_cache_hits / prefix_cache_queries (was gpu_prefix_cache_*);
                 SGLang cached_tokens (every cache_source) / prompt_tokens; else the engine's
                 hit-rate gauge (vLLM V0 gpu_prefix_cache_hit_rate, SGLang 2024 cache_hit_rate)
    preemptions  vLLM num_preemptions (counter); SGLang num_retracted_reqs (gauge)
    throughput   prompt_tokens and generation_tokens counters; SGLang gen_throughput (gauge)
    pool         vLLM cache_config_info{num_gpu_blocks, block_size}; SGLang max_total_num_tokens

Counters are `_total` on the wire; the parser is prometheus_client's. Where a metric is reported per
engine or rank (label sets), counts are summed and usage is the largest. When a scrape has a new
name and its deprecated alias, only the new one is read. Rates and the hit rate come from counter
differences between scrapes; a single scrape gives the hit rate since the server started.
"""

from __future__ import annotations

import math
import re
import threading
import time as clock
import urllib.request
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.observe.observer import Observer

# field -> metric names (without `_total`), the current name first
_SUMMED: dict[str, tuple[str, ...]] = {
    "running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "sglang:num_requests_running",
    ),
    "queued": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "sglang:num_requests_waiting"),
    "swapped": ("vllm:num_requests_swapped",),
    "used_tokens": ("sglang:num_used_tokens",),
    "pool_tokens": ("sglang:max_total_num_tokens",),
    "hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits", "sglang:cached_tokens"),
    "queries": (
        "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_queries",
        "sglang:prompt_tokens",
    ),
    "prompt": ("vllm:prompt_tokens", "sglang:prompt_tokens"),
    "generated": ("vllm:generation_tokens", "sglang:generation_tokens"),
    "preemptions": ("vllm:num_preemptions",),
    "retracted": ("sglang:num_retracted_reqs",),
    "gen_tps": ("sglang:gen_throughput",),
}
_LARGEST: dict[str, tuple[str, ...]] = {
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "hit_gauge": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
}
_GAUGES: tuple[str, ...] = ("kv_usage", "running", "queued", "swapped", "gen_tps")
_CACHE_CONFIG = "vllm:cache_config_info"
_SAMPLE_LINE = re.compile(
    r"(?:vllm|sglang):\w{1,120}(?:\{[^}\n]{0,2000}\})? \S{1,40}(?: \d{1,20})?\s*$"
)


@dataclass(frozen=True, slots=True)
class Scrape:
    """One /metrics reading: field -> value, and when it was taken."""

    engine: str | None
    values: dict[str, float]
    seconds: float
    time: str


def _number(raw: str | None) -> float | None:
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def parse_scrape(text: str, source: str, seconds: float, when: str) -> Scrape:
    """The fields of one exposition-format text; a text that is not one fails naming `source`."""
    from prometheus_client.parser import text_string_to_metric_families

    by_name: dict[str, list[float]] = {}
    pool: list[float] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                series = (s.name, tuple(sorted(s.labels.items())))
                if series in seen:
                    raise KvtierError(f"{source}: the series {s.name} appears twice in one scrape")
                seen.add(series)
                if s.name.endswith("_created") or not 0 <= s.value < math.inf:
                    continue
                name = s.name.removesuffix("_total")
                by_name.setdefault(name, []).append(float(s.value))
                if name == _CACHE_CONFIG:
                    blocks = _number(s.labels.get("num_gpu_blocks"))
                    size = _number(s.labels.get("block_size"))
                    if blocks is not None and size is not None:
                        pool.append(blocks * size)
    except KvtierError:
        raise
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad text
        raise KvtierError(f"{source}: not Prometheus metrics text ({exc})"[:300]) from None
    if not any(n.startswith(("vllm:", "sglang:")) for n in by_name):
        raise KvtierError(f"{source}: no vllm: or sglang: metric in the scrape (not an engine's)")
    values: dict[str, float] = {}
    for field, names in _SUMMED.items():
        found = next((n for n in names if n in by_name), None)
        if found is not None:
            total = sum(by_name[found])
            if not math.isfinite(total):
                raise KvtierError(f"{source}: {found} sums to {total} over its series")
            values[field] = total
    for field, names in _LARGEST.items():
        found = next((n for n in names if n in by_name), None)
        if found is not None:
            values[field] = max(by_name[found])
    if pool and "pool_tokens" not in values:
        values["pool_tokens"] = sum(pool)
    if "hit_gauge" in values and values["hit_gauge"] > 1:
        values["hit_gauge"] /= 100  # SGLang's 2024 gauge was a percentage
    if "kv_usage" not in values and values.get("pool_tokens") and "used_tokens" in values:
        values["kv_usage"] = values["used_tokens"] / values["pool_tokens"]
    engines = {n.split(":", 1)[0] for n in by_name if n.startswith(("vllm:", "sglang:"))}
    engine = "vllm" if "vllm" in engines else ("sglang" if engines else None)
    return Scrape(engine, values, seconds, when)


def is_metrics_text(text: str) -> bool:
    """Whether a saved file is a /metrics scrape rather than a log."""
    head = text.lstrip()[:4096]
    if head.startswith(("# HELP ", "# TYPE ")):
        return True
    return _SAMPLE_LINE.match(head.split("\n", 1)[0]) is not None


def _delta(now: Scrape, before: Scrape | None, field: str) -> float | None:
    if before is None or field not in now.values or field not in before.values:
        return None
    change = now.values[field] - before.values[field]
    return change if change >= 0 else None  # a reset (restart) gives no rate


def _describe(i: int, s: Scrape, fields: dict[str, float]) -> str:
    shown = ", ".join(f"{k} {v:g}" for k, v in fields.items() if k != "pool_tokens")
    return f"scrape {i + 1} at {s.time}: {shown}"


def observe_scrapes(scrapes: list[Scrape], observer: Observer) -> None:
    """Samples, preemptions, hit rate and pool size of a series of scrapes, into `observer`."""
    before: Scrape | None = None
    for i, s in enumerate(scrapes):
        v = s.values
        fields: dict[str, float] = {k: v[k] for k in _GAUGES if k in v}
        elapsed = s.seconds - before.seconds if before is not None else 0.0
        if elapsed > 0:
            for counter, rate in (("prompt", "prompt_tps"), ("generated", "gen_tps")):
                change = _delta(s, before, counter)
                if change is not None:
                    fields[rate] = change / elapsed
        hits, queries = _delta(s, before, "hits"), _delta(s, before, "queries")
        if hits is not None and queries:
            fields["hit_rate"] = min(1.0, hits / queries)
        if before is None:
            # a first scrape's counters hold everything since the server started
            fields["preemptions"] = v.get("preemptions", 0.0)
        else:
            fields["preemptions"] = _delta(s, before, "preemptions") or 0.0
        fields["retracted"] = v.get("retracted", 0.0)
        engine = s.engine or "unknown"
        if "pool_tokens" in v:
            observer.add(engine, "pool", {"pool_tokens": v["pool_tokens"]}, line=None, text="")
        observer.add(
            engine,
            "metrics",
            fields,
            line=None,
            text=_describe(i, s, fields),
            time=s.time,
        )
        before = s
    _window_hit_rate(scrapes, observer)


def _window_hit_rate(scrapes: list[Scrape], observer: Observer) -> None:
    first, last = scrapes[0], scrapes[-1]
    if "hits" in last.values and "queries" in last.values:
        hits, queries = last.values["hits"], last.values["queries"]
        if len(scrapes) > 1:
            window_hits, window_queries = (
                _delta(last, first, "hits"),
                _delta(last, first, "queries"),
            )
            if window_hits is not None and window_queries:
                hits, queries = window_hits, window_queries
        if queries > 0:
            observer.add_counter_hit_rate(min(1.0, hits / queries))
            return
    if "hit_gauge" in last.values:
        observer.add_counter_hit_rate(last.values["hit_gauge"])


MAX_SCRAPE_BYTES = 64 << 20


def fetch(url: str, timeout: float = 10.0) -> str:
    """The text at `url`, read whole within `timeout` seconds from the first byte sent to the
    last received (a server that drips its answer is cut off); any failure is one line."""
    done: list[str | BaseException] = []

    def get() -> None:
        try:
            done.append(_get(url, timeout))
        except BaseException as exc:  # handed to the caller's thread
            done.append(exc)

    worker = threading.Thread(target=get, name="kvtier-scrape", daemon=True)
    worker.start()
    worker.join(timeout)
    if not done:
        raise KvtierError(f"cannot read {url}: no whole answer within {timeout:g} s")
    if isinstance(done[0], BaseException):
        exc = done[0]
        reason = getattr(exc, "reason", None) or exc
        text = str(reason).splitlines()[0][:200] if str(reason) else type(exc).__name__
        raise KvtierError(f"cannot read {url}: {text}") from None
    return done[0]


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read(MAX_SCRAPE_BYTES + 1)
    if len(body) > MAX_SCRAPE_BYTES:
        raise ValueError(f"over the {MAX_SCRAPE_BYTES:,}-byte bound of a scrape")
    return body.decode("utf-8", errors="replace")


def poll(url: str, samples: int, interval: float) -> list[Scrape]:
    """`samples` scrapes of `url`, `interval` seconds apart."""
    scrapes = []
    for i in range(samples):
        if i:
            clock.sleep(interval)
        text = fetch(url)
        now = clock.time()
        when = clock.strftime("%H:%M:%S", clock.localtime(now))
        scrapes.append(parse_scrape(text, url, now, when))
    return scrapes
