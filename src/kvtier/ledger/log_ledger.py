"""The per-GPU ledger a startup log itself shows, and the plain answer to "is memory left unused?".

SGLang, one GPU (figures from the log's lines; the reserve is a fixed share of pre-load free):

    |---- weights ----|---- KV pool ----|-- pool-time extras --|----------- reserve -----------|
     Load weight end    KV Cache is        free after load          free before load x (1 - f):
     mem usage          allocated          - KV - pool end          draft weights, draft KV,
                                                                    CUDA graphs, then free

vLLM, one GPU: total x utilization is the budget; weights, activation peak and non-torch memory
come out of it and the KV cache takes the rest; CUDA graphs (before v0.21) and whatever the
engine did not request stay outside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.deployment import Measured
from kvtier.engines.ledger import Ledger, LedgerItem
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.engines.vllm.log import VllmStartup
from kvtier.ledger.log_inputs import LogInputs, budgeted_graphs
from kvtier.ledger.reconcile import Reconciliation
from kvtier.logs.facts import Fact, min_over_ranks
from kvtier.logs.lines import rank_order
from kvtier.units import GiB

_PREFIX_SPAN = 160


@dataclass(frozen=True, slots=True)
class LogLedger:
    """Where one GPU's memory went, as far as the log shows, and what stayed free."""

    items: tuple[LedgerItem, ...]  # taken before and by the KV pool
    reserve: LedgerItem | None  # SGLang: what the fraction holds back for later allocations
    reserve_uses: tuple[LedgerItem, ...]  # what the log shows came out of the reserve
    free_end: LedgerItem | None
    unlogged: tuple[tuple[str, str], ...]  # (consumer, why) for what the log does not size
    answer: str


def _item(name: str, fact: Fact[float]) -> LedgerItem:
    return LedgerItem(name, fact.value, _cite(fact), True)


def _cite(fact: Fact[object]) -> str:
    """The log line a figure came from (number and message), or how it was derived."""
    return fact.text if fact.line is None else f"{fact.where}: {message(fact.text)}"


def message(text: str) -> str:
    """A log line without its timestamp / rank / file prefix (up to the first '] ')."""
    cut = text.find("] ", 0, _PREFIX_SPAN)
    return text[cut + 2 :].strip() if cut >= 0 else text.strip()


def build_ledger(
    inputs: LogInputs,
    rec: Reconciliation,
    measured: Measured | None = None,
    plan: Ledger | None = None,
) -> LogLedger:
    """The ledger of the logged start.

    What the log does not print is sized by a `measured` flag, else taken from `plan` (the budget
    ledger of the same deployment) and marked estimated, else listed as not in the log.
    """
    startup = inputs.parsed.startup
    if isinstance(startup, SGLangStartup):
        return _sglang(inputs, startup, rec, measured or Measured(), plan)
    assert isinstance(startup, VllmStartup)
    return _vllm(inputs, startup, rec)


def _sglang(
    inp: LogInputs, s: SGLangStartup, rec: Reconciliation, flags: Measured, plan: Ledger | None
) -> LogLedger:
    mem = inp.sglang
    if mem is None:
        return _partial(inp, s, rec)
    fraction = rec.ledger.mem_fraction if rec.ledger is not None else None
    if fraction is None and mem.fraction is not None:
        fraction = mem.fraction.value
    if fraction is None:
        return _partial(inp, s, rec)
    before, after = mem.free_before.value, mem.free_after.value
    items = [
        _item("free before load (the fraction's base)", mem.free_before),
        _item("target weights", mem.usage),
    ]
    logged = _logged_pool(s)
    if logged is not None:
        kv_gib = logged.gib
        items.append(logged)
    elif rec.observed is not None:
        kv_gib = (rec.observed.value + rec.page_size) * rec.kv_bytes_per_token / GiB
        how = "(tokens + page) x cell (memory_pool.py)"
        items.append(LedgerItem("KV cache pool (target)", kv_gib, how, True))
    else:
        kv_gib = 0.0
    state = s.state_pools[0] if s.state_pools else None
    if state is not None:
        items.append(
            _item(
                f"linear-attention state ({state.slots} slots: conv + SSM)",
                state.fact(state.total_gib),
            )
        )
    pool_end = s.free_at_pool_end()
    if pool_end is not None:
        extras = after - kv_gib - pool_end.value
        name, how = "allocated with the pool (request table, allocator)", "KV pool"
        if state is not None:  # the state pool's bytes are printed; the rest is what is left
            extras -= state.total_gib
            name, how = "allocated with the pools (request table, allocator)", "KV and state pools"
        items.append(
            LedgerItem(
                name,
                extras,
                f"free after load - {how} - free at pool end ({pool_end.where})",
                True,
            )
        )
    reserve = LedgerItem(
        f"reserve: (1 - {fraction}) x free before load",
        before * (1 - fraction),
        f"profile_max_num_token: the share of {before:.2f} GiB the KV pool may not use",
        True,
    )
    uses, unlogged = _reserve_uses(s, flags)
    if plan is not None:
        unlogged = _estimate(plan, uses, unlogged)
    free_end = _sglang_free_end(s, pool_end, uses)
    answer = _sglang_answer(inp, rec, s, fraction, reserve, pool_end, uses, unlogged, free_end)
    return LogLedger(tuple(items), reserve, tuple(uses), free_end, tuple(unlogged), answer)


