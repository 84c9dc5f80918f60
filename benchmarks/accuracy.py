"""kvtier against the KV token count real startup logs printed, per engine.

For every real log in the test set (tests/fixtures/logs/cases.json, tests/fixtures/logs/public/
index.json, and the shared development cases when present beside the repository):

- explain: the count recomputed from the log's own figures (`kvtier explain LOG`);
- plan: the count planned without them, from the model, GPU, TP and the settings the log states
  (`kvtier plan`: the same deployment with every measured figure dropped), and whether the plan's
  stated range holds the logged count. Plan needs a model kvtier resolves and a catalog GPU.

Exits 1 when explain misses a log with memory lines by more than 0.5%; the plan goals (median
error <= 2%, range holds >= 90% of logs) are reported, not enforced.

    .venv/bin/python benchmarks/accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from kvtier.engines.deployment import Deployment, Measured
from kvtier.engines.ledger import Ledger
from kvtier.engines.vllm.pool import ContextTooLong, era_for
from kvtier.engines.vllm.profile import ProfileBatch, ProfileShape, activation_peak
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import build_ledger, resolve
from kvtier.model.catalog import resolve_model
from kvtier.model.description import ModelSpec
from kvtier.model.gpu import resolve_gpu
from kvtier.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "logs"
SHARED = ROOT.parent / "shared" / "cases" / "dev-logs.json"
EXPLAIN_TOLERANCE = 0.005
PLAN_MEDIAN_GOAL = 0.02
PLAN_RANGE_GOAL = 0.90
# how explain says a log prints a count but not the figures to recompute it
UNCHECKED_PREFIX = "the log lacks the figures to recompute it ("

# What a log does not state, given as the flags a user would pass (as tests/test_explain_cases.py).
FLAGS: dict[str, dict[str, object]] = {
    "S09": {"model": "Qwen/Qwen3-0.6B", "gpu": "RTX 5080", "engine_version": "0.4.10"},
    # no version line; the memory-profiling line's format is vLLM 0.6.4-0.6.5's (index.json)
    "vllm-0.6-v0-llama-3.1-8b-3090-20k": {"engine_version": "0.6.4"},
    "vllm-0.6-v0-llama-3.1-8b-3090-29k-failed": {"engine_version": "0.6.4"},
    # the launch command (index.json notes): --tp-size 2 --mem-fraction-static 0.85
    "sglang-2026-qwen3.5-397b-a17b-gdn-4090-tp2": {"mem_fraction": 0.85, "tp": 2},
}
# The GPU of the cases whose record does not name it (README: the founding deployment).
GPUS: dict[str, str] = {"seed": "RTX PRO 6000"}


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    text: str
    gpu: str | None  # as the source describes it
    model: str | None  # as the source names it
    version: str | None  # the engine version the source states


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    engine: str
    model: str
    gpu: str  # catalog name, or why there is none
    tp: int
    observed: int
    explained: int | None
    explain_error: float | None
    memory_lines: bool  # the log prints the figures its pool is computed from
    unchecked: str  # without them: why explain cannot recompute the count ("" with them)
    planned: int | None
    plan_range: tuple[int, int] | None
    plan_error: float | None
    plan_note: str  # why there is no plan figure
    # SGLang, where the log prints its memory figures: the plan's count error split by the term
    # it estimates (free before load, weights, fraction), as shares of the logged count
    plan_terms: dict[str, float] | None = None
    # vLLM, where the log prints its profiled torch peak: the peak engines/vllm/profile.py models
    # for the plan's batch and the one measured, GiB
    profile_peak: tuple[float, float] | None = None

    @property
    def in_range(self) -> bool | None:
        if self.plan_range is None:
            return None
        return self.plan_range[0] <= self.observed <= self.plan_range[1]


def cases() -> list[Case]:
    found: dict[str, Case] = {}
    shared = json.loads(SHARED.read_text(encoding="utf-8")) if SHARED.is_file() else []
    shared_gpu = {str(c["id"]): c.get("gpu") for c in shared}
    shared_version = {str(c["id"]): c.get("engine_version") for c in shared}
    for c in json.loads((LOGS / "cases.json").read_text(encoding="utf-8"))["cases"]:
        cid = str(c["id"])
        gpu = GPUS.get(cid) or shared_gpu.get(cid)
        text = (LOGS / str(c["file"])).read_text(encoding="utf-8")
        found[cid] = Case(cid, text, gpu, c.get("model"), shared_version.get(cid))
    for c in json.loads((LOGS / "public" / "index.json").read_text(encoding="utf-8")):
        cid = str(c["id"])
        text = (LOGS / "public" / f"{cid}.log").read_text(encoding="utf-8")
        found[cid] = Case(cid, text, c.get("gpu"), c.get("model"), c.get("engine_version"))
    for c in shared:
        if str(c["id"]) not in found and c.get("log"):
            cid = str(c["id"])
            found[cid] = Case(
                cid, str(c["log"]), c.get("gpu"), c.get("model"), c.get("engine_version")
            )
    return list(found.values())


def catalog_gpu(described: str | None) -> str | None:
    """The catalog GPU a source's description names ('4x NVIDIA L4 24GB (AWS ...)' -> 'L4')."""
    if not described or "not stated" in described:  # a guess is not a stated GPU
        return None
    text = re.sub(r"^\d+\s*x\s*", "", described.split("(")[0]).strip()
    text = re.sub(r"\s*x\d+$", "", text)
    for candidate in (text, re.sub(r"\s+\d+\s*GB$", "", text)):
        try:
            return resolve_gpu(candidate).name
        except KvtierError:
            continue
    return None


