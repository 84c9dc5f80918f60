"""vLLM's profile run: the batch each era runs and the torch peak modelled from the model's shape,
against the peaks real startup logs printed (tests/fixtures/logs)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtier.engines import estimate
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.vllm import pool as vllm
from kvtier.engines.vllm import profile
from kvtier.engines.vllm.pool import ContextTooLong
from kvtier.ledger.advise import knob_options
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import build_ledger, plan, resolve
from kvtier.model.catalog import resolve_model
from kvtier.units import GiB

LOGS = Path(__file__).parent / "fixtures" / "logs"
PUBLIC = {c["id"]: c for c in json.loads((LOGS / "public" / "index.json").read_text())}
V0 = vllm.era_for("0.6.4")
V1 = vllm.era_for("0.19.0")
OFF = (False, "off")


def _v0_peak(case: str) -> tuple[float, int]:
    """A V0 log's profiled activation as explain reads it (peak_torch_memory minus the weights
    'Loading model weights took' printed, GiB), and its max_model_len."""
    printed = PUBLIC[case]["printed"]
    text = (LOGS / "public" / f"{case}.log").read_text(encoding="utf-8")
    measured = explain_log(text, {}).deployment.measured.profile.activation_gib
    assert measured == round(printed["peak_torch_memory_gib"] - printed["weights_gb"], 2)
    return measured, printed["max_model_len"]


def _modelled(model: str, era: vllm.Era, version: str, context: int, seqs: int | None = None,
              gib: float = 79.19, name: str = "H100 SXM", tp: int = 1) -> float:  # fmt: skip
    spec = resolve_model(model)
    batch = profile.profile_batch(
        vllm.era_for(version), context, tokens=None, seqs=seqs,
        chunked_prefill=OFF, multimodal=spec.multimodal, device_gib=gib, device_name=name,
    )  # fmt: skip
    shape = profile.ProfileShape.of(spec, tp, spec.dtype)
    assert shape is not None
    return profile.activation_peak(era, batch, shape).bytes / GiB


@pytest.mark.parametrize("case", ["vllm-0.6-v0-llama-3.1-8b-3090-20k",
                                  "vllm-0.6-v0-llama-3.1-8b-3090-29k-failed"])  # fmt: skip
def test_v0_peak_is_the_mlp_working_set_of_max_model_len_tokens(case: str) -> None:
    """vLLM 0.6.4 on an RTX 3090: 20,000 / 29,000 batched tokens peak at 2.07 / 2.99 GiB over
    the weights; the MLP working set of that many tokens is 2.06 / 2.99."""
    measured, context = _v0_peak(case)
    modelled = _modelled("meta-llama/Llama-3.1-8B-Instruct", V0, "0.6.4", context,
                         gib=23.58, name="RTX 3090")  # fmt: skip
    low, high = estimate.VLLM_V0_PROFILE_UNMODELLED_GIB[1:]
    assert modelled + low - 0.01 <= measured <= modelled + high
    assert abs(measured - modelled) < 0.02


def _measured_activation(case_file: str) -> tuple[float, str, int]:
    e = explain_log((LOGS / case_file).read_text(encoding="utf-8"), {})
    d = e.deployment
    assert d.measured.profile.activation_gib is not None
    return d.measured.profile.activation_gib, e.reconciliation.model.model_id, d.tp


@pytest.mark.parametrize("log", ["l05-vllm.log", "l11-vllm.log", "l16-vllm.log", "l19-vllm.log"])
def test_v1_peak_is_within_the_stated_range_of_the_measured_one(log: str) -> None:
    """vLLM 0.19 on an H100 (8,192 tokens, 1,024 sampled rows): the sampler's fp32 logits,
    probabilities and exponential draw over 1,024 x vocab cells set the peak; the measured one
    sits inside the modelled figure plus the stated remainder."""
    measured, model, tp = _measured_activation(log)
    modelled = _modelled(model, V1, "0.19.0", 8192, tp=tp)
    low, high = estimate.VLLM_PROFILE_UNMODELLED_GIB[1:]
    assert modelled + low <= measured <= modelled + high
    assert measured - modelled < 0.15


def test_v1_sampler_sets_the_peak_of_a_large_vocabulary() -> None:
    """Llama-3.1-8B on an H100: 1,024 x 128,256 cells x 14 B (bf16 logits, fp32 copy, probs,
    exponential draw) + the step's 8,192 x 4,096 bf16 hidden states."""
    spec = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    batch = profile.ProfileBatch(8192, 1024, "", "")
    shape = profile.ProfileShape.of(spec, 1, "bfloat16")
    assert shape is not None
    peak = profile.activation_peak(V1, batch, shape)
    assert peak.sampler == 1024 * 128256 * 14 + 8192 * 4096 * 2
    assert peak.forward == 8192 * (3 * 4096 + 3 * 14336) * 2
    assert peak.bytes == peak.sampler and peak.moe_workspace == 0
    fp32 = profile.ProfileShape.of(spec, 1, "float32")
    assert fp32 is not None  # `.to(float32)` of fp32 logits is the same tensor: 4 + 4 + 4 B
    assert profile.activation_peak(V1, batch, fp32).sampler == 1024 * 128256 * 12 + 8192 * 4096 * 4


