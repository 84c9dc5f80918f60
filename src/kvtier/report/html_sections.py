"""HTML sections built from the `--json` payloads of plan, advise, explain and simulate.

The payload dicts are the stable contract between the commands and this layer; nothing here
imports the budget, logs or sim modules. A payload that lacks a key a section needs is refused
with a message naming the key, rather than drawn half-empty.
"""

from __future__ import annotations

from html import escape

from kvtier.errors import KvtierError
from kvtier.report.charts import (
    PALETTE,
    Series,
    line_chart,
)
from kvtier.report.concurrency import requests_caption, whole_requests
from kvtier.report.html_memory import memory_section
from kvtier.report.html_parts import Payload, Section, figure, need, source_text, table, tokens
from kvtier.report.html_sim import simulation_section

# Context lengths the capacity chart samples: 4k to 256k tokens, powers of two.
CONTEXT_LENGTHS = tuple(1 << k for k in range(12, 19))


def context_label(value: float) -> str:
    return f"{int(value) // 1024}k"


def model_name(payload: Payload) -> str:
    """The model id: a string in plan, `{id, source}` in explain."""
    model = payload.get("model") or ""
    return str(model.get("id", "")) if isinstance(model, dict) else str(model)


def summary_section(kind: str, payload: Payload) -> Section:
    """Headline facts: engine, model, KV tokens and, for a log, observed against recomputed."""
    facts = [("engine", str(need(payload, "engine", kind))), ("model", model_name(payload))]
    for key, label in (("gpu", "GPU"), ("tp", "tensor parallel"), ("era", "rules of")):
        if key in payload:
            facts.append((label, str(payload[key])))
    facts.append(("KV bytes per token per GPU", tokens(need(payload, "kv_bytes_per_token", kind))))
    if kind == "explain":
        observed = need(need(payload, "observed", kind), "kv_tokens", "explain observed")
        predicted = need(payload, "predicted", kind)
        recomputed = int(need(predicted, "kv_tokens", "explain predicted"))
        facts.append(("KV tokens in the log", tokens(observed)))
        text = f"{tokens(recomputed)} ({recomputed - observed:+,})"
        if predicted.get("range"):
            low, high = predicted["range"]
            text += f", {tokens(low)} to {tokens(high)} from the printed rounding"
        facts.append(("KV tokens recomputed", text))
        if payload.get("verdict"):
            facts.append(("verdict", str(payload["verdict"])))
        if predicted.get("formula"):
            facts.append(("formula", str(predicted["formula"])))
    else:
        facts.append(("KV tokens", tokens(need(payload, "kv_tokens", kind))))
        if payload.get("kv_tokens_range"):
            low, high = payload["kv_tokens_range"]
            facts.append(("KV tokens range", f"{tokens(low)} to {tokens(high)}"))
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    notes = [*(payload.get("warnings") or ()), *(payload.get("notes") or ())]
    listed = "".join(f"<li>{escape(str(n))}</li>" for n in notes)
    body = f'<dl class="facts">{items}</dl>' + (f'<ul class="notes">{listed}</ul>' if notes else "")
    return Section(f"{kind}-summary", f"{kind}: summary", body)


def baseline_tokens(kind: str, payload: Payload) -> int:
    """The KV tokens the deployment has now: the log's figure for explain, the plan's otherwise."""
    if kind == "explain":
        return int(need(need(payload, "observed", kind), "kv_tokens", "explain observed"))
    return int(need(payload, "kv_tokens", kind))


def contexts(payload: Payload) -> tuple[int, ...]:
    """The sampled context lengths up to the deployment's context length, when it is known."""
    limit = payload.get("context_length")
    if not limit:
        return CONTEXT_LENGTHS
    return tuple(c for c in CONTEXT_LENGTHS if c <= limit) or (int(limit),)


def flags_text(flags: object) -> str:
    return " ".join(str(f) for f in flags) if isinstance(flags, list | tuple) else str(flags or "")