def _source_flags(case: Case) -> dict[str, object]:
    """The source's model (when kvtier resolves it) and engine version as flags; the log's own
    statements win over them."""
    flags: dict[str, object] = {}
    if case.version and re.match(r"\d+\.\d+\.\d+", case.version):
        flags["engine_version"] = case.version.split()[0]
    if case.model:
        with contextlib.suppress(KvtierError):
            flags["model"] = resolve_model(case.model.split()[0]).model_id
    return flags


def measure(case: Case) -> Row | None:
    flags = {**_source_flags(case), **FLAGS.get(case.id, {})}
    e = explain_log(case.text, flags)
    rec = e.reconciliation
    if rec.observed is None:
        return None  # a failed start that printed no count
    observed = rec.observed.value
    memory = rec.unchecked is None
    explained = rec.predicted if memory else None
    gpu = catalog_gpu(case.gpu) or (str(flags["gpu"]) if "gpu" in flags else None)
    base = dict(
        id=case.id,
        engine=e.engine,
        model=rec.model.model_id,
        gpu=gpu or f"not in catalog: {case.gpu}",
        tp=e.inputs.tp.value,
        observed=observed,
        explained=explained,
        explain_error=(explained - observed) / observed if explained is not None else None,
        memory_lines=memory,
        unchecked="" if memory else str(rec.unchecked),
    )
    if not e.inputs.model_known:
        return Row(**base, planned=None, plan_range=None, plan_error=None,
                   plan_note="model not resolved")  # fmt: skip
    if gpu is None:
        return Row(**base, planned=None, plan_range=None, plan_error=None,
                   plan_note="GPU not in catalog")  # fmt: skip
    logged = dataclasses.replace(e.deployment, gpu=gpu)
    deployment = dataclasses.replace(logged, measured=Measured())
    note, terms, peak = "", None, None
    try:
        ledger = build_ledger(resolve(deployment, model=e.inputs.model, logged=True))
        planned, plan_range = ledger.kv_tokens, ledger.kv_tokens_range
        if e.engine == "vllm":
            peak = vllm_peak(ledger, logged, e.inputs.model)
        if e.engine == "sglang" and memory:
            explained_ledger = build_ledger(resolve(logged, model=e.inputs.model, logged=True))
            card = resolve_gpu(gpu).memory_mib * MiB / GiB
            terms = sglang_terms(ledger, explained_ledger, card)
            # as shares of the logged count; explain's own miss is the printed figures' rounding
            terms = {k: v * explained_ledger.kv_tokens / observed for k, v in terms.items()}
            terms["printed rounding"] = (explained_ledger.kv_tokens - observed) / observed
    except ContextTooLong as exc:
        # the engine's own refusal of the context; the pool it sized is still the figure to check
        planned, plan_range = exc.tokens, exc.tokens_range
        note = "refuses the context length"
    except KvtierError as exc:
        return Row(**base, planned=None, plan_range=None, plan_error=None,
                   plan_note=f"plan refused: {exc}")  # fmt: skip
    return Row(
        **base,
        planned=planned,
        plan_range=plan_range,
        plan_error=(planned - observed) / observed,
        plan_note=note,
        plan_terms=terms,
        profile_peak=peak,
    )


def vllm_peak(planned: Ledger, logged: Deployment, model: ModelSpec) -> tuple[float, float] | None:
    """The activation peak profile.py models for the batch and dtype the plan states, and the
    torch peak increase the log measured (GiB)."""
    measured = logged.measured.profile.activation_gib
    stated = {i.name: i.value for i in planned.inputs}
    shape = ProfileShape.of(model, logged.tp, stated["model dtype"])
    if measured is None or shape is None:
        return None
    tokens, seqs = int(stated["max_num_batched_tokens"]), int(stated["max_num_seqs"])
    era = era_for(logged.engine_version)
    modelled = activation_peak(era, ProfileBatch(tokens, seqs, "", ""), shape).bytes / GiB
    return modelled, measured


# the ledger item each estimated term of SGLang's budget is read from
BEFORE_LOAD = "before load: driver, CUDA context, NCCL"
WEIGHTS = "weights"


