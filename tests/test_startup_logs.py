"""Startup logs as users paste them: prefixes, colours, CRLF, ranks, cut lines, several starts."""

# ruff: noqa: E501  (log lines are kept whole, as engines print them)

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvtier.engines.detect import parse_log
from kvtier.engines.sglang.log import SGLangStartup, parse_sglang
from kvtier.engines.vllm.log import VllmStartup, parse_vllm
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.logs.lines import read_lines
from kvtier.logs.pyargs import parse_dict, parse_kwargs

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "logs"
SEED = (FIXTURES / "seed-sglang.log").read_text(encoding="utf-8")


def _sglang(text: str) -> SGLangStartup:
    return parse_sglang(read_lines(text))


def _vllm(text: str) -> VllmStartup:
    return parse_vllm(read_lines(text))


def test_seed_log_facts_carry_their_lines() -> None:
    s = _sglang(SEED)
    assert s.server_args is not None and s.server_args.values["mem_fraction_static"] == 0.88
    assert s.server_args.values["speculative_algorithm"] == "EAGLE3"
    (load,) = s.weights_by_rank()
    assert (load.avail_gib, load.usage_gib, load.line) == (21.71, 72.33, 2)
    assert load.architecture == "KimiK25ForConditionalGeneration"
    assert len(s.pools_by_rank()) == 8 and {p.tokens for p in s.pools_by_rank()} == {159_277}
    # TP7's second allocation, after its own pool end, is the EAGLE-3 draft's K/V pool
    (draft,) = s.pools_by_rank(draft=True)
    assert (draft.rank, draft.k_gib, draft.v_gib, draft.line) == ("TP7", 0.30, 0.30, 21)
    assert s.kv_dtype is not None and s.kv_dtype.line == 3
    assert s.draft_kv_dtype is not None and s.draft_kv_dtype.line == 20
    end = s.free_at_pool_end()
    assert end is not None and (end.value, end.rank) == (11.18, "TP0")  # min: TP7 has 11.22


def _wrap(prefix: str) -> str:
    return "\n".join(prefix + line for line in SEED.splitlines())


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "sglang-1  | ",  # docker compose
        "2026-02-28T12:26:11.123456789Z ",  # docker logs --timestamps
        "Feb 28 12:26:11 gpu-node-3 sglang[48211]: ",  # journalctl
        "\x1b[32m",  # colour codes
    ],
)
def test_prefixes_do_not_change_the_answer(prefix: str) -> None:
    rec = explain_log(_wrap(prefix), {}).reconciliation
    assert (rec.observed.value, rec.predicted) == (159_277, 159_294)


def test_crlf_and_ansi_resets() -> None:
    text = "\r\n".join(f"\x1b[1;36m{line}\x1b[0m" for line in SEED.splitlines())
    s = _sglang(text)
    assert s.weights_by_rank()[0].usage_gib == 72.33
    assert s.free_at_pool_end() is not None


def test_interleaved_ranks_take_the_minimum() -> None:
    text = """\
[2026-01-01 00:00:01 TP1] Load weight begin. avail mem=78.10 GB
[2026-01-01 00:00:01 TP0] Load weight begin. avail mem=78.40 GB
[2026-01-01 00:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.40 GB, mem usage=8.00 GB.
[2026-01-01 00:00:09 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=70.05 GB, mem usage=8.05 GB.
"""
    s = _sglang(text)
    begin = s.free_before_load()
    assert begin is not None and (begin.value, begin.rank, begin.line) == (78.10, "TP1", 1)
    assert [w.rank for w in s.weights_by_rank()] == ["TP0", "TP1"]


def test_pipeline_stages_are_ranks_of_their_own() -> None:
    """PP1 TP0 is not PP0 TP0: its pool after PP0's pool end is no draft, its free memory counts."""
    text = """\
[t PP0 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=18.00 GB.
[t PP0 TP0] KV Cache is allocated. #tokens: 400000, K size: 12.00 GB, V size: 12.00 GB
[t PP0 TP0] Memory pool end. avail mem=11.00 GB
[t PP1 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=59.00 GB, mem usage=19.00 GB.
[t PP1 TP0] KV Cache is allocated. #tokens: 400000, K size: 12.00 GB, V size: 12.00 GB
[t PP1 TP0] Memory pool end. avail mem=10.50 GB
"""
    s = _sglang(text)
    assert [p.rank for p in s.pools_by_rank()] == ["PP0 TP0", "PP1 TP0"]
    assert s.pools_by_rank(draft=True) == []
    end = s.free_at_pool_end()
    assert end is not None and (end.value, end.rank) == (10.50, "PP1 TP0")


def test_truncated_lines_drop_only_the_cut_values() -> None:
    text = (
        "[x TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=16.00 GB, "
        "mem usage=7.0\n[x TP0] KV Cache is allocated. #tokens: 2984"
    )
    s = _sglang(text)
    assert s.weights_by_rank()[0].avail_gib == 16.00
    assert s.weights_by_rank()[0].usage_gib is None  # "7.0" without its unit is not trusted
    assert s.pools_by_rank()[0].tokens == 2984  # a cut count cannot be told from a short one


