"""A deployment with its model, GPU and weights resolved: what the engine ledgers compute from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvtier.engines.deployment import Deployment
from kvtier.engines.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.engines.ledger import Input, Ledger
from kvtier.model.description import ModelSpec
from kvtier.model.weights import OVER_TP, Splits
from kvtier.units import GiB, MiB


def stage_layers(num_layers: int, pp: int) -> int:
    """Layers on the largest pipeline stage; its pool is the smallest and PP takes the MIN."""
    return -(-num_layers // pp)


def card_memory(mib: int) -> str:
    """A card's memory as GiB and as the MiB nvidia-smi prints: '95.59 GiB (97,887 MiB)'."""
    return f"{mib * MiB / GiB:.2f} GiB ({mib:,} MiB)"


@dataclass(frozen=True, slots=True)
class PlanInputs:
    deployment: Deployment
    model: ModelSpec
    gpu_name: str | None
    gpu_mem_mib: int | None  # nvidia-smi memory.total of one card
    weights_bytes: int | None  # per GPU, computed from the model spec
    weights_source: str
    draft: ModelSpec | None = None
    draft_weights_bytes: int | None = None
    contexts: tuple[int, ...] | None = None
    pcie_gbps: float | None = None  # host-to-GPU link of one card, GB/s
    # the ranks the attention projections, the input embedding and the LM head are split over
    # by engine rule; the KV pool's heads per rank are `attn_tp`'s
    splits: Splits = OVER_TP

    @property
    def context_length(self) -> int:
        return self.deployment.context_length or self.model.context_length

    @property
    def attn_tp(self) -> int:
        d = self.deployment
        return d.tp // d.dp if d.enable_dp_attention else d.tp

    def kv_dtype(self) -> KVDtype:
        d = self.deployment
        model_dtype = self.model.dtype if d.dtype == "auto" else d.dtype
        return resolve_kv_dtype(d.engine, d.kv_cache_dtype, model_dtype)

    def ledger(self, **figures: Any) -> Ledger:
        """A `Ledger` of this deployment: engine, model, GPU and parallelism filled in the same way
        for every engine, the engine's figures given."""
        d = self.deployment
        return Ledger(
            engine=d.engine.value,
            model=self.model.model_id,
            gpu=self.gpu_name or "custom",
            gpus=d.gpus,
            tp=d.tp,
            pp=d.pp,
            **figures,
        )

    def base_inputs(self) -> list[Input]:
        """The inputs every ledger lists, with where each came from."""
        d = self.deployment
        rows = [
            Input("model", self.model.model_id, d.origin("model")),
            Input("gpu", self.gpu_name or "not given", d.origin("gpu")),
            Input("tp x pp", f"{d.tp} x {d.pp}", d.origin("tp")),
            Input("kv cache dtype", self.kv_dtype().name, d.origin("kv_cache_dtype")),
            Input(
                "context length",
                f"{self.context_length:,}",
                d.origin("context_length") if d.context_length else "model config",
            ),
        ]
        if self.gpu_mem_mib is not None:
            card = card_memory(self.gpu_mem_mib)
            rows.append(Input("card memory", card, "GPU catalog (nvidia-smi)"))
        if d.speculative_algorithm:
            rows.append(
                Input("speculative", d.speculative_algorithm, d.origin("speculative_algorithm"))
            )
        return rows
