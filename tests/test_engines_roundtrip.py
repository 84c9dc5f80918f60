"""plan -> the startup log the engine would print -> explain: the same pool, every era.

A deployment is drawn at random (either engine, every version era kvtier models, TP/PP, KV dtypes,
page sizes, speculative decoding, a stated or a default fraction). `kvtier plan` computes its
ledger from measured figures; the lines the engine prints for that start are rendered from the
ledger; `kvtier explain` reads them back. On the grid the engine prints (two decimals of GiB) the
round trip is exact: same KV tokens, bytes per token and fraction. Off the grid, explain's range
(the rounding of the printed figures) holds plan's count. In every case the options explain lists
are priced at the count it predicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.engines.deployment import Deployment, Engine, FreeMemory, Measured, Profile
from kvtier.engines.explain import Reconciliation
from kvtier.engines.ledger import Ledger
from kvtier.errors import KvtierError
from kvtier.ledger.explain import Explanation, explain_log
from kvtier.ledger.plan import plan
from kvtier.model.catalog import resolve_model
from kvtier.report.explain_payload import explain_payload

ROUND_TRIPS = 1200  # examples per run, CI included

SGLANG_VERSIONS = ("0.4.5", "0.4.9", "0.5.2", "0.5.9", "main")
VLLM_VERSIONS = ("0.6.3", "0.19.0", "0.20.0", "0.21.0")
# (catalog id, speculative algorithm SGLang can run on it or None)
SGLANG_MODELS = (
    ("Qwen/Qwen3-8B", None),
    ("meta-llama/Llama-3.1-8B-Instruct", None),
    ("Qwen/Qwen3-30B-A3B", None),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", None),
    ("deepseek-ai/DeepSeek-V3", "NEXTN"),
    ("moonshotai/Kimi-K2.5", "EAGLE3"),
    ("google/gemma-2-9b-it", None),
)
# (catalog id, speculative method vLLM can run on it or None)
VLLM_MODELS = (
    ("Qwen/Qwen3-8B", None),
    ("meta-llama/Llama-3.1-8B-Instruct", None),
    ("Qwen/Qwen3-30B-A3B", None),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", None),
    ("mistralai/Mistral-7B-Instruct-v0.3", None),
    ("deepseek-ai/DeepSeek-V3", "deepseek_mtp"),
)
GPUS = ("H100", "H200", "RTX PRO 6000", "A100 40GB", "L40S")


@dataclass(frozen=True)
class Case:
    deployment: Deployment
    print_fraction: bool  # SGLang: server_args states mem_fraction_static
    print_begin: bool  # SGLang: the 'Load weight begin' line is in the log


def _grid(value: float, on_grid: bool) -> float:
    return round(value, 2) if on_grid else value


@st.composite
def sglang_cases(draw: st.DrawFn, on_grid: bool) -> Case:
    model_id, speculative = draw(st.sampled_from(SGLANG_MODELS))
    model = resolve_model(model_id)
    hybrid = model.kv.is_hybrid
    before = _grid(draw(st.floats(30.0, 140.0)), on_grid)
    weights = _grid(before * draw(st.floats(0.05, 0.6)), on_grid)
    stated = draw(st.booleans())
    fraction = round(draw(st.floats(0.7, 0.95)), 3) if stated else None
    deployment = Deployment(
        engine=Engine.SGLANG,
        model=model_id,
        tp=draw(st.sampled_from((1, 2, 4, 8))),
        pp=1 if hybrid else draw(st.sampled_from((1, 1, 2))),
        gpu=draw(st.sampled_from(GPUS)),
        engine_version=draw(st.sampled_from(SGLANG_VERSIONS)),
        mem_fraction=fraction,
        kv_cache_dtype=draw(st.sampled_from(("auto", "auto", "fp8_e4m3"))),
        page_size=draw(st.sampled_from((1, 1, 16, 64))),
        speculative_algorithm=speculative if draw(st.booleans()) else None,
        # the difference of two grid values is off the grid in binary (43.9 - 19.8 ->
        # 24.099999999999998): the figure the engine prints is itself on the grid
        measured=Measured(
            free=FreeMemory(before_load_gib=before, after_load_gib=_grid(before - weights, on_grid))
        ),
    )
    return Case(deployment, print_fraction=stated or draw(st.booleans()), print_begin=True)


@st.composite
def vllm_cases(draw: st.DrawFn, on_grid: bool) -> Case:
    model, method = draw(st.sampled_from(VLLM_MODELS))
    speculative = method if method and draw(st.booleans()) else None
    deployment = Deployment(
        engine=Engine.VLLM,
        model=model,
        speculative_algorithm=speculative.upper() if speculative else None,
        speculative_num_draft_tokens=1 if speculative else None,
        tp=draw(st.sampled_from((1, 2, 4))),
        pp=draw(st.sampled_from((1, 1, 2))),
        engine_version=draw(st.sampled_from(VLLM_VERSIONS)),
        mem_fraction=round(draw(st.floats(0.5, 0.95)), 2),
        kv_cache_dtype=draw(st.sampled_from(("auto", "auto", "fp8"))),
        page_size=draw(st.sampled_from((16, 16, 32))),
        context_length=draw(st.sampled_from((2048, 4096, 8192))),
        measured=Measured(
            profile=Profile(kv_available_gib=_grid(draw(st.floats(2.0, 70.0)), on_grid))
        ),
    )
    return Case(deployment, print_fraction=True, print_begin=True)


def cases(on_grid: bool) -> st.SearchStrategy[Case]:
    return st.one_of(sglang_cases(on_grid), vllm_cases(on_grid))


def render(case: Case, ledger: Ledger) -> str:
    """The startup lines the engine prints for `ledger`, figures to two decimals."""
    if case.deployment.engine is Engine.SGLANG:
        return _render_sglang(case, ledger)
    return _render_vllm(case, ledger)


def _render_sglang(case: Case, ledger: Ledger) -> str:
    d, m = case.deployment, case.deployment.measured.free
    assert m.before_load_gib is not None and m.after_load_gib is not None
    args = [f"model_path='{d.model}'", f"tp_size={d.tp}", f"pp_size={d.pp}"]
    if case.print_fraction:
        args.append(f"mem_fraction_static={ledger.mem_fraction}")
    args += [f"kv_cache_dtype='{d.kv_cache_dtype}'", f"page_size={d.page_size}"]
    spec = f"'{d.speculative_algorithm}'" if d.speculative_algorithm else "None"
    args.append(f"speculative_algorithm={spec}")
    arch = resolve_model(d.model).architecture
    weights = m.before_load_gib - m.after_load_gib
    kv_gib = ledger.item("KV cache pool").gib
    lines = [
        f"[2026-01-05 10:00:00] server_args=ServerArgs({', '.join(args)})",
        f"[2026-01-05 10:00:01 TP0] Load weight begin. avail mem={m.before_load_gib:.2f} GB",
        f"[2026-01-05 10:00:09 TP0] Load weight end. type={arch}, dtype=torch.bfloat16, "
        f"avail mem={m.after_load_gib:.2f} GB, mem usage={weights:.2f} GB.",
        f"[2026-01-05 10:00:10 TP0] KV Cache is allocated. #tokens: {ledger.kv_tokens}, "
        f"KV size: {kv_gib:.2f} GB",
    ]
    return "\n".join(lines) + "\n"


def _render_vllm(case: Case, ledger: Ledger) -> str:
    d, m = case.deployment, case.deployment.measured.profile
    assert m.kv_available_gib is not None
    kv_dtype = f", 'kv_cache_dtype': '{d.kv_cache_dtype}'" if d.kv_cache_dtype != "auto" else ""
    if d.speculative_algorithm:
        kv_dtype += (
            f", 'speculative_config': {{'method': '{d.speculative_algorithm.lower()}', "
            f"'num_speculative_tokens': {d.speculative_num_draft_tokens}}}"
        )
    lines = [
        f"INFO 01-05 10:00:00 [api_server.py:1] vLLM API server version {d.engine_version}",
        f"INFO 01-05 10:00:00 [utils.py:1] non-default args: {{'model': '{d.model}', "
        f"'tensor_parallel_size': {d.tp}, 'pipeline_parallel_size': {d.pp}, "
        f"'block_size': {d.page_size}, 'max_model_len': {d.context_length}, "
        f"'gpu_memory_utilization': {d.mem_fraction}{kv_dtype}}}",
    ]
    if ledger.era.startswith("vLLM 0.6"):
        blocks = int(ledger.figures.num_blocks)
        lines += [
            "INFO 01-05 10:00:05 [worker.py:1] Memory profiling results: ... the rest of the "
            f"memory reserved for KV Cache is {m.kv_available_gib:.2f}GiB.",
            f"INFO 01-05 10:00:05 [executor_base.py:1] # GPU blocks: {blocks}, # CPU blocks: 2048",
        ]
    else:
        lines += [
            "(Worker_TP0 pid=1) INFO 01-05 10:00:05 [gpu_worker.py:1] Available KV cache "
            f"memory: {m.kv_available_gib:.2f} GiB",
            "(EngineCore_DP0 pid=1) INFO 01-05 10:00:05 [kv_cache_utils.py:1] GPU KV cache "
            f"size: {ledger.kv_tokens:,} tokens",
        ]
    return "\n".join(lines) + "\n"


def _explain(case: Case, ledger: Ledger) -> Explanation:
    d = case.deployment
    flags: dict[str, object] = {"gpu": d.gpu} if d.gpu else {}
    if d.engine is Engine.SGLANG:
        flags["engine_version"] = d.engine_version
    return explain_log(render(case, ledger), flags)


def _planned(case: Case) -> Ledger | None:
    try:
        return plan(case.deployment)
    except KvtierError:  # the engine would refuse this start: no log to read
        return None


def _exact(ledger: Ledger, rec: Reconciliation) -> None:
    """On the grid: explain reads back exactly what plan computed."""
    assert rec.predicted == ledger.kv_tokens
    assert rec.kv_bytes_per_token == ledger.kv_bytes_per_token
    assert rec.ledger.mem_fraction == ledger.mem_fraction


def _in_range(ledger: Ledger, rec: Reconciliation) -> None:
    """Planned from unrounded figures, printed rounded: explain's range holds plan's count."""
    assert rec.predicted_low <= ledger.kv_tokens <= rec.predicted_high


def _read_back(case: Case, check: Callable[[Ledger, Reconciliation], None]) -> bool:
    """Plan, render, explain, then `check` and a match; False where the engine would refuse."""
    ledger = _planned(case)
    if ledger is None:
        return False
    e = _explain(case, ledger)
    check(ledger, e.reconciliation)
    assert e.reconciliation.matches
    out = explain_payload(e)
    assert out.options_priced_at_kv_tokens == out.predicted.kv_tokens
    return True


@pytest.mark.parametrize(
    ("on_grid", "check", "examples", "least"),
    [(True, _exact, ROUND_TRIPS, 1000), (False, _in_range, ROUND_TRIPS // 4, 250)],
    ids=["on the grid, the same count", "off the grid, a range holding plan's count"],
)
def test_explain_reads_back_what_plan_computed(
    on_grid: bool, check: Callable[[Ledger, Reconciliation], None], examples: int, least: int
) -> None:
    done: list[bool] = []

    @settings(max_examples=examples, deadline=None, database=None)
    @given(case=cases(on_grid=on_grid))
    def run(case: Case) -> None:
        done.append(_read_back(case, check))

    run()
    assert sum(done) >= least, f"only {sum(done)} of {len(done)} deployments round-tripped"


def test_a_different_count_is_a_mismatch() -> None:
    """Kimi-K2.5's founding figures with 2% fewer tokens logged: outside any rounding."""
    text = (
        "[t] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', mem_fraction_static=0.88, "
        "tp_size=8)\n"
        "[t TP0] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
        "avail mem=21.71 GB, mem usage=72.33 GB.\n"
        "[t TP0] KV Cache is allocated. #tokens: 156091, KV size: 10.22 GB\n"
    )
    rec = explain_log(text, {}).reconciliation
    assert rec.predicted == 159_294
    assert not rec.matches
    assert rec.verdict.startswith("mismatch: +2.05")
