"""explain's bytes-per-token check against vLLM's logged count. From v0.21 the count is
int(max_concurrency x max_model_len) (get_kv_cache_capacity), max_concurrency = num_blocks /
blocks a request holds over every group (get_max_concurrency_for_kv_cache_config): the log's
budget over its count is the budget bytes a logged token stands for, page x group layers x
blocks per request / max_model_len, not the model's bytes per token, for every grouped
(sliding-window, two-shape, linear) pool and for a max_model_len that is not whole blocks.

The logs are built here with vLLM's arithmetic written out, the counts below computed by hand."""

from __future__ import annotations

import pytest

from kvtier.ledger.explain import explain_log

GiB = 1 << 30


def _log(model: str, version: str, max_model_len: int, available: float, count: int) -> str:
    return (
        f"(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version "
        f"{version}\n"
        "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: "
        f"{{'model': '{model}', 'max_model_len': {max_model_len}}}\n"
        "(EngineCore_DP0 pid=2) INFO 01-01 00:00:20 [gpu_worker.py:1] Available KV cache "
        f"memory: {available:.2f} GiB\n"
        "(EngineCore_DP0 pid=2) INFO 01-01 00:00:21 [kv_cache_utils.py:1] GPU KV cache size: "
        f"{count:,} tokens\n"
    )


def _count(available: float, block_bytes: int, per_request: int, max_model_len: int) -> int:
    return int(int(available * GiB // block_bytes) / per_request * max_model_len)


# gpt-oss-20b at TP1 bf16: 12 full + 12 sliding layers (window 128) of 8 KV heads x 64, so one
# group of 12 layers a type and 16 x 8 x 64 x 2 x 2 = 32,768 B a layer's block; a request at
# 131,072 holds 8,192 full blocks and cdiv(127 + 8,192, 16) + 1 = 521 sliding ones (8,192
# batched tokens on an H100), cdiv(127 + 2 x 8,192, 16) + 1 = 1,033 from v0.26.0
GPT_OSS = ("openai/gpt-oss-20b", 12 * 32_768, 131_072)
# gemma-3-27b: 10 full + 52 sliding (window 1,024) of 16 x 128: groups of 10, 1 full + 6
# sliding, 131,072 B a layer's block; at 32,768: 2,048 + 6 x (cdiv(1,023 + 8,192, 16) + 1 = 577)
GEMMA_3 = ("google/gemma-3-27b-it", 10 * 131_072, 32_768)


@pytest.mark.parametrize(
    ("case", "version", "per_request", "count"),
    [
        (GPT_OSS, "0.21.0", 8_192 + 521, 2_259_288),
        (GPT_OSS, "0.25.1", 8_192 + 521, 2_259_288),
        (GPT_OSS, "0.26.0", 8_192 + 1_033, 2_133_894),
        (GEMMA_3, "0.21.0", 2_048 + 6 * 577, 97_435),
    ],
)
def test_a_sliding_window_hybrid_count_draws_no_warning(
    case: tuple[str, int, int], version: str, per_request: int, count: int
) -> None:
    """55 GiB over 2,259,288 logged tokens is 26,139 B a token where gpt-oss-20b takes 49,152:
    kvtier warned 'check --model' on every such log. The budget a logged token stands for,
    393,216 x 8,713 / 131,072 = 26,139 B, is inside the log's bracket."""
    model, block_bytes, length = case
    available = 55.0 if model == GPT_OSS[0] else 20.0
    assert _count(available, block_bytes, per_request, length) == count
    rec = explain_log(_log(model, version, length, available, count), {"gpu": "H100"})
    r = rec.reconciliation
    assert r.status == "match" and r.predicted == count
    assert not r.warnings


def test_a_count_the_model_cannot_make_still_warns() -> None:
    """Half the count (a model of twice the KV a token served, or the wrong --tp): the log's
    52,278 B a logged token is outside what gpt-oss-20b's grouped pool makes of one."""
    model, _, length = GPT_OSS
    r = explain_log(_log(model, "0.21.0", length, 55.0, 2_259_288 // 2), {"gpu": "H100"})
    (warning,) = r.reconciliation.warnings
    assert warning.startswith(
        "openai/gpt-oss-20b takes 49,152 B of KV per token per GPU and 26,139 B of the budget "
        "per logged token, but the log's figures allow 52,"
    )


def test_a_context_of_part_blocks_draws_no_warning() -> None:
    """Qwen3-8B (36 layers of 8 x 128: 147,456 B a token) at max_model_len 1,000: a request
    holds 63 blocks of 16, so 60 GiB logs int(27,306 / 63 x 1,000) = 433,428 tokens, 148,636 B
    of budget each; the whole-block bracket 148,621-148,649 excludes the model's 147,456."""
    count = _count(60.0, 36 * 65_536, 63, 1_000)
    assert count == 433_428
    r = explain_log(_log("Qwen/Qwen3-8B", "0.21.0", 1_000, 60.0, count), {"gpu": "H100"})
    assert r.reconciliation.status == "match" and not r.reconciliation.warnings


def test_before_v0_21_the_count_is_whole_blocks_per_group() -> None:
    """v0.20: num_blocks // groups x block, 150,186 // 2 x 16 = 1,201,488: 49,152 B a token."""
    model, _, length = GPT_OSS
    r = explain_log(_log(model, "0.20.0", length, 55.0, 1_201_488), {"gpu": "H100"})
    assert r.reconciliation.status == "match" and not r.reconciliation.warnings
    wrong = explain_log(_log(model, "0.20.0", length, 55.0, 2_259_288), {"gpu": "H100"})
    (warning,) = wrong.reconciliation.warnings
    assert warning.startswith("openai/gpt-oss-20b takes 49,152 B of KV per token per GPU, but")