def test_v1_moe_workspace_is_held_beside_the_sampler() -> None:
    """DeepSeek-V2-Lite: TritonExperts' two workspaces for 8,192 tokens x 6 experts stay
    allocated (v1/worker/workspace.py) while the sampler runs."""
    spec = resolve_model("deepseek-ai/DeepSeek-V2-Lite-Chat")
    shape = profile.ProfileShape.of(spec, 1, "bfloat16")
    assert shape is not None and shape.expert_width == 1408 and shape.mlp_width == 10944
    peak = profile.activation_peak(V1, profile.ProfileBatch(8192, 1024, "", ""), shape)
    assert peak.moe_workspace == 8192 * 6 * (2048 + 2816) * 2
    assert peak.bytes == peak.moe_workspace + max(peak.forward, peak.sampler)


def test_v0_batch_by_version_and_context() -> None:
    """SchedulerConfig / EngineArgs in the v0.6.4, v0.6.5 and v0.6.6 wheels."""

    def batch(version: str, context: int, on: bool | None = None, **kw: bool) -> int:
        flags = {"multimodal": False, "sliding_window": False, "speculative": False, **kw}
        chunked = profile.v0_chunked_prefill(on, context, **flags)
        return profile.profile_batch(
            vllm.era_for(version), context, tokens=None, seqs=None,
            chunked_prefill=chunked, multimodal=flags["multimodal"], device_gib=23.6,
            device_name="RTX 3090",
        ).tokens  # fmt: skip

    assert batch("0.6.6", 1024) == 2048
    assert batch("0.6.6", 32768) == 32768  # not above 32K: chunked prefill stays off
    assert batch("0.6.6", 32769) == 2048
    assert batch("0.6.4", 32769) == 512
    assert batch("0.6.5", 32769) == 2048
    assert batch("0.6.6", 65536, sliding_window=True) == 65536
    assert batch("0.6.6", 65536, speculative=True) == 65536
    assert batch("0.6.6", 65536, multimodal=True) == 65536
    assert batch("0.6.6", 4096, multimodal=True) == 5120
    assert batch("0.6.6", 8192, on=True) == 2048
    assert batch("0.6.6", 65536, on=False) == 65536


def test_v1_batch_defaults_by_device() -> None:
    def batch(gib: float, name: str) -> tuple[int, int]:
        b = profile.profile_batch(
            V1, 8192, tokens=None, seqs=None, chunked_prefill=OFF, multimodal=False,
            device_gib=gib, device_name=name,
        )  # fmt: skip
        return b.tokens, b.rows

    assert batch(79.19, "H100 SXM") == (8192, 1024)
    assert batch(79.25, "A100 80GB") == (2048, 256)
    assert batch(22.05, "L4") == (2048, 256)


