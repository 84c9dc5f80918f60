"""`kvtier plan` gives a ledger for every catalog model on both engines, at an 8K context, on the
smallest catalog card x TP (by total memory) whose pool holds one 8K request at default flags.

A smaller card is refused by the engine's own rule (the weights leave no pool), not by kvtier; the
models kvtier refuses as not modelled are named in REFUSED with the line they print.
"""

from __future__ import annotations

import pytest

from cli_support import error_line, refusal, run_json
from kvtier.model.catalog import catalog_ids
from kvtier.model.gpu import resolve_gpu

CONTEXT = 8192
ENGINES = ("sglang", "vllm")

# model -> engine -> (GPU, TP): the smallest that holds the weights and one 8K request.
CARD: dict[str, dict[str, tuple[str, int]]] = {
    "Qwen/QwQ-32B": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen2.5-14B-Instruct": {"sglang": ("A100 40GB", 1), "vllm": ("A100 40GB", 1)},
    "Qwen/Qwen2.5-32B-Instruct": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen2.5-72B-Instruct": {"sglang": ("B200", 1), "vllm": ("B200", 1)},
    "Qwen/Qwen2.5-7B-Instruct": {"sglang": ("A10G", 1), "vllm": ("A10G", 1)},
    "Qwen/Qwen3-0.6B": {"sglang": ("RTX 5080", 1), "vllm": ("RTX 5080", 1)},
    "Qwen/Qwen3-14B": {"sglang": ("A100 40GB", 1), "vllm": ("A100 40GB", 1)},
    "Qwen/Qwen3-235B-A22B": {"sglang": ("H200", 4), "vllm": ("H200", 4)},
    "Qwen/Qwen3-30B-A3B": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen3-32B": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen3-8B": {"sglang": ("A10G", 1), "vllm": ("A10G", 1)},
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {"sglang": ("B200", 1), "vllm": ("B200", 1)},
    "Qwen/Qwen3.5-27B": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen3.5-35B-A3B": {"sglang": ("H200", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen3.5-397B-A17B": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic": {
        "sglang": ("L40S", 2),
        "vllm": ("L40S", 2),
    },
    "deepseek-ai/DeepSeek-R1": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": {"sglang": ("A10G", 1), "vllm": ("A10G", 1)},
    "deepseek-ai/DeepSeek-V2-Lite-Chat": {"sglang": ("A100 40GB", 1), "vllm": ("A100 40GB", 1)},
    "deepseek-ai/DeepSeek-V3": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "google/gemma-2-9b-it": {"sglang": ("RTX 5080", 2), "vllm": ("RTX 4090", 2)},
    "google/gemma-3-27b-it": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "google/gemma-4-31B-it": {"vllm": ("H100", 1)},
    "google/gemma-4-26B-A4B-it": {"vllm": ("H100", 1)},
    "meta-llama/Llama-3.1-405B-Instruct": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "meta-llama/Llama-3.1-70B-Instruct": {"sglang": ("B200", 1), "vllm": ("A100 80GB", 2)},
    "meta-llama/Llama-3.1-8B-Instruct": {"sglang": ("A10G", 1), "vllm": ("A10G", 1)},
    "meta-llama/Llama-3.3-70B-Instruct": {"sglang": ("B200", 1), "vllm": ("A100 80GB", 2)},
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": {"sglang": ("H200", 4), "vllm": ("H200", 2)},
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "deepseek-ai/DeepSeek-V3.2": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "moonshotai/Kimi-K2-Instruct": {"sglang": ("H200", 8), "vllm": ("B200", 8)},
    "MiniMaxAI/MiniMax-M2.5": {"sglang": ("H200", 2), "vllm": ("H200", 2)},
    "MiniMaxAI/MiniMax-M2.7": {"sglang": ("H200", 2), "vllm": ("H200", 2)},
    "nvidia/MiniMax-M2.5-NVFP4": {"sglang": ("H100", 2), "vllm": ("H100", 2)},
    "nvidia/DeepSeek-V3.1-NVFP4": {"sglang": ("H200", 4), "vllm": ("H200", 4)},
    "nvidia/DeepSeek-V3.2-NVFP4": {"sglang": ("H200", 4), "vllm": ("H200", 4)},
    "mistralai/Mistral-7B-Instruct-v0.3": {"sglang": ("A10G", 1), "vllm": ("A10G", 1)},
    "mistralai/Mixtral-8x7B-Instruct-v0.1": {"sglang": ("RTX 5090", 4), "vllm": ("RTX 5090", 4)},
    "moonshotai/Kimi-K2.5": {"sglang": ("RTX PRO 6000", 8), "vllm": ("B200", 4)},
    "openai/gpt-oss-120b": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "openai/gpt-oss-20b": {"sglang": ("A10G", 1), "vllm": ("A10G", 1)},
    "zai-org/GLM-4.7": {"sglang": ("H200", 8), "vllm": ("H200", 8)},
    "zai-org/GLM-5": {"sglang": ("MI355X", 8), "vllm": ("MI355X", 8)},
    "zai-org/GLM-4.7-Flash": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "Qwen/Qwen3-VL-235B-A22B-Instruct": {"sglang": ("H200", 4), "vllm": ("H200", 4)},
    "ibm-granite/granite-4.0-h-small": {"sglang": ("H100", 1), "vllm": ("H100", 1)},
    "LiquidAI/LFM2-1.2B": {"sglang": ("RTX 5080", 1), "vllm": ("RTX 5080", 1)},
}

