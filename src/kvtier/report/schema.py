"""The shape of the `--json` payloads the report draws, checked before any of it is drawn.

A saved payload may have been edited or cut; every field a section reads is checked here for
its type and range, and a bad one is refused as one line naming its path
(`options[2].kv_tokens`), so drawing never meets a value it cannot place on a chart.

Specs: a leaf kind (below), `{key: spec}` for an object (keys ending in `?` may be missing or
null; other keys are not read and not checked), `[spec]` for a list of any length, or a tuple of
specs, any of which may match.
"""

from __future__ import annotations

import math
from typing import Any

from kvtier.errors import KvtierError

MAX_VALUE = 1e15  # tokens, GiB, rates: anything larger is not a figure a command prints

# leaf kinds -> (test, what the value must be)
_LEAVES: dict[str, tuple[Any, str]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "name": (lambda v: isinstance(v, str) and v.strip() != "", "a name"),
    "scalar": (
        lambda v: v is None or isinstance(v, str | bool) or _finite(v, -MAX_VALUE),
        "a string or a finite number",
    ),
    "count": (lambda v: _finite(v, 0) and float(v).is_integer(), "a whole number >= 0"),
    "positive": (lambda v: _finite(v, 1) and float(v).is_integer(), "a whole number >= 1"),
    "amount": (lambda v: _finite(v, 0), "a finite number >= 0"),
    "signed": (lambda v: _finite(v, -MAX_VALUE), "a finite number"),
    "share": (lambda v: _finite(v, 0) and v <= 1, "a number in [0, 1]"),
}

_SOURCE = ("text", {"line?": "count", "text?": "scalar"})
_SCALARS = ["scalar"]
_LEDGER_VIEW = {
    "engine": "text",
    "model?": ("text", {"id?": "scalar"}),
    "gpu?": "scalar",
    "tp?": "scalar",
    "era?": "scalar",
    "kv_bytes_per_token": "amount",
    "warnings?": _SCALARS,
    "notes?": _SCALARS,
    "context_length?": "positive",
    "max_running_requests?": "count",
    "mem_fraction?": "share",
    "answer?": "scalar",
    "ledger": [
        {
            "item": "scalar",
            "gib": "signed",
            "part?": "scalar",
            "exact?": "scalar",
            "source?": _SOURCE,
        }
    ],
    "not_in_log?": [("scalar", {"item": "scalar", "why": "scalar"})],
    "options?": [
        {
            "name": "scalar",
            "kv_tokens?": "count",
            "host_tokens?": "count",
            "host?": {"tokens_per_rank?": "count"},
            "flags?": ("scalar", _SCALARS),
            "cost?": "scalar",
        }
    ],
    "inputs?": [{"name": "scalar", "value": "scalar", "source?": _SOURCE, "origin?": _SOURCE}],
}
_PLAN = {**_LEDGER_VIEW, "kv_tokens": "count", "kv_tokens_range?": ["count"]}
_EXPLAIN = {
    **_LEDGER_VIEW,
    "observed": {"kv_tokens": "count"},
    "predicted": {"kv_tokens": "count", "range?": ["count"], "formula?": "scalar"},
    "verdict?": "scalar",
}
_RUN = {
    "hit_rate_by_tier": {},  # tier -> share: checked in `_run_tiers`
    "requests": "count",
    "hit_rate": "share",
    "ttft_s?": {"p50": "amount", "p90?": "amount", "p99": "amount"},
    "throughput_tok_s?": "amount",
    "value?": "scalar",
    "params?": {},
}
_POINT = {
    "kv_usage?": "share",
    "running?": "count",
    "queued?": "count",
    "prompt_tps?": "amount",
    "gen_tps?": "amount",
    "hit_rate?": "share",
    "samples?": "positive",
    "line?": "count",
}
_OBSERVE = {
    "source": "text",
    "engine?": "scalar",
    "samples": "count",
    "diagnosis": "name",
    "reason?": "scalar",
    "kv_usage_max?": "share",
    "queue_max?": "count",
    "kv_full_threshold?": "share",
    "next_steps?": _SCALARS,
    "evidence?": [{"line?": "count", "text": "scalar"}],
    "timeline": [_POINT],
}
SCHEMAS: dict[str, Any] = {
    "plan": _PLAN,
    "advise": _PLAN,
    "explain": _EXPLAIN,
    "simulate": {"notes?": _SCALARS, "sweep?": {"param": "name", "runs": [_RUN]}},
    "observe": _OBSERVE,
}