@given(st.integers(1, 1 << 17), st.integers(1, 1 << 17), st.integers(1, 2048))
def test_peak_grows_with_the_batch(tokens: int, more: int, seqs: int) -> None:
    shape = profile.ProfileShape.of(resolve_model("deepseek-ai/DeepSeek-V2-Lite-Chat"), 1, "bf16")
    assert shape is not None
    for era in (V0, V1):
        small = profile.activation_peak(era, profile.ProfileBatch(tokens, seqs, "", ""), shape)
        big = profile.activation_peak(era, profile.ProfileBatch(tokens + more, seqs, "", ""), shape)
        assert small.bytes <= big.bytes


def _v0_llama(context: int) -> Deployment:
    return Deployment(Engine.VLLM, "meta-llama/Llama-3.1-8B-Instruct", gpu="RTX 3090",
                      engine_version="0.6.4", context_length=context)  # fmt: skip


def test_v0_plan_range_holds_the_logged_pool() -> None:
    """Without any measured figure, a V0 plan of the 20,000-token log holds its 31,232 tokens;
    the constant-per-8K-tokens activation gave 44,688 (+43%)."""
    ledger = plan(_v0_llama(20000))
    assert ledger.kv_tokens_range is not None
    low, high = ledger.kv_tokens_range
    assert low <= PUBLIC["vllm-0.6-v0-llama-3.1-8b-3090-20k"]["observed_kv_tokens"] <= high
    assert abs(ledger.kv_tokens - 31232) / 31232 < 0.03
    assert any(i.name == "max_num_batched_tokens" and i.value == "20000" for i in ledger.inputs)


def test_v0_refuses_a_context_its_pool_cannot_hold_with_the_engine_message() -> None:
    """The 29,000-token start failed: 'larger than the maximum number of tokens that can be
    stored in KV cache (23648)'. kvtier refuses it the same way, with a count in range."""
    with pytest.raises(ContextTooLong, match="maximum number of tokens that can be stored") as e:
        plan(_v0_llama(29000))
    assert e.value.tokens_range is not None
    assert e.value.tokens_range[0] <= 23648 <= e.value.tokens_range[1]


def _chunk_options(d: Deployment) -> dict[str, tuple[tuple[str, ...], int | None]]:
    p = resolve(d)
    base = build_ledger(p)
    options = {o.name: (o.flags, o.kv_tokens) for o in knob_options(p, base) if "chunk" in o.name}
    return {**options, "base": ((), base.kv_tokens)}


def test_v0_advice_is_chunked_prefill_not_a_smaller_batch() -> None:
    """V0 without chunked prefill must batch a whole max_model_len (SchedulerConfig refuses
    less); the lever is --enable-chunked-prefill, which profiles 2048 tokens from v0.6.5."""
    options = _chunk_options(dataclasses.replace(_v0_llama(20000), engine_version="0.6.6"))
    flags, tokens = options["chunked prefill (2048 tokens a step)"]
    assert flags == ("--enable-chunked-prefill",)
    assert tokens is not None and options["base"][1] is not None
    assert tokens > options["base"][1]
    assert len(options) == 2  # no halved batch: V0 cannot batch less than max_model_len


def test_v1_advice_halves_the_gpu_default_batch() -> None:
    """V1 on an A100 batches 2048 tokens by default (get_batch_defaults), so the smaller batch
    offered is 1024, not half of the large-card 8192."""
    d = Deployment(Engine.VLLM, "meta-llama/Llama-3.1-8B-Instruct", gpu="A100 80GB",
                   context_length=8192)  # fmt: skip
    options = _chunk_options(d)
    assert options["chunked prefill 1024"][0] == ("--max-num-batched-tokens", "1024")
