"""A deployment with its model, GPU and weights resolved: what the engine ledgers compute from."""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.budget.deployment import Deployment
from kvtier.budget.kvdtype import KVDtype, resolve_kv_dtype
from kvtier.budget.ledger import Input
from kvtier.spec.model import ModelSpec


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
                str(self.context_length),
                d.origin("context_length") if d.context_length else "model config",
            ),
        ]
        if self.gpu_mem_mib is not None:
            rows.append(Input("card memory", f"{self.gpu_mem_mib} MiB", "GPU catalog (nvidia-smi)"))
        if d.speculative_algorithm:
            rows.append(
                Input("speculative", d.speculative_algorithm, d.origin("speculative_algorithm"))
            )
        return rows