def test_era_c_lines() -> None:
    text = """\
[t TP0] Load weight end. elapsed=41.20 s, type=Qwen3ForCausalLM, quant=fp8, fmt=e4m3, avail mem=60.00 GB, mem usage=18.50 GB.
[t TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 500000, K size: 9.00 GB, V size: 9.00 GB
[t TP0] Memory pool end. avail mem=30.00 GB
[t TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2], avail mem=29.90 GB
[t TP0] Capture target decode CUDA graph end. elapsed=12.00 s, mem usage=0.75 GB, avail mem=29.15 GB.
[t TP0] max_total_num_tokens=500000, chunked_prefill_size=8192, context_len=40960, available_gpu_mem=28.40 GB
"""
    s = _sglang(text)
    load = s.weights_by_rank()[0]
    assert (load.quant, load.avail_gib, load.usage_gib) == ("fp8", 60.0, 18.5)
    assert s.pools_by_rank()[0].dtype == "torch.float8_e4m3fn"
    (graph,) = s.graphs
    assert (graph.usage_gib, graph.avail_gib, graph.draft) == (0.75, 29.15, False)
    assert s.summary is not None and s.summary.available_gpu_mem_gib == 28.40
    assert s.summary.max_running_requests is None


def test_graph_lines_of_both_spellings() -> None:
    text = """\
[t] Capture cuda graph end. Time elapsed: 18.28 s. mem usage=0.11 GB. avail mem=1.70 GB.
[t] Capture cuda graph end. Time elapsed: 9.00 s. avail mem=2.00 GB. mem usage=0.20 GB.
"""
    graphs = _sglang(text).graphs
    assert [(g.usage_gib, g.avail_gib) for g in graphs] == [(0.11, 1.70), (0.20, 2.00)]


def test_several_starts_use_the_last_and_say_so() -> None:
    first = SEED.replace("avail mem=21.71 GB", "avail mem=20.00 GB")
    parsed = parse_log(first + SEED)
    assert parsed.first_line == len(first.splitlines()) + 1
    assert any("2 server starts" in n for n in parsed.notes)
    assert isinstance(parsed.startup, SGLangStartup)
    assert parsed.startup.weights_by_rank()[0].avail_gib == 21.71