def sglang_terms(planned: Ledger, explained: Ledger, card_gib: float) -> dict[str, float]:
    """profile_max_num_token's rest = pre x f - weights (pre: free before load), so the plan's
    count error is, term by term, (estimated - logged) over the logged rest; tokens are
    proportional to rest."""

    def read(ledger: Ledger) -> tuple[float, float, float]:
        items = {i.item: i.gib for i in ledger.items}
        return card_gib - items[BEFORE_LOAD], items[WEIGHTS], ledger.mem_fraction

    pre_p, w_p, f_p = read(planned)
    pre_l, w_l, f_l = read(explained)
    rest = pre_l * f_l - w_l
    return {
        "free before load": (pre_p - pre_l) * f_l / rest,
        "weights": (w_l - w_p) / rest,
        "fraction": (f_p - f_l) * pre_p / rest,
    }


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.2f}%"


def table(rows: list[Row]) -> str:
    lines = [
        "| log | engine | model | GPU x TP | logged | explain | err | plan | err | range holds |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        plan = f"{r.planned:,}" if r.planned is not None else r.plan_note
        if r.planned is not None and r.plan_note:
            plan += f" ({r.plan_note})"
        holds = {None: "—", True: "yes", False: "no"}[r.in_range]
        if r.plan_range is not None:
            holds += f" ({r.plan_range[0]:,}-{r.plan_range[1]:,})"
        explained = f"{r.explained:,}" if r.explained is not None else "count only"
        lines.append(
            f"| {r.id} | {r.engine} | {r.model} | {r.gpu} x{r.tp} | {r.observed:,} | "
            f"{explained} | {_pct(r.explain_error)} | {plan} | {_pct(r.plan_error)} | {holds} |"
        )
    return "\n".join(lines)


def peak_table(rows: list[Row]) -> str:
    """vLLM's profiled torch peak: modelled for the plan's batch against the log's."""
    lines = [
        "| log | model | GPU x TP | modelled GiB | measured GiB | measured - modelled |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        if r.profile_peak is not None:
            modelled, measured = r.profile_peak
            lines.append(
                f"| {r.id} | {r.model} | {r.gpu} x{r.tp} | {modelled:.2f} | {measured:.2f} | "
                f"{measured - modelled:+.2f} |"
            )
    return "\n".join(lines)


def terms_table(rows: list[Row]) -> str:
    """SGLang plan errors term by term (shares of the logged count)."""
    names = ("free before load", "weights", "fraction", "printed rounding")
    lines = [
        "| log | GPU x TP | plan err | " + " | ".join(names) + " |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for r in rows:
        if r.plan_terms is None:
            continue
        shares = " | ".join(_pct(r.plan_terms[n]) for n in names)
        lines.append(f"| {r.id} | {r.gpu} x{r.tp} | {_pct(r.plan_error)} | {shares} |")
    return "\n".join(lines)


def summary(rows: list[Row]) -> tuple[list[str], bool]:
    """Per engine: explain's worst error, plan's median error and range share; explain's verdict."""
    out, explain_ok = [], True
    for engine in sorted({r.engine for r in rows}):
        mine = [r for r in rows if r.engine == engine]
        explained = [abs(r.explain_error) for r in mine if r.explain_error is not None]
        misses = [r.id for r in mine if r.memory_lines and abs(r.explain_error or 0) > 0.005]
        explain_ok &= not misses
        planned = [r for r in mine if r.plan_error is not None]
        worst = max(explained) if explained else None
        line = (
            f"{engine}: explain {len(explained)} logs with memory lines, worst |err| "
            f"{_pct(worst).lstrip('+')}, misses > 0.5%: {', '.join(misses) or 'none'}"
        )
        if planned:
            median = statistics.median(abs(r.plan_error or 0) for r in planned)
            held = sum(bool(r.in_range) for r in planned) / len(planned)
            goal = median <= PLAN_MEDIAN_GOAL and held >= PLAN_RANGE_GOAL
            line += (
                f"; plan {len(planned)} logs, median |err| {median * 100:.2f}% (goal <= 2%), "
                f"range holds {held * 100:.0f}% (goal >= 90%): {'met' if goal else 'NOT met'}"
            )
        out.append(line)
        by_reason: dict[str, list[str]] = {}
        for r in mine:
            if not r.memory_lines:
                reason = r.unchecked.removeprefix(UNCHECKED_PREFIX).removesuffix(")")
                by_reason.setdefault(reason, []).append(r.id)
        for reason, ids in by_reason.items():
            out.append(
                f"{engine}: count only, not recomputed ({reason}): {len(ids)} logs: "
                + ", ".join(ids)
            )
    return out, explain_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="rows as JSON")
    args = parser.parse_args(argv)
    rows = [r for r in map(measure, cases()) if r is not None]
    lines, explain_ok = summary(rows)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
    else:
        print(table(rows))
        print()
        print("SGLang plan error by estimated term (share of the logged count):")
        print()
        print(terms_table(rows))
        print()
        print("vLLM profile run's torch peak, modelled for the plan's batch against the log's:")
        print()
        print(peak_table(rows))
        print()
        print("\n".join(lines))
    return 0 if explain_ok else 1


if __name__ == "__main__":
    sys.exit(main())
