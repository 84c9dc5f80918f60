"""The per-GPU ledger an SGLang startup log itself shows, and the plain answer to "is memory left
unused?".

One GPU (figures from the log's lines; the reserve is a fixed share of pre-load free):

    |---- weights ----|---- KV pool ----|-- pool-time extras --|----------- reserve -----------|
     Load weight end    KV Cache is        free after load          free before load x (1 - f):
     mem usage          allocated          - KV - pool end          draft weights, draft KV,
                                                                    CUDA graphs, then free
"""

from __future__ import annotations

from kvtier.engines.deployment import Measured
from kvtier.engines.explain import LogInputs, LogLedger, Reconciliation, Unlogged, logged_item
from kvtier.engines.ledger import Ledger, LedgerItem
from kvtier.engines.sglang.explain_memory import SGLangMemory
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.logs.facts import Fact
from kvtier.logs.lines import rank_order
from kvtier.units import GiB


def log_ledger(
    inputs: LogInputs[SGLangMemory],
    rec: Reconciliation,
    measured: Measured,
    plan: Ledger | None,
) -> LogLedger:
    """The ledger of the logged start.

    What the log does not print is sized by a `measured` flag, else taken from `plan` (the budget
    ledger of the same deployment) and marked estimated, else listed as not in the log.
    """
    startup = inputs.parsed.startup
    assert isinstance(startup, SGLangStartup)
    return _sglang(inputs, startup, rec, measured, plan)


def _sglang(
    inp: LogInputs[SGLangMemory],
    s: SGLangStartup,
    rec: Reconciliation,
    flags: Measured,
    plan: Ledger | None,
) -> LogLedger:
    mem = inp.memory
    if mem is None:
        return _partial(inp, s, rec)
    fraction = rec.ledger.mem_fraction if rec.ledger is not None else None
    if fraction is None and mem.fraction is not None:
        fraction = mem.fraction.value
    if fraction is None:
        return _partial(inp, s, rec)
    before, after = mem.free_before.value, mem.free_after.value
    items = [
        logged_item("free before load (the fraction's base)", mem.free_before),
        logged_item("target weights", mem.usage),
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
            logged_item(
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


def _reserve_uses(s: SGLangStartup, flags: Measured) -> tuple[list[LedgerItem], list[Unlogged]]:
    """What the log shows was allocated after the target pool, and what it leaves unsized."""
    uses: list[LedgerItem] = []
    unlogged: list[Unlogged] = []
    drafts = s.weights_by_rank(draft=True)
    speculative = bool(s.pools_by_rank(draft=True) or drafts or _spec_algorithm(s))
    draft_w = next((w for w in drafts if w.usage_gib is not None), None)
    if draft_w is not None and draft_w.usage_gib is not None:
        uses.append(logged_item("draft weights", draft_w.fact(draft_w.usage_gib)))
    elif flags.draft_weights_gib is not None:
        given = flags.draft_weights_gib
        uses.append(LedgerItem("draft weights", given, "--draft-weights-gib", True))
    elif speculative:
        unlogged.append(
            Unlogged("draft weights", "no 'Load weight end' line from the draft worker")
        )
    draft_pool = next((p for p in s.pools_by_rank(draft=True) if p.total_gib is not None), None)
    if draft_pool is not None and draft_pool.total_gib is not None:
        uses.append(logged_item("draft KV pool", draft_pool.fact(draft_pool.total_gib)))
    elif speculative:
        unlogged.append(Unlogged("draft KV pool", "no second 'KV Cache is allocated' line"))
    for draft in (False, True):
        ends = [g for g in s.graphs if g.draft is draft and g.usage_gib is not None]
        if ends:
            first_rank = min((g.rank for g in ends), key=rank_order)
            first = next(g for g in ends if g.rank == first_rank)
            total = sum(g.usage_gib or 0.0 for g in ends if g.rank == first_rank)
            name = "CUDA graphs (draft)" if draft else "CUDA graphs (target)"
            uses.append(logged_item(name, first.fact(total)))
        elif not draft and flags.cuda_graph_gib is not None:
            given = flags.cuda_graph_gib
            uses.append(LedgerItem("CUDA graphs (target)", given, "--cuda-graph-gib", True))
        elif not draft or speculative:
            name = "CUDA graphs (draft)" if draft else "CUDA graphs (target)"
            unlogged.append(Unlogged(name, "no 'Capture ... graph end' line"))
    return uses, unlogged


# Reserve consumers the log may not size -> the budget ledger's item for them.
_PLAN_ITEMS = {"draft weights": "draft weights", "CUDA graphs (target)": "CUDA graphs"}


def _estimate(plan: Ledger, uses: list[LedgerItem], unlogged: list[Unlogged]) -> list[Unlogged]:
    """Move unlogged consumers the plan sizes into `uses`, marked estimated; return the rest."""
    planned = {i.item: i for i in plan.items}
    rest = []
    for u in unlogged:
        item = planned.get(_PLAN_ITEMS.get(u.item, ""))
        if item is None:
            rest.append(u)
            continue
        source = f"estimated ({u.why}): kvtier plan, {item.source}"
        uses.append(LedgerItem(u.item, item.gib, source, False))
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
        return logged_item("free at end of startup", s.summary.fact(value))
    last = [g for g in s.graphs if g.avail_gib is not None]
    if last:
        value = last[-1].avail_gib or 0.0
        return logged_item("free at end of startup", last[-1].fact(value))
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
    inp: LogInputs[SGLangMemory],
    rec: Reconciliation,
    s: SGLangStartup,
    fraction: float,
    reserve: LedgerItem,
    pool_end: Fact[float] | None,
    uses: list[LedgerItem],
    unlogged: list[Unlogged],
    free_end: LedgerItem | None,
) -> str:
    mem = inp.memory
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
        lines.append("Not sized by this log: " + ", ".join(u.item for u in unlogged) + ".")
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


def _partial(inp: LogInputs[SGLangMemory], s: SGLangStartup, rec: Reconciliation) -> LogLedger:
    """An SGLang log without the weight-load lines: only what it prints."""
    items: list[LedgerItem] = []
    if (logged := _logged_pool(s)) is not None:
        items.append(logged)
    unlogged = [
        Unlogged("free before / after load", "no 'Load weight begin' / 'Load weight end' line")
    ]
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
        return logged_item(name, both.fact(both.gib))
    pool = next(iter(s.pools_by_rank()), None)
    if pool is None or pool.total_gib is None:
        return None
    return logged_item("KV cache pool (target)", pool.fact(pool.total_gib))