def test_vllm_v0_block_and_abridged_variant() -> None:
    full = """\
INFO 12-01 10:00:00 worker.py:241] Memory profiling takes 5.10 seconds
INFO 12-01 10:00:00 worker.py:241] the current vLLM instance can use total_gpu_memory (23.57GiB) x gpu_memory_utilization (0.90) = 21.21GiB
INFO 12-01 10:00:00 worker.py:241] model weights take 14.25GiB; non_torch_memory takes 0.10GiB; PyTorch activation peak memory takes 1.09GiB; the rest of the memory reserved for KV Cache is 5.77GiB.
INFO 12-01 10:00:01 executor_base.py:92] # cuda blocks: 6749, # CPU blocks: 4681
"""
    v = _vllm(full)
    assert [f.value for f in v.total_gib] == [23.57]
    assert v.utilization is not None and v.utilization.value == 0.90
    assert [f.value for f in v.available_kv_gib] == [5.77]
    assert v.gpu_blocks is not None and v.gpu_blocks.value == 6749
    assert v.cpu_blocks is not None and v.cpu_blocks.value == 4681
    short = (FIXTURES / "v11-vllm.log").read_text(encoding="utf-8")
    w = _vllm(short)
    assert w.v0_non_torch_gib is not None and w.v0_non_torch_gib.value == 0.10
    assert w.launch is not None and w.launch.values["model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_vllm_v1_lines_per_worker() -> None:
    v = _vllm((FIXTURES / "l11-vllm.log").read_text(encoding="utf-8"))
    assert v.version is not None and v.version.value == "0.19.0"
    assert v.args is not None and v.args.values["tensor_parallel_size"] == 2
    assert [(p.rank, p.non_kv_gib) for p in v.profiles] == [("TP1", 37.95), ("TP0", 37.95)]
    assert v.kv_tokens is not None and v.kv_tokens.value == 244_304
    assert v.max_model_len is not None and v.max_model_len.value == 8192
    assert v.graph_estimate_gib is not None and v.graph_estimate_gib.value == 1.82


def test_repr_arguments_survive_abridging_and_cuts() -> None:
    args = parse_kwargs(
        "model_path='/m', ... mem_fraction_static=0.88, json='{\"a\": \"b=1\"}', "
        "lst=[1, 'x)'], enum=<Kind.A: 1>, tp_size=4, cut='never clo"
    )
    assert args == {
        "model_path": "/m",
        "mem_fraction_static": 0.88,
        "json": '{"a": "b=1"}',
        "lst": [1, "x)"],
        "enum": "<Kind.A:",
        "tp_size": 4,
    }
    assert parse_dict("{'model': 'm', 'max_model_len': 8192, 'x': None}") == {
        "model": "m",
        "max_model_len": 8192,
        "x": None,
    }


def test_a_config_objects_repr_reads_as_its_keyword_pairs() -> None:
    """vLLM prints its config objects as dataclass reprs inside the dict; their keys stay theirs
    (an inner `max_model_len=` does not become the outer one), and a cut repr ends the scan."""
    text = (
        "{'model': 'm', 'kv_transfer_config': KVTransferConfig(kv_connector='P2pNcclConnector', "
        "kv_role='kv_producer', kv_rank=None, kv_connector_extra_config={'proxy_ip': '0.0.0.0'}), "
        "'max_model_len': 8192}"
    )
    assert parse_dict(text) == {
        "model": "m",
        "kv_transfer_config": {
            "kv_connector": "P2pNcclConnector",
            "kv_role": "kv_producer",
            "kv_rank": None,
            "kv_connector_extra_config": {"proxy_ip": "0.0.0.0"},
        },
        "max_model_len": 8192,
    }
    nested = "model='m', max_model_len=7, compilation_config=CompilationConfig(max_model_len=5)"
    assert parse_kwargs(nested) == {
        "model": "m",
        "max_model_len": 7,
        "compilation_config": {"max_model_len": 5},
    }
    assert parse_dict("{'a': 1, 'b': KVTransferConfig(kv_connector='X', ") == {"a": 1}
    # a repr of positional arguments stays its text; one nested past the interpreter's depth too
    assert parse_kwargs("path=PosixPath('/m')") == {"path": "PosixPath('/m')"}
    deep = "a(k=" * 100 + "1" + ")" * 100
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # 100 levels nest past it
    try:
        value = parse_kwargs(f"x={deep}")["x"]
    finally:
        sys.setrecursionlimit(limit)
    while isinstance(value, dict):
        value = value["k"]
    assert isinstance(value, str) and value.endswith(")")  # the rest kept as its text


def test_engine_is_recognised_and_a_wrong_one_refused() -> None:
    vllm_text = (FIXTURES / "l05-vllm.log").read_text(encoding="utf-8")
    assert parse_log(vllm_text).engine == "vllm"
    assert parse_log(SEED).engine == "sglang"
    with pytest.raises(KvtierError, match="this is a vLLM log, not SGLang"):
        parse_log(vllm_text, "sglang")
    with pytest.raises(KvtierError, match="this is an SGLang log, not vLLM"):
        parse_log(SEED, "vllm")


def test_no_memory_lines_named() -> None:
    with pytest.raises(KvtierError, match="no SGLang or vLLM startup lines"):
        parse_log("hello\nworld\n")
    only_end = "[t TP0] Memory pool end. avail mem=11.18 GB\n"
    with pytest.raises(KvtierError, match=r"lacks the memory lines.*'Load weight end\."):
        explain_log(only_end, {"model": "deepseek-ai/DeepSeek-V2-Lite-Chat"})


def test_a_count_without_memory_lines_is_observed_only() -> None:
    only_pool = "[t TP0] KV Cache is allocated. #tokens: 1000, KV size: 0.10 GB\n"
    rec = explain_log(only_pool, {"model": "deepseek-ai/DeepSeek-V2-Lite-Chat"}).reconciliation
    assert rec.status == "observed only" and rec.predicted == 1000
    assert "lacks the figures" in rec.verdict


def test_a_budget_without_a_count_is_predicted_only() -> None:
    only_budget = "(EngineCore pid=1) INFO [gpu_worker.py:1] Available KV cache memory: 10.00 GiB\n"
    rec = explain_log(only_budget, {"model": "Qwen/Qwen3-8B"}).reconciliation
    assert rec.status == "predicted only" and rec.observed is None
    assert rec.predicted == 10 * 2**30 // (147_456 * 16) * 16  # Qwen3-8B: 36 x 8 x 128 x 2 x 2 B


def test_missing_fraction_applies_the_default_rule_to_an_estimated_card() -> None:
    text = (FIXTURES / "s09-sglang.log").read_text(encoding="utf-8")
    rec = explain_log(text, {"model": "Qwen/Qwen3-0.6B"}).reconciliation
    assert "card memory (GiB)" in rec.estimated
    assert rec.predicted_low <= rec.observed.value <= rec.predicted_high  # type: ignore[union-attr]
    assert any("reproduces the logged pool is about 0.817" in n for n in rec.notes)


def test_flag_contradicting_the_log_is_a_warning() -> None:
    rec = explain_log(SEED, {"tp": 4, "mem_fraction": 0.9}).reconciliation
    assert rec.predicted == 159_294  # the log's tp_size=8 and 0.88 are used
    assert len(rec.warnings) == 2 and all("contradicts the log" in w for w in rec.warnings)