def _reserve_uses(
    s: SGLangStartup, flags: Measured
) -> tuple[list[LedgerItem], list[tuple[str, str]]]:
    """What the log shows was allocated after the target pool, and what it leaves unsized."""
    uses: list[LedgerItem] = []
    unlogged: list[tuple[str, str]] = []
    speculative = bool(s.draft_pools or s.draft_weights or _spec_algorithm(s))
    draft_w = next((w for w in s.draft_weights if w.usage_gib is not None), None)
    if draft_w is not None and draft_w.usage_gib is not None:
        uses.append(_item("draft weights", draft_w.fact(draft_w.usage_gib)))
    elif flags.draft_weights_gib is not None:
        given = flags.draft_weights_gib
        uses.append(LedgerItem("draft weights", given, "--draft-weights-gib", True))
    elif speculative:
        unlogged.append(("draft weights", "no 'Load weight end' line from the draft worker"))
    draft_pool = next((p for p in s.draft_pools if p.total_gib is not None), None)
    if draft_pool is not None and draft_pool.total_gib is not None:
        uses.append(_item("draft KV pool", draft_pool.fact(draft_pool.total_gib)))
    elif speculative:
        unlogged.append(("draft KV pool", "no second 'KV Cache is allocated' line"))
    for draft in (False, True):
        ends = [g for g in s.graphs if g.draft is draft and g.usage_gib is not None]
        if ends:
            first_rank = min((g.rank for g in ends), key=rank_order)
            first = next(g for g in ends if g.rank == first_rank)
            total = sum(g.usage_gib or 0.0 for g in ends if g.rank == first_rank)
            name = "CUDA graphs (draft)" if draft else "CUDA graphs (target)"
            uses.append(_item(name, first.fact(total)))
        elif not draft and flags.cuda_graph_gib is not None:
            given = flags.cuda_graph_gib
            uses.append(LedgerItem("CUDA graphs (target)", given, "--cuda-graph-gib", True))
        elif not draft or speculative:
            name = "CUDA graphs (draft)" if draft else "CUDA graphs (target)"
            unlogged.append((name, "no 'Capture ... graph end' line"))
    return uses, unlogged


# Reserve consumers the log may not size -> the budget ledger's item for them.
_PLAN_ITEMS = {"draft weights": "draft weights", "CUDA graphs (target)": "CUDA graphs"}