# (model, engine) -> what kvtier prints when it refuses to model the deployment: SGLang's default
# rules (v0.5.9) predate Gemma 4
REFUSED: dict[tuple[str, str], str] = {
    ("google/gemma-4-31B-it", "sglang"): "SGLang runs Gemma 4 from v0.5.11",
    ("google/gemma-4-26B-A4B-it", "sglang"): "SGLang runs Gemma 4 from v0.5.11",
}

CASES = [(m, e) for m in catalog_ids() for e in ENGINES]


def _argv(model: str, engine: str, gpu: str, tp: int) -> list[str]:
    context = "--context-length" if engine == "sglang" else "--max-model-len"
    return ["plan", "--engine", engine, "--model", model, "--gpu", gpu, "--tp", str(tp),
            context, str(CONTEXT), "--json"]  # fmt: skip


def test_every_catalog_model_has_a_card_or_a_stated_refusal() -> None:
    for model, engine in CASES:
        assert (engine in CARD.get(model, {})) != ((model, engine) in REFUSED), (model, engine)


@pytest.mark.parametrize(("model", "engine"), CASES, ids=lambda v: v.split("/")[-1])
def test_catalog_model_plans_a_ledger(
    model: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if (model, engine) in REFUSED:
        gpu, tp = next(iter(CARD[model].values()))
        assert REFUSED[(model, engine)] in error_line(capsys, _argv(model, engine, gpu, tp))
        return
    gpu, tp = CARD[model][engine]
    out = run_json(capsys, _argv(model, engine, gpu, tp))
    assert out["engine"] == engine and out["model"] == model and out["tp"] == tp
    assert out["kv_tokens"] >= CONTEXT  # one request of the planned context fits
    low, high = out["kv_tokens_range"]
    assert 0 <= low <= out["kv_tokens"] <= high
    items = {i["item"]: i["gib"] for i in out["ledger"]}
    assert all(gib >= 0 for gib in items.values()), items
    card = resolve_gpu(gpu).memory_gib
    weights = items["weights"]
    pool = items["KV cache pool"]
    assert weights > 0 and pool > 0
    assert weights + pool <= card
    # the items divide the card: vLLM's torch total is a little under nvidia-smi's
    assert 0.97 * card <= sum(items.values()) <= card + 0.01, items


@pytest.mark.parametrize("engine", ENGINES)
def test_a_smaller_card_is_the_engines_refusal(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama-3.1-8B's 15 GiB of weights on a 16 GiB RTX 5080: the engine's own out-of-memory."""
    out = refusal(capsys, _argv("meta-llama/Llama-3.1-8B-Instruct", engine, "RTX 5080", 1))
    assert "not modelled" not in out["message"]
    assert ("Not enough memory" if engine == "sglang" else "No available memory") in out["message"]
