"""From a `Deployment` to its `Ledger`: resolve model, GPU and weights, then apply engine rules."""

from __future__ import annotations

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.inputs import PlanInputs
from kvtier.engines.ledger import Ledger
from kvtier.engines.rules import rules_for
from kvtier.errors import DoesNotStart, KvtierError, Setting
from kvtier.model.description import ModelSpec


def resolve(
    deployment: Deployment,
    contexts: tuple[int, ...] | None = None,
    pcie_gbps: float | None = None,
    model: ModelSpec | None = None,
    logged: bool = False,
) -> PlanInputs:
    """Look up the model (catalog, config.json or HF cache), the GPU and the weights per GPU.

    `model` is the spec when the caller already resolved it; `logged` marks a deployment a real
    startup log describes, whose context length the engine already accepted.
    """
    from kvtier.model.catalog import resolve_model
    from kvtier.model.weights import Splits, weight_bytes

    d = deployment
    model = model or resolve_model(d.model)
    if not logged and d.context_length and d.context_length > model.context_length:
        # both engines refuse a longer context than the config derives unless forced by env
        flag = "--max-model-len" if d.engine is Engine.VLLM else "--context-length"
        raise DoesNotStart(
            f"context length {d.context_length} is greater than the model's derived maximum "
            f"{model.context_length} ({model.model_id}); the engine refuses it",
            would_start=Setting(flag, model.context_length, "the model's derived maximum"),
        )
    gpu_name, gpu_mem_mib, link = None, None, None
    if d.gpu is not None:
        from kvtier.model.gpu import resolve_gpu

        gpu = resolve_gpu(d.gpu)
        gpu_name, gpu_mem_mib, link = gpu.name, gpu.memory_mib, gpu.pcie_gbps
    if d.measured.gpu_mem_gib is not None:
        gpu_mem_mib = round(d.measured.gpu_mem_gib * 1024)
        gpu_name = gpu_name or f"custom {d.measured.gpu_mem_gib:g} GiB"
    rules = rules_for(d.engine)
    model, loaded = rules.load_model(model, d)
    dtype = None if d.dtype == "auto" else d.dtype
    # the attention projections, the embedding and the LM head each by the engine's rule
    attn = rules.attention_ranks(model, d) if rules.attention_ranks else None
    embed = rules.embedding_ranks(model, d) if rules.embedding_ranks else None
    head = rules.lm_head_ranks(model, d) if rules.lm_head_ranks else None
    splits = Splits(*(split[0] if split else None for split in (attn, embed, head)))
    weights = weight_bytes(model, d.tp, dtype, splits)
    per_gpu = weights.total_bytes
    source = f"estimated: spec weights at TP{d.tp}" + (f" ({loaded})" if loaded else "")
    source += "".join(f", {split[1]}" for split in (attn, embed, head) if split)
    if d.pp > 1:  # an even split: the stages holding the embedding or the head carry a bit more
        per_gpu = -(-per_gpu // d.pp)
        source += f" / PP{d.pp}"
    draft, draft_bytes = None, None
    if d.draft_model:
        try:
            draft = resolve_model(d.draft_model)
            draft_bytes = weight_bytes(draft, d.tp, dtype).total_bytes
        except KvtierError:
            draft = None  # the draft's size is then assumed and marked estimated
    return PlanInputs(
        deployment=d,
        model=model,
        gpu_name=gpu_name,
        gpu_mem_mib=gpu_mem_mib,
        weights_bytes=per_gpu,
        weights_source=source,
        splits=splits,
        draft=draft,
        draft_weights_bytes=draft_bytes,
        contexts=contexts,
        pcie_gbps=pcie_gbps or link,
    )


def build_ledger(inputs: PlanInputs) -> Ledger:
    """The per-GPU ledger the deployment's engine would produce."""
    return rules_for(inputs.deployment.engine).build_ledger(inputs)


def rounded_measures(deployment: Deployment) -> tuple[str, ...]:
    """The measured figures the deployment's pool formula reads (rounded where printed)."""
    return rules_for(deployment.engine).rounded_measures(deployment)


def plan(
    deployment: Deployment,
    contexts: tuple[int, ...] | None = None,
    pcie_gbps: float | None = None,
) -> Ledger:
    """`resolve` then `build_ledger`."""
    return build_ledger(resolve(deployment, contexts, pcie_gbps))