def _estimate(
    plan: Ledger, uses: list[LedgerItem], unlogged: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Move unlogged consumers the plan sizes into `uses`, marked estimated; return the rest."""
    planned = {i.item: i for i in plan.items}
    rest = []
    for name, why in unlogged:
        item = planned.get(_PLAN_ITEMS.get(name, ""))
        if item is None:
            rest.append((name, why))
            continue
        source = f"estimated ({why}): kvtier plan, {item.source}"
        uses.append(LedgerItem(name, item.gib, source, False))
    return rest


def _spec_algorithm(s: SGLangStartup) -> str | None:
    for args in (s.server_args, s.launch):
        if args is not None and isinstance(args.values.get("speculative_algorithm"), str):
            return str(args.values["speculative_algorithm"])
    return None


def _sglang_free_end(
    s: SGLangStartup, pool_end: Fact[float] | None, uses: list[LedgerItem]
) -> LedgerItem | None:
    if s.summary is not None and s.summary.available_gpu_mem_gib is not None:
        value = s.summary.available_gpu_mem_gib
        return _item("free at end of startup", s.summary.fact(value))
    last = [g for g in s.graphs if g.avail_gib is not None]
    if last:
        value = last[-1].avail_gib or 0.0
        return _item("free at end of startup", last[-1].fact(value))
    if pool_end is not None and uses:
        value = pool_end.value - sum(u.gib for u in uses)
        return LedgerItem(
            "free after the listed items",
            value,
            "free at pool end - the items listed after it (upper bound: unsized items missing)",
            False,
        )
    return None


def _sglang_answer(
    inp: LogInputs,
    rec: Reconciliation,
    s: SGLangStartup,
    fraction: float,
    reserve: LedgerItem,
    pool_end: Fact[float] | None,
    uses: list[LedgerItem],
    unlogged: list[tuple[str, str]],
    free_end: LedgerItem | None,
) -> str:
    mem = inp.sglang
    assert mem is not None
    lines = []
    if rec.failure is not None:
        lines.append(
            f"The start failed ({rec.failure.where}): {rec.failure.value}. The weights left "
            f"{mem.free_after.value:.2f} GiB free, less than the reserve of {reserve.gib:.2f} GiB "
            f"the fraction keeps; raise --mem-fraction-static above "
            f"{1 - mem.free_after.value / mem.free_before.value:.3f}, or use more GPUs."
        )
        return " ".join(lines)
    if pool_end is not None:
        lines.append(
            f"Yes: {pool_end.value:.2f} GiB per GPU is free right after the KV pool is allocated "
            f"({pool_end.where}). That is by design, not waste: SGLang sizes the pool so that "
            f"(1 - mem_fraction_static) x free-before-load = (1 - {fraction}) x "
            f"{mem.free_before.value:.2f} = {reserve.gib:.2f} GiB stays free for everything "
            "allocated after it (the request table, draft model, CUDA graphs) and for "
            "activations at run time."
        )
    else:
        lines.append(
            f"SGLang keeps (1 - {fraction}) x {mem.free_before.value:.2f} = "
            f"{reserve.gib:.2f} GiB per GPU out of the KV pool for what is allocated after it "
            "and for activations at run time."
        )
    logged = ", ".join(f"{u.item} {u.gib:.2f}" for u in uses if u.exact)
    if logged:
        lines.append(f"The log shows what took part of it: {logged} GiB.")
    estimated = ", ".join(f"{u.item} ~{u.gib:.2f}" for u in uses if not u.exact)
    if estimated:
        lines.append(f"Estimated, not in the log: {estimated} GiB.")
    if unlogged:
        lines.append("Not sized by this log: " + ", ".join(name for name, _ in unlogged) + ".")
    if s.host_pool_gb is not None:
        lines.append(
            f"HiCache is on: {s.host_pool_gb.value:.2f} GB of pinned host RAM per rank backs the "
            f"GPU pool ({s.host_pool_gb.where})."
        )
    step = mem.free_before.value * 0.01
    per_step = f"every 0.01 of --mem-fraction-static is {step:.2f} GiB " + (
        f"(~{int(step * GiB // max(rec.kv_bytes_per_token, 1)):,} tokens) of KV pool"
    )
    if free_end is not None and free_end.exact:
        lines.append(
            f"{free_end.gib:.2f} GiB is still free at the end of startup "
            f"({free_end.source.split(':')[0]}): headroom for activation peaks (prefill chunks, "
            f"large batches); a higher fraction moves part of it into the KV pool: {per_step}."
        )
    elif free_end is not None:
        lines.append(
            f"At most {free_end.gib:.2f} GiB stays free once the sized items are allocated (the "
            "unsized ones come out of it too); what remains is headroom for activation peaks. "
            f"A higher fraction moves part of it into the KV pool: {per_step}."
        )
    return " ".join(lines)


def _partial(inp: LogInputs, s: SGLangStartup, rec: Reconciliation) -> LogLedger:
    """An SGLang log without the weight-load lines: only what it prints."""
    items: list[LedgerItem] = []
    if (logged := _logged_pool(s)) is not None:
        items.append(logged)
    unlogged = [("free before / after load", "no 'Load weight begin' / 'Load weight end' line")]
    if rec.failure is not None:
        answer = f"The start failed ({rec.failure.where}): {rec.failure.value}."
    else:
        answer = (
            "The log does not print the free memory before and after the weights load, so the "
            "reserve SGLang keeps out of the KV pool cannot be read from it"
            + ("; the figures above are kvtier's estimates." if rec.ledger is not None else ".")
        )
    return LogLedger(tuple(items), None, (), None, tuple(unlogged), answer)


def _logged_pool(s: SGLangStartup) -> LedgerItem | None:
    """The target's KV pool as printed: a sliding-window model's SWAKVPool total (full and
    sliding-window layers), else the first rank's `KV Cache is allocated` sizes."""
    if s.sliding_pools:
        both = s.sliding_pools[0]
        name = "KV cache pools (target: full + sliding-window layers)"
        return _item(name, both.fact(both.gib))
    pool = s.target_pools[0] if s.target_pools else None
    if pool is None or pool.total_gib is None:
        return None
    return _item("KV cache pool (target)", pool.fact(pool.total_gib))


def _linear_pool(inp: LogInputs, rec: Reconciliation) -> LedgerItem | None:
    """The builder's KV pool item for a hybrid linear-attention model (None otherwise)."""
    if inp.model.kv.linear is None or rec.ledger is None:
        return None
    return next((i for i in rec.ledger.items if i.item == "KV cache pool"), None)


def _vllm(inp: LogInputs, v: VllmStartup, rec: Reconciliation) -> LogLedger:
    mem = inp.vllm
    items: list[LedgerItem] = []
    total = min_over_ranks(v.total_gib)
    requested = min_over_ranks(v.requested_gib)
    if total is not None:
        items.append(_item("device total (as CUDA reports it)", total))
    if total is not None and requested is not None:
        items.append(
            LedgerItem(
                "outside vLLM's budget: total x (1 - utilization)",
                total.value - requested.value,
                f"{total.value:.2f} - requested {requested.value:.2f} ({requested.where})",
                True,
            )
        )
    profile = v.profiles[0] if v.profiles else None
    weights = min_over_ranks(v.weights_gib)
    if weights is not None:
        items.append(_item("weights", weights))
    if profile is not None and profile.torch_peak_gib is not None:
        items.append(_item("activation peak (profile run)", profile.fact(profile.torch_peak_gib)))
    if profile is not None and profile.non_torch_gib is not None:
        non_torch = profile.fact(profile.non_torch_gib)
        items.append(_item("non-torch increase (NCCL, buffers)", non_torch))
    if v.v0_activation_gib is not None:
        items.append(_item("activation peak (profile run)", v.v0_activation_gib))
    if v.v0_non_torch_gib is not None:
        items.append(_item("non-torch memory", v.v0_non_torch_gib))
    if v.graph_estimate_gib is not None:
        budgeted = budgeted_graphs(v) > 0
        items.append(
            LedgerItem(
                "CUDA-graph estimate" + (" (budgeted)" if budgeted else " (not subtracted)"),
                v.graph_estimate_gib.value,
                _cite(v.graph_estimate_gib),
                True,
            )
        )
    if mem is not None:
        items.append(_item("KV cache budget", mem.available))
    used = (rec.observed.value if rec.observed else 0) * rec.kv_bytes_per_token / GiB
    pool = _linear_pool(inp, rec)
    if pool is not None:
        # hybrid linear attention: the blocks hold attention pages and state pages alike, so
        # the logged token count times one token's KV is no measure of the pool
        used = pool.gib
        items.append(LedgerItem("KV cache blocks allocated", used, pool.source, pool.exact))
    elif rec.observed is not None and rec.kv_bytes_per_token:
        items.append(
            LedgerItem(
                "KV cache blocks allocated",
                used,
                f"{rec.observed.value:,} tokens x {rec.kv_bytes_per_token:,} B",
                inp.model_known,
            )
        )
    graphs = min_over_ranks(v.graph_gib)
    if graphs is not None:
        items.append(_item("CUDA graphs captured", graphs))
    unlogged = [] if graphs is not None else [("CUDA graphs", "no 'Graph capturing finished' line")]
    outside = total.value - requested.value if total is not None and requested else None
    answer = (
        "vLLM gives the KV cache what is left of total x gpu_memory_utilization after weights, "
        "the activation peak and non-torch memory"
        + (
            f": {mem.available.value:.2f} GiB here, of which {used:.2f} GiB are whole blocks."
            if mem is not None
            else "; this log does not print that budget."
        )
    )
    if rec.failure is not None:
        answer = f"The start failed ({rec.failure.where}): {rec.failure.value}. " + answer
    if graphs is not None and v.graph_estimate_gib is not None:
        answer += (
            f" CUDA graphs took {graphs.value:.2f} GiB as captured against the "
            f"{v.graph_estimate_gib.value:.2f} GiB estimated ({v.graph_estimate_gib.where})."
        )
    if (pin := v.suggested_kv_bytes) is not None:
        # gpu_worker.py compile_or_warm_up_model: requested - used - graphs - 150 MiB
        answer += (
            f" vLLM suggests --kv-cache-memory={pin.value} ({pin.value / GiB:.2f} GiB, "
            f"{pin.where}) to fit the requested memory and skip profiling on the next start."
        )
    if outside is not None:
        answer += (
            f" {outside:.2f} GiB per GPU lies outside the budget (1 - utilization); CUDA graphs "
            "captured after sizing come out of it"
            + (f" ({graphs.value:.2f} GiB here)" if graphs is not None else "")
            + ". Raise --gpu-memory-utilization to give the KV cache part of it."
        )
    return LogLedger(tuple(items), None, (), None, tuple(unlogged), answer)
