"""SGLang's DP attention splits the attention layers over tp / dp; deepseek_v2.py keeps the
embedding whole on every rank through v0.5.7 (`VocabParallelEmbedding(enable_tp=not
is_dp_attention_enabled())`) and splits it over the same tp / dp from v0.5.8
(tests/test_sglang_embedding.py): DeepSeek-V3.2-Exp on 8 x B200 at --tp 8 --dp 8
--enable-dp-attention (sgl-project/sglang pull request 11309) logs 975,424 tokens; planned with
the attention at TP8 the pool was 1,314,929 (+34.8%), outside its range."""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main
from kvtier.model.catalog import resolve_model
from kvtier.model.params import ATTENTION, EMBEDDING, LM_HEAD, ROUTED_EXPERTS
from kvtier.model.weights import Splits, weight_bytes

LAUNCH = ["--", "python", "-m", "sglang.launch_server", "--model", "deepseek-ai/DeepSeek-V3.2"]
LAUNCH += ["--tp", "8", "--dp", "8", "--enable-dp-attention"]


def test_attention_is_split_over_attn_tp_and_the_embedding_is_whole() -> None:
    spec = resolve_model("deepseek-ai/DeepSeek-V3.2")
    plain = {g.name: g for g in weight_bytes(spec, 8).groups}
    dp = {g.name: g for g in weight_bytes(spec, 8, splits=Splits(attention=1, embedding=1)).groups}
    assert dp[ATTENTION].params_per_rank == 8 * plain[ATTENTION].params_per_rank
    assert dp[EMBEDDING].params_per_rank == spec.vocab_size * spec.hidden_size
    # the MoE experts and the LM head stay split over the full TP
    assert dp[ROUTED_EXPERTS].params_per_rank == plain[ROUTED_EXPERTS].params_per_rank
    assert dp[LM_HEAD].params_per_rank == plain[LM_HEAD].params_per_rank


def test_the_plans_range_holds_the_logged_count(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--gpu", "B200", "--sglang-version", "0.5.4", "--json", *LAUNCH]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    low, high = out["kv_tokens_range"]
    assert low <= 975_424 <= high
    weights = next(r for r in out["ledger"] if r["item"] == "weights")
    rule = "the embedding whole (deepseek_v2.py from v0.4.10, before v0.5.8"
    assert f"attention at TP1 (DP attention; deepseek_v2.py), {rule}" in weights["source"]