def capacity_section(kind: str, payload: Payload) -> Section:
    """Concurrent requests of each context length the KV pool holds, now and with each option."""
    base = baseline_tokens(kind, payload)
    cap = payload.get("max_running_requests")
    ctxs = contexts(payload)

    def fits(kv_tokens: int, ctx: int) -> int:
        return whole_requests(kv_tokens / ctx, cap)

    lines: dict[tuple[tuple[tuple[int, int], ...], bool], list[str]] = {
        (tuple((c, fits(base, c)) for c in ctxs), False): ["now"]
    }
    rows = [["now", "", tokens(base), "1.00x", "", ""]]
    for option in payload.get("options") or ():
        name = str(need(option, "name", "option"))
        kv = option.get("kv_tokens")
        host = int(
            option.get("host_tokens") or (option.get("host") or {}).get("tokens_per_rank") or 0
        )
        if kv is not None:
            lines.setdefault((tuple((c, fits(kv, c)) for c in ctxs), False), []).append(name)
        if kv is not None and host:
            cached = tuple((c, (kv + host) // c) for c in ctxs)
            lines.setdefault((cached, True), []).append(f"{name}: contexts cached in GPU + host")
        ratio = "" if kv is None or not base else f"{kv / base:.2f}x"
        kv_text = "-" if kv is None else tokens(kv)
        host_text = tokens(host) if host else ""
        flags = flags_text(option.get("flags"))
        rows.append([name, flags, kv_text, ratio, host_text, str(option.get("cost", ""))])
    # Options that change nothing at these lengths are named once, in the caption, not drawn;
    # options equal to each other share a line and a column.
    same_as_now = next(iter(lines.values()))[1:]
    series = [
        Series(
            " = ".join(names[:1] if i == 0 else names),
            points,
            "#000000" if i == 0 else PALETTE[i % len(PALETTE)],
            dashed,
        )
        for i, ((points, dashed), names) in enumerate(lines.items())
    ]
    heading = "Concurrent requests by context length"
    caption = (
        requests_caption(cap).capitalize()
        + ": every running request keeps its whole context on the GPU. A host tier caches "
        "more contexts (dashed) but does not let more requests run at once. Both axes double "
        "per step; a context that does not fit even once is left off the chart (0 in the table)."
    )
    if same_as_now:
        caption += f" Same requests as now at every length: {', '.join(same_as_now)}."
    headers = ["context"] + [s.name for s in series]
    grid = [[context_label(c)] + [tokens(dict(s.points)[c]) for s in series] for c in ctxs]
    if payload.get("kv_tokens_range"):
        low, high = payload["kv_tokens_range"]
        headers.insert(2, "now, range")
        for row, c in zip(grid, ctxs, strict=True):
            row.insert(2, f"{fits(low, c):,} - {fits(high, c):,}")
    if any(y >= 1 for s in series for _, y in s.points):
        svg = line_chart(
            series,
            title=heading,
            x_log2=True,
            y_log2=True,
            x_label="context length (tokens)",
            y_label="requests that fit in the KV pool",
            x_fmt=context_label,
            y_fmt=lambda v: f"{v:,.0f}",
        )
        body = figure(heading, svg, caption)
    else:
        body = f"<p>Not one {context_label(ctxs[0])} context fits in the KV pool.</p>"
    body += table(headers, grid, "concurrency")
    if len(rows) > 1:
        head = ["option", "engine flags", "GPU KV tokens", "vs now", "host tokens", "cost"]
        body += table(head, rows, "options")
    return Section(f"{kind}-capacity", "KV capacity and concurrency", body)


def inputs_section(kind: str, payload: Payload) -> Section | None:
    """Every input the figures came from, and where each was read or stated."""
    inputs = payload.get("inputs")
    if not inputs:
        return None
    rows = [
        [
            str(need(i, "name", "input")),
            str(need(i, "value", "input")),
            source_text(i.get("source") or i.get("origin"), i.get("value")),
        ]
        for i in inputs
    ]
    return Section(
        f"{kind}-inputs",
        "Inputs and their sources",
        table(["input", "value", "source"], rows, "inputs"),
    )


def sections_for(kind: str, payload: Payload) -> list[Section]:
    """The sections one command's `--json` payload becomes, in reading order."""
    if kind == "simulate":
        return [simulation_section(payload)]
    if kind == "observe":
        from kvtier.report.html_observe import observe_section

        return [observe_section(payload)]
    if kind not in ("plan", "advise", "explain"):
        raise KvtierError(f"report: no HTML view for '{kind}' data")
    parts = [
        summary_section(kind, payload),
        memory_section(kind, payload),
        capacity_section(kind, payload),
        inputs_section(kind, payload),
    ]
    return [p for p in parts if p is not None]
