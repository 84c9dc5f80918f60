"""One periodic reading of a serving engine, from a log line or a /metrics poll."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """What the engine said about itself at one moment; None where it did not say.

    `kv_usage` is the share of the KV pool in use (0-1; the fullest pool of a hybrid model),
    `queued` the requests waiting for admission. `new_tokens` / `cached_tokens` are a prefill
    batch's computed and prefix-hit tokens; `hit_rate` is a rate the engine printed itself.
    `line` and `text` are the log line (or the scrape) the sample came from.
    """

    seconds: float | None
    time: str | None
    kv_usage: float | None
    running: int | None
    queued: int | None
    prompt_tps: float | None
    gen_tps: float | None
    new_tokens: int | None
    cached_tokens: int | None
    hit_rate: float | None
    swapped: int | None
    line: int | None
    text: str


def sample_from(
    fields: dict[str, float], seconds: float | None, time: str | None, line: int | None, text: str
) -> Sample:
    """A sample from a grammar's engine-neutral fields."""

    def count(name: str) -> int | None:
        value = fields.get(name)
        return int(value) if value is not None else None

    return Sample(
        seconds=seconds,
        time=time,
        kv_usage=fields.get("kv_usage"),
        running=count("running"),
        queued=count("queued"),
        prompt_tps=fields.get("prompt_tps"),
        gen_tps=fields.get("gen_tps"),
        new_tokens=count("new_tokens"),
        cached_tokens=count("cached_tokens"),
        hit_rate=fields.get("hit_rate"),
        swapped=count("swapped"),
        line=line,
        text=text,
    )
