"""vLLM's profile run: the batch it runs and the torch peak it adds over the weights, per era.

Both workers subtract the torch peak of one dummy step over the largest batch from the budget
(V0 `Worker.determine_num_available_blocks`, V1 `Worker.determine_available_memory`). kvtier
does not run the model; it models that peak from the batch and the model's shape:

  batch  V0 (v0.6 - v0.7)  SchedulerConfig: max_num_batched_tokens = max(max_model_len, 2048)
                           with chunked prefill off, 512 (<= v0.6.4) or 2048 (>= v0.6.5) with
                           it on; 5120 at least for a multimodal model; max_num_seqs 256.
                           EngineArgs.create_engine_config turns chunked prefill on by itself
                           only above 32,768 context on CUDA for a text model without sliding
                           window or speculation (LoRA is not modelled).
         V1 (>= v0.8)      EngineArgs.get_batch_defaults: 8192 tokens / 1024 sequences on
                           devices of >= 70 GiB that are not A100, else 2048 / 256.
  peak   forward           tokens x (3 x hidden + 3 x MLP width per rank) x dtype bytes: in the
                           widest MLP the residual, the MLP input, gate_up (2 x width), the
                           activation's output (width) and down_proj's output are alive at once
                           (LlamaMLP.forward and its peers)
         MoE workspace     tokens x top-k x (max(I, hidden) + max(2I, hidden)) x dtype bytes, I
                           the expert width per rank (TritonExperts.workspace_shapes); V1 keeps
                           it for the engine's life (v1/worker/workspace.py, read in v0.19.0 and
                           v0.21.0), V0 only inside each MoE layer (fused_experts, chunks of
                           VLLM_FUSED_MOE_CHUNK_SIZE 32,768 tokens)
         sampler V0        rows x vocab x (dtype + 4 + 26) bytes: ModelRunner.profile_run samples
                           one row per sequence with top-k = vocab - 1 and top-p 0.99, so
                           Sampler._apply_top_k_top_p sorts: the model-dtype logits, their fp32
                           copy, sorted values (4), indices (8), two masks (1 + 1), softmax and
                           cumsum (4 + 4) and the scattered result (4) are alive together
         sampler V1        rows x vocab x (dtype + 4 + 8) bytes + tokens x hidden x dtype bytes:
                           GPUModelRunner._dummy_sampler_run over min(tokens, max_num_seqs) rows
                           (_dummy_run's num_reqs) with the step's hidden states still held;
                           Sampler.forward's fp32 logits, TopKTopPSampler.forward_native's fp32
                           probs and random_sample's exponential draw (v0.19.0 - v0.21.0)
  V0 peak = max(forward + MoE workspace, sampler);  V1 peak = MoE workspace + max(forward, sampler)
  (the fp32 copy costs nothing when the model runs in float32: `.to(float32)` returns itself).

How well it does on the real logs with a measured peak (the model, then the log's figure, GiB;
models outside the catalog at the shapes their config.json publishes): vLLM 0.6.4 V0
Llama-3.1-8B on an RTX 3090, 20,000 / 29,000 batched tokens: 2.06 / 2.99 against 2.07 / 2.99
(peak_torch_memory - weights); vLLM 0.6.6 Qwen2.5-7B, 8,192 tokens, 16 sequences: 1.03 against
1.09. vLLM 0.19 on an H100 (8,192 tokens, 1,024 sequences), text models: Llama-3.1-8B 1.77 /
1.89, Qwen3-8B 2.09 / 2.21, Llama-3.3-70B TP2 1.84 / 1.96, CodeLlama-7B 0.69 / 0.77,
granite-3.1-8b 0.77 / 0.85, granite-3.1-2b 0.69 / 0.75, phi-2 0.72 / 0.79; MoE: DeepSeek-V2-Lite
1.84 / 1.93, Qwen1.5-MoE 2.36 / 2.47; gemma 2 and gemma-7b (vocab 256,000) 3.45-3.49 /
3.62-3.66; a multimodal checkpoint adds its encoder cache (gemma-3-12b 3.56 / 3.94). The model is
low by 0.00-0.06 GiB on V0, 0.06-0.12 on V1 text models, 0.17 at gemma's vocabulary and 0.38 on
gemma-3-12b; that remainder is the stated range of `estimate.VLLM_PROFILE_UNMODELLED_GIB` (V1) and
`VLLM_V0_PROFILE_UNMODELLED_GIB` (V0).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.engines.vllm.pool import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    SMALL_DEVICE_MAX_NUM_BATCHED_TOKENS,
    Era,
    Worker,
    default_max_num_batched_tokens,
)
from kvtier.engines.vllm.versions import V0_6_5
from kvtier.model.description import ModelSpec
from kvtier.model.dtypes import dtype_bytes

V0_MAX_NUM_SEQS = 256  # EngineArgs.max_num_seqs (v0.6.4, v0.6.6)
V1_MAX_NUM_SEQS = 1024  # get_batch_defaults, devices of >= 70 GiB that are not A100
V1_SMALL_DEVICE_MAX_NUM_SEQS = 256
V0_MIN_BATCHED_TOKENS = 2048  # max(max_model_len, 2048) without chunked prefill
V0_LONG_CONTEXT = 32768  # use_long_context: max_model_len above it
V0_MULTIMODAL_BATCHED_TOKENS = 5120  # _MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS
V0_CHUNKED_TOKENS_OLD = 512  # chunked prefill's default through v0.6.4
V0_CHUNKED_TOKENS = 2048  # from v0.6.5
V0_MOE_CHUNK_TOKENS = 32768  # VLLM_FUSED_MOE_CHUNK_SIZE default (v0.6.4)
FP32_BYTES = 4
V0_SAMPLER_BYTES = 26  # sorted values 4, indices 8, masks 1 + 1, softmax 4, cumsum 4, result 4
V1_SAMPLER_BYTES = 8  # fp32 probs 4, exponential draw 4


@dataclass(frozen=True, slots=True)
class ProfileBatch:
    """The dummy batch profile_run runs: tokens, sequences, and the rule that chose each."""

    tokens: int
    seqs: int
    tokens_rule: str
    seqs_rule: str

    @property
    def rows(self) -> int:
        """Rows the sampler sees: one per sequence, never more than the tokens."""
        return min(self.tokens, self.seqs)


@dataclass(frozen=True, slots=True)
class ProfileShape:
    """What of the model the peak depends on, per rank."""

    hidden: int
    mlp_width: int  # the widest dense MLP (dense layers or shared experts), per rank
    expert_width: int  # one routed expert's intermediate size, per rank (0: no MoE)
    experts_per_token: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, model: ModelSpec, tp: int, dtype: str) -> ProfileShape | None:
        """The shape of `model` at `tp` running in `dtype`; None when the spec does not carry
        its MLP widths (a stand-in built from a log's KV figures)."""
        if not model.hidden_size or not model.vocab_size:
            return None
        dense = max(model.intermediate_size, model.shared_experts * model.moe_intermediate_size)
        expert = model.moe_intermediate_size if model.num_experts else 0
        if not dense and not expert:
            return None
        return cls(
            model.hidden_size,
            -(-dense // tp),
            -(-expert // tp),
            model.experts_per_token,
            model.vocab_size,
            dtype_bytes(dtype),
        )


@dataclass(frozen=True, slots=True)
class ActivationPeak:
    """The profiled torch peak above the weights, by the phase that reaches it (bytes)."""

    batch: ProfileBatch
    forward: int
    moe_workspace: int
    sampler: int
    worker: Worker

    @property
    def bytes(self) -> int:
        if self.worker is Worker.V0:
            return max(self.forward + self.moe_workspace, self.sampler)
        return self.moe_workspace + max(self.forward, self.sampler)

    def formula(self) -> str:
        gib = 2**30
        parts = (
            f"forward {self.forward / gib:.2f}, sampler {self.sampler / gib:.2f}"
            + (f", MoE workspace {self.moe_workspace / gib:.2f}" if self.moe_workspace else "")
            + " GiB"
        )
        rule = (
            "max(forward + MoE workspace, sampler)"
            if self.worker is Worker.V0
            else "MoE workspace + max(forward, sampler)"
        )
        return (
            f"profile_run over {self.batch.tokens:,} tokens, {self.batch.rows:,} sampled rows: "
            f"{rule}; {parts}"
        )


def v0_chunked_prefill(
    enabled: bool | None,
    max_model_len: int,
    *,
    multimodal: bool,
    sliding_window: bool,
    speculative: bool,
) -> tuple[bool, str]:
    """Whether V0 runs with chunked prefill, and why (EngineArgs.create_engine_config, v0.6)."""
    if enabled is not None:
        return enabled, "--enable-chunked-prefill" if enabled else "--no-enable-chunked-prefill"
    if max_model_len <= V0_LONG_CONTEXT:
        return False, f"off: max_model_len {max_model_len} <= {V0_LONG_CONTEXT}"
    for blocked, why in (
        (multimodal, "a multimodal model"),
        (sliding_window, "a sliding-window model"),
        (speculative, "speculative decoding"),
    ):
        if blocked:
            return False, f"off: {why}, although max_model_len {max_model_len} > {V0_LONG_CONTEXT}"
    return True, f"on by itself: max_model_len {max_model_len} > {V0_LONG_CONTEXT}"


def profile_batch(
    era: Era,
    max_model_len: int,
    *,
    tokens: int | None,
    seqs: int | None,
    chunked_prefill: tuple[bool, str],
    multimodal: bool,
    device_gib: float | None,
    device_name: str,
) -> ProfileBatch:
    """The batch profile_run runs: the flags where given, else the era's defaults."""
    if era.worker is Worker.V0:
        seqs_rule = "--max-num-seqs" if seqs else f"default {V0_MAX_NUM_SEQS} (EngineArgs)"
        if tokens:
            return ProfileBatch(
                tokens, seqs or V0_MAX_NUM_SEQS, "--max-num-batched-tokens", seqs_rule
            )
        on, why = chunked_prefill
        if on:
            old = era.version < V0_6_5
            tokens = V0_CHUNKED_TOKENS_OLD if old else V0_CHUNKED_TOKENS
            rule = f"chunked prefill {why}: {tokens} (SchedulerConfig, V0)"
        else:
            tokens = max(max_model_len, V0_MIN_BATCHED_TOKENS)
            rule = f"chunked prefill {why}: max(max_model_len, 2048) (SchedulerConfig, V0)"
        if multimodal and tokens < V0_MULTIMODAL_BATCHED_TOKENS:
            tokens = V0_MULTIMODAL_BATCHED_TOKENS
            rule += f"; {V0_MULTIMODAL_BATCHED_TOKENS} at least for a multimodal model"
        return ProfileBatch(tokens, seqs or V0_MAX_NUM_SEQS, rule, seqs_rule)
    large = (
        default_max_num_batched_tokens(device_gib, device_name) == DEFAULT_MAX_NUM_BATCHED_TOKENS
    )
    default_tokens = (
        DEFAULT_MAX_NUM_BATCHED_TOKENS if large else SMALL_DEVICE_MAX_NUM_BATCHED_TOKENS
    )
    default_seqs = V1_MAX_NUM_SEQS if large else V1_SMALL_DEVICE_MAX_NUM_SEQS
    rule = (
        "default (EngineArgs.get_batch_defaults: 8192 / 1024 on >= 70 GiB non-A100, "
        "else 2048 / 256)"
    )
    return ProfileBatch(
        tokens or default_tokens,
        seqs or default_seqs,
        "--max-num-batched-tokens" if tokens else rule,
        "--max-num-seqs" if seqs else rule,
    )


def activation_peak(
    era: Era, batch: ProfileBatch, shape: ProfileShape, samples: bool = True
) -> ActivationPeak:
    """The torch peak profile_run adds over the weights (the module docstring's formulas);
    `samples` False: a pipeline stage before the last, which runs no sampler."""
    b, h = shape.dtype_bytes, shape.hidden
    widen = 0 if b == FP32_BYTES else FP32_BYTES  # the sampler's fp32 copy of the logits
    forward = batch.tokens * (3 * h + 3 * shape.mlp_width) * b
    moe = 0
    if shape.expert_width:
        m = batch.tokens if era.worker is not Worker.V0 else min(batch.tokens, V0_MOE_CHUNK_TOKENS)
        width = shape.expert_width
        moe = m * shape.experts_per_token * (max(width, h) + max(2 * width, h)) * b
    cells = batch.rows * shape.vocab if samples else 0
    if era.worker is Worker.V0:
        sampler = cells * (b + widen + V0_SAMPLER_BYTES)
    else:
        sampler = cells * (b + widen + V1_SAMPLER_BYTES) + (batch.tokens * h * b if samples else 0)
    return ActivationPeak(batch, forward, moe, sampler, era.worker)
