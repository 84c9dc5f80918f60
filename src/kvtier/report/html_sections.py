"""HTML sections built from the typed results of plan, advise, explain, observe and simulate.

The payloads are the objects the commands print as `--json` (`kvtier.report.payloads`); a saved
file is read back into the same objects, refused field by field when it does not fit, so a
section only meets values it can draw. The sections read the payloads and compute nothing.
"""

from __future__ import annotations

from html import escape

from kvtier.engines.ledger import Input
from kvtier.errors import KvtierError
from kvtier.report.charts import (
    PALETTE,
    Series,
    line_chart,
)
from kvtier.report.concurrency import requests_caption, whole_requests
from kvtier.report.explain_payload import ExplainPayload, LogInput
from kvtier.report.html_memory import memory_section
from kvtier.report.html_parts import Section, figure, source_text, table, tokens
from kvtier.report.html_sim import simulation_section
from kvtier.report.observe_payload import ObservePayload
from kvtier.report.payloads import LedgerPayload, Payload
from kvtier.report.plan_payload import AdvisePayload, OptionPayload, PlanPayload
from kvtier.sim.advise import WorkloadAdvice
from kvtier.sim.payload import SimulatePayload

# Context lengths the capacity chart samples: 4k to 256k tokens, powers of two.
CONTEXT_LENGTHS = tuple(1 << k for k in range(12, 19))


def context_label(value: float) -> str:
    return f"{int(value) // 1024}k"


def model_name(payload: Payload) -> str:
    """The model id: a plan's model, an explanation's model id; none for the other kinds."""
    if isinstance(payload, ExplainPayload):
        return payload.model.id
    if isinstance(payload, AdvisePayload):
        return payload.plan.model
    return payload.model if isinstance(payload, PlanPayload) else ""


def plan_of(payload: PlanPayload | AdvisePayload) -> PlanPayload:
    return payload.plan if isinstance(payload, AdvisePayload) else payload


def observed_tokens(payload: ExplainPayload) -> int:
    """The log's KV token count; a failed start that printed none has nothing to draw."""
    if payload.observed.kv_tokens is None:
        raise KvtierError("report: the explain observed data has no 'kv_tokens'")
    return payload.observed.kv_tokens


def summary_section(kind: str, payload: LedgerPayload) -> Section:
    """Headline facts: engine, model, KV tokens and, for a log, observed against recomputed."""
    if isinstance(payload, ExplainPayload):
        facts = [("engine", payload.engine), ("model", model_name(payload))]
        facts.append(("KV bytes per token per GPU", tokens(payload.kv_bytes_per_token)))
        observed, predicted = observed_tokens(payload), payload.predicted
        recomputed = predicted.kv_tokens
        facts.append(("KV tokens in the log", tokens(observed)))
        low, high = predicted.range
        text = f"{tokens(recomputed)} ({recomputed - observed:+,})"
        text += f", {tokens(low)} to {tokens(high)} from the printed rounding"
        facts.append(("KV tokens recomputed", text))
        if payload.verdict:
            facts.append(("verdict", payload.verdict))
        if predicted.formula:
            facts.append(("formula", predicted.formula))
        notes = [*payload.warnings, *payload.notes]
    else:
        plan = plan_of(payload)
        facts = [("engine", plan.engine), ("model", plan.model)]
        facts += [("GPU", plan.gpu), ("tensor parallel", str(plan.tp)), ("rules of", plan.era)]
        facts.append(("KV bytes per token per GPU", tokens(plan.kv_bytes_per_token)))
        facts.append(("KV tokens", tokens(plan.kv_tokens)))
        if plan.kv_tokens_range:
            low, high = plan.kv_tokens_range
            facts.append(("KV tokens range", f"{tokens(low)} to {tokens(high)}"))
        notes = list(plan.notes)
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    listed = "".join(f"<li>{escape(n)}</li>" for n in notes)
    body = f'<dl class="facts">{items}</dl>' + (f'<ul class="notes">{listed}</ul>' if notes else "")
    return Section(f"{kind}-summary", f"{kind}: summary", body)


def baseline_tokens(payload: LedgerPayload) -> int:
    """The KV tokens the deployment has now: the log's figure for explain, the plan's otherwise."""
    if isinstance(payload, ExplainPayload):
        return observed_tokens(payload)
    return plan_of(payload).kv_tokens


def sampled_contexts(payload: LedgerPayload) -> tuple[int, ...]:
    """The sampled context lengths up to the deployment's context length, when it is known."""
    if isinstance(payload, ExplainPayload):
        return CONTEXT_LENGTHS
    limit = plan_of(payload).context_length
    return tuple(c for c in CONTEXT_LENGTHS if c <= limit) or (limit,)


def options_of(payload: LedgerPayload) -> tuple[OptionPayload, ...]:
    return () if isinstance(payload, PlanPayload) else payload.options


def capacity_section(kind: str, payload: LedgerPayload) -> Section:
    """Concurrent requests of each context length the KV pool holds, now and with each option."""
    base = baseline_tokens(payload)
    if isinstance(payload, ExplainPayload):
        cap, span = payload.max_running_requests, None
    else:
        cap, span = plan_of(payload).max_running_requests, plan_of(payload).kv_tokens_range
    ctxs = sampled_contexts(payload)

    def fits(kv_tokens: int, ctx: int) -> int:
        return whole_requests(kv_tokens / ctx, cap)

    lines: dict[tuple[tuple[tuple[int, int], ...], bool], list[str]] = {
        (tuple((c, fits(base, c)) for c in ctxs), False): ["now"]
    }
    rows = [["now", "", tokens(base), "1.00x", "", ""]]
    for option in options_of(payload):
        name, kv, host = option.name, option.kv_tokens, int(option.host_tokens or 0)
        if kv is not None:
            lines.setdefault((tuple((c, fits(kv, c)) for c in ctxs), False), []).append(name)
        if kv is not None and host:
            cached = tuple((c, (kv + host) // c) for c in ctxs)
            lines.setdefault((cached, True), []).append(f"{name}: contexts cached in GPU + host")
        ratio = "" if kv is None or not base else f"{kv / base:.2f}x"
        kv_text = "-" if kv is None else tokens(kv)
        host_text = tokens(host) if host else ""
        rows.append([name, " ".join(option.flags), kv_text, ratio, host_text, option.cost])
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
    if span:
        low, high = span
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


def _input_row(i: Input | LogInput) -> list[str]:
    if isinstance(i, Input):
        return [i.name, i.value, source_text(i.origin)]
    if i.value is None:
        raise KvtierError("report: the input data has no 'value'")
    return [i.name, str(i.value), source_text(i.source, i.value)]


def inputs_section(kind: str, payload: LedgerPayload) -> Section | None:
    """Every input the figures came from, and where each was read or stated."""
    inputs = payload.inputs if isinstance(payload, ExplainPayload) else plan_of(payload).inputs
    if not inputs:
        return None
    return Section(
        f"{kind}-inputs",
        "Inputs and their sources",
        table(["input", "value", "source"], [_input_row(i) for i in inputs], "inputs"),
    )


def sections_for(kind: str, payload: Payload) -> list[Section]:
    """The sections one command's payload becomes, in reading order."""
    if isinstance(payload, SimulatePayload):
        return [simulation_section(payload)]
    if isinstance(payload, WorkloadAdvice):
        from kvtier.report.html_advise import advice_section

        return [advice_section(payload)]
    if isinstance(payload, ObservePayload):
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
