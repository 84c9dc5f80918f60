"""The per-GPU ledger a vLLM startup log itself shows, and the plain answer to "is memory left
unused?".

One GPU: total x utilization is the budget; weights, activation peak and non-torch memory come out
of it and the KV cache takes the rest; CUDA graphs (before v0.21) and whatever the engine did not
request stay outside it.
"""

from __future__ import annotations

from kvtier.engines.explain import (
    LogInputs,
    LogLedger,
    Reconciliation,
    Unlogged,
    cite,
    logged_item,
)
from kvtier.engines.ledger import LedgerItem
from kvtier.engines.vllm.explain_memory import VllmMemory, budgeted_graphs
from kvtier.engines.vllm.log import VllmStartup
from kvtier.logs.facts import Fact, min_over_ranks
from kvtier.units import GiB


def _linear_pool(inp: LogInputs[VllmMemory], rec: Reconciliation) -> LedgerItem | None:
    """The builder's KV pool item for a hybrid linear-attention model (None otherwise)."""
    if inp.model.kv.linear is None or rec.ledger is None:
        return None
    return next((i for i in rec.ledger.items if i.item == "KV cache pool"), None)


def log_ledger(inp: LogInputs[VllmMemory], rec: Reconciliation) -> LogLedger:
    """The ledger of the logged start: the budget's terms, the blocks allocated, the graphs."""
    v = inp.parsed.startup
    assert isinstance(v, VllmStartup)
    items = _budget_items(v, inp.memory)
    used, allocated = _allocated(inp, rec)
    items += allocated
    graphs = min_over_ranks(v.graph_gib)
    if graphs is not None:
        items.append(logged_item("CUDA graphs captured", graphs))
    missing = Unlogged("CUDA graphs", "no 'Graph capturing finished' line")
    unlogged = [] if graphs is not None else [missing]
    answer = _answer(v, inp.memory, rec, used, graphs)
    return LogLedger(tuple(items), None, (), None, tuple(unlogged), answer)


def _budget_items(v: VllmStartup, mem: VllmMemory | None) -> list[LedgerItem]:
    """The device, what lies outside the budget, and what the budget paid before the KV cache."""
    items: list[LedgerItem] = []
    total = min_over_ranks(v.total_gib)
    requested = min_over_ranks(v.requested_gib)
    if total is not None:
        items.append(logged_item("device total (as CUDA reports it)", total))
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
        items.append(logged_item("weights", weights))
    if profile is not None and profile.torch_peak_gib is not None:
        items.append(
            logged_item("activation peak (profile run)", profile.fact(profile.torch_peak_gib))
        )
    if profile is not None and profile.non_torch_gib is not None:
        non_torch = profile.fact(profile.non_torch_gib)
        items.append(logged_item("non-torch increase (NCCL, buffers)", non_torch))
    if v.v0_activation_gib is not None:
        items.append(logged_item("activation peak (profile run)", v.v0_activation_gib))
    if v.v0_non_torch_gib is not None:
        items.append(logged_item("non-torch memory", v.v0_non_torch_gib))
    if v.graph_estimate_gib is not None:
        budgeted = budgeted_graphs(v) > 0
        items.append(
            LedgerItem(
                "CUDA-graph estimate" + (" (budgeted)" if budgeted else " (not subtracted)"),
                v.graph_estimate_gib.value,
                cite(v.graph_estimate_gib),
                True,
            )
        )
    if mem is not None:
        items.append(logged_item("KV cache budget", mem.available))
    return items


def _allocated(inp: LogInputs[VllmMemory], rec: Reconciliation) -> tuple[float, list[LedgerItem]]:
    """GiB of whole KV blocks allocated, and its ledger item when it can be sized."""
    used = (rec.observed.value if rec.observed else 0) * rec.kv_bytes_per_token / GiB
    pool = _linear_pool(inp, rec)
    if pool is not None:
        # hybrid linear attention: the blocks hold attention pages and state pages alike, so
        # the logged token count times one token's KV is no measure of the pool
        return pool.gib, [
            LedgerItem("KV cache blocks allocated", pool.gib, pool.source, pool.exact)
        ]
    if rec.observed is not None and rec.kv_bytes_per_token:
        how = f"{rec.observed.value:,} tokens x {rec.kv_bytes_per_token:,} B"
        return used, [LedgerItem("KV cache blocks allocated", used, how, inp.model_known)]
    return used, []


def _answer(
    v: VllmStartup,
    mem: VllmMemory | None,
    rec: Reconciliation,
    used: float,
    graphs: Fact[float] | None,
) -> str:
    total = min_over_ranks(v.total_gib)
    requested = min_over_ranks(v.requested_gib)
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
    return answer