def check_payload(kind: str, payload: Any, source: str) -> None:
    """Refuse a `kind` payload a section could not draw, naming the field and `source`."""
    problem = _problem(SCHEMAS[kind], payload, "")
    if problem is None and kind == "simulate":
        problem = _simulate_problem(payload)
    if problem is None and kind in ("plan", "advise", "explain"):
        problem = _pairs_problem(payload, kind)
    if problem is not None:
        raise KvtierError(f"report: {source}: {problem}")


def _finite(value: Any, least: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and least <= value <= MAX_VALUE
    )


def _problem(spec: Any, value: Any, path: str) -> str | None:
    """What is wrong with `value` at `path` against `spec`, or None."""
    if isinstance(spec, tuple):
        problems = [_problem(s, value, path) for s in spec]
        if all(problems):
            return min(problems, key=len)  # type: ignore[arg-type]
        return None
    if isinstance(spec, str):
        test, wanted = _LEAVES[spec]
        return (
            None
            if test(value)
            else f"`{path or 'the payload'}` must be {wanted}, got {_shown(value)}"
        )
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"`{path}` must be a list, got {_shown(value)}"
        for i, item in enumerate(value):
            if (found := _problem(spec[0], item, f"{path}[{i}]")) is not None:
                return found
        return None
    if not isinstance(value, dict):
        return f"`{path or 'the payload'}` must be an object, got {_shown(value)}"
    for key, sub in spec.items():
        name = key.rstrip("?")
        where = f"{path}.{name}" if path else name
        if value.get(name) is None:
            if not key.endswith("?"):
                return f"no `{where}`"
            continue
        if (found := _problem(sub, value[name], where)) is not None:
            return found
    return None


def _simulate_problem(payload: dict[str, Any]) -> str | None:
    sweep = payload.get("sweep")
    runs = [payload] if sweep is None else sweep["runs"]
    if not runs:
        return "`sweep.runs` is empty"
    for i, run in enumerate(runs):
        where = "" if sweep is None else f"sweep.runs[{i}]."
        if sweep is None and (found := _problem(_RUN, run, "")) is not None:
            return found
        tiers = run["hit_rate_by_tier"]
        for tier, share in tiers.items():
            if not _LEAVES["share"][0](share):
                wanted = _LEAVES["share"][1]
                return f"`{where}hit_rate_by_tier.{tier}` must be {wanted}, got {_shown(share)}"
        if run.get("ttft_s") and run.get("throughput_tok_s") is None:
            return f"no `{where}throughput_tok_s`"
        if sweep is not None and "value" not in run:
            param = sweep["param"]
            params = run.get("params") or {}
            if not _LEAVES["scalar"][0](params.get(param)) or params.get(param) is None:
                return f"no `{where}value` or `{where}params.{param}`"
    return None


def _pairs_problem(payload: dict[str, Any], kind: str) -> str | None:
    """Two-number ranges: `[low, high]` with low <= high."""
    ranges = [("kv_tokens_range", payload.get("kv_tokens_range"))]
    if kind == "explain":
        ranges.append(("predicted.range", payload["predicted"].get("range")))
    for name, pair in ranges:
        if pair and (len(pair) != 2 or pair[0] > pair[1]):
            return f"`{name}` must be [low, high], got {_shown(pair)}"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
