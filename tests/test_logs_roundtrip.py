"""Logs written from known memory figures, printed as the engines print them, reconcile as a match.

The engine's own arithmetic makes the token count from the unrounded figures; the log shows them
to two decimals. Reconcile must bracket the logged count within the rounding of what it reads,
and must call a different count a mismatch.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.engines.deployment import Engine
from kvtier.engines.detect import parse_log
from kvtier.engines.kvdtype import resolve_kv_dtype
from kvtier.engines.sglang import pool as sglang_budget
from kvtier.engines.vllm import pool as vllm_budget
from kvtier.ledger.log_inputs import log_inputs
from kvtier.ledger.reconcile import Reconciliation, reconcile
from kvtier.spec.catalog import resolve_model
from kvtier.units import GiB

MODELS = ("Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V2-Lite-Chat", "meta-llama/Llama-3.1-8B-Instruct")


def _reconcile(text: str) -> Reconciliation:
    return reconcile(log_inputs(parse_log(text), {}))


@settings(max_examples=150, deadline=None)
@given(
    model_id=st.sampled_from(MODELS),
    tp=st.sampled_from((1, 2, 4, 8)),
    before=st.floats(20.0, 140.0),
    weights_share=st.floats(0.05, 0.6),
    fraction=st.floats(0.7, 0.95),
    print_begin=st.booleans(),
    skew=st.integers(-3, 3),
)
def test_sglang_log_from_known_figures_matches(
    model_id: str,
    tp: int,
    before: float,
    weights_share: float,
    fraction: float,
    print_begin: bool,
    skew: int,
) -> None:
    model = resolve_model(model_id)
    dtype = resolve_kv_dtype(Engine.SGLANG, "auto", model.dtype)
    cell = sglang_budget.cell_size(model.kv, tp, model.kv.num_layers, dtype)
    weights = before * weights_share
    after = before - weights
    rest = sglang_budget.rest_gib(before, after, fraction)
    tokens = sglang_budget.profile_tokens(rest, cell, 1, None)
    lines = [
        f"[t] server_args=ServerArgs(model_path='{model_id}', mem_fraction_static={fraction!r}, "
        f"tp_size={tp}, page_size=1)",
        f"[t TP0] Load weight begin. avail mem={before:.2f} GB" if print_begin else "",
        f"[t TP0] Load weight end. type={model.architecture}, dtype=torch.bfloat16, "
        f"avail mem={after:.2f} GB, mem usage={weights:.2f} GB.",
        f"[t TP0] KV Cache is allocated. #tokens: {tokens + skew}, KV size: 1.00 GB",
    ]
    rec = _reconcile("\n".join(lines))
    assert rec.kv_bytes_per_token == cell
    assert rec.predicted_low <= tokens <= rec.predicted_high
    # the printed figures' rounding is worth far more than a few tokens
    assert rec.matches
    assert abs(rec.predicted - tokens) <= rec.predicted_high - rec.predicted_low


@settings(max_examples=150, deadline=None)
@given(
    model_id=st.sampled_from(MODELS),
    tp=st.sampled_from((1, 2, 4)),
    available=st.floats(1.0, 70.0),
    block=st.sampled_from((16, 32)),
)
def test_vllm_log_from_known_figures_matches(
    model_id: str, tp: int, available: float, block: int
) -> None:
    model = resolve_model(model_id)
    dtype = resolve_kv_dtype(Engine.VLLM, "auto", model.dtype)
    page = vllm_budget.page_bytes(model.kv, tp, block, dtype)
    blocks = vllm_budget.num_blocks(int(available * GiB), page, model.kv.num_layers)
    lines = [
        f"INFO [utils.py:1] non-default args: {{'model': '{model_id}', "
        f"'tensor_parallel_size': {tp}, 'block_size': {block}}}",
        f"(Worker_TP0 pid=1) INFO [gpu_worker.py:1] Available KV cache memory: {available:.2f} GiB",
        f"(EngineCore pid=1) INFO [kv_cache_utils.py:1] GPU KV cache size: {blocks * block:,} "
        "tokens",
    ]
    rec = _reconcile("\n".join(lines))
    assert rec.predicted_low <= blocks * block <= rec.predicted_high
    assert rec.matches


def test_a_different_count_is_a_mismatch() -> None:
    """Kimi-K2.5's founding figures with 2% fewer tokens logged: outside any rounding."""
    text = (
        "[t] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', mem_fraction_static=0.88, "
        "tp_size=8)\n"
        "[t TP0] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
        "avail mem=21.71 GB, mem usage=72.33 GB.\n"
        "[t TP0] KV Cache is allocated. #tokens: 156091, KV size: 10.22 GB\n"
    )
    rec = _reconcile(text)
    assert rec.predicted == 159_294
    assert not rec.matches
    assert rec.verdict.startswith("mismatch: +2.05")
