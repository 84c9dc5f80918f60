"""SGLang v0.5.14+ default memory settings: the prefill CUDA graph's backend and its reserve.

tests/test_oracle_sglang.py checks every rule here against the wheels' own code over a grid;
these cases pin the rules a grid of kvtier's test models cannot reach (DeepSeek sparse attention
in v0.5.17) and spell out one reserve by hand.
"""

from __future__ import annotations

import pytest

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.sglang.defaults import default_mem_fraction
from kvtier.engines.sglang.memory_settings import PrefillGraph, prefill_capture_sizes, prefill_graph
from kvtier.engines.version import Version
from kvtier.model.catalog import resolve_model

H100_MIB = 81_559


def _v(text: str) -> Version:
    return Version.parse(text, "SGLang")


@pytest.mark.parametrize(
    ("model", "version", "graph"),
    [
        ("Qwen/Qwen3-8B", "0.5.14", PrefillGraph.TC_PIECEWISE),
        ("Qwen/Qwen3-8B", "0.5.15", PrefillGraph.BREAKABLE),  # default_prefill_backend on CUDA
        ("deepseek-ai/DeepSeek-V3", "0.5.17", PrefillGraph.DISABLED),  # MLA off to v0.5.17
        ("deepseek-ai/DeepSeek-V3", "0.5.18", PrefillGraph.BREAKABLE),
        ("deepseek-ai/DeepSeek-V3.2", "0.5.16", PrefillGraph.DISABLED),
        ("deepseek-ai/DeepSeek-V3.2", "0.5.17", PrefillGraph.BREAKABLE),  # DSA exempt
        ("moonshotai/Kimi-K2.5", "0.5.16", PrefillGraph.TC_PIECEWISE),  # validated multimodal
        ("moonshotai/Kimi-K2.5", "0.5.18", PrefillGraph.BREAKABLE),  # on the breakable list
        ("google/gemma-3-27b-it", "0.5.23", PrefillGraph.DISABLED),  # multimodal, not listed
    ],
)
def test_prefill_graph_backend(model: str, version: str, graph: PrefillGraph) -> None:
    d = Deployment(Engine.SGLANG, model, tp=8)
    assert prefill_graph(d, resolve_model(model), _v(version)) is graph


def test_qwen3_8b_on_h100_by_hand() -> None:
    """v0.5.23, TP1, H100: chunk 8,192 and decode max_bs 256 by card class; the reserve is
    512 + 8,192 x 1.5 + 1 / 8 x 1,024 + 256 x 2 + 8 MiB per captured prefill size (8 + 14 + 8
    + 8 + 12 + 8 = 58 up to 8,192) = 13,904 MiB, above the 10 GiB floor."""
    d = Deployment(Engine.SGLANG, "Qwen/Qwen3-8B")
    rule = default_mem_fraction("0.5.23", H100_MIB, d, resolve_model("Qwen/Qwen3-8B"))
    assert prefill_capture_sizes(8192) == 58
    reserved = 512 + 8192 * 1.5 + 128 + 256 * 2 + 58 * 8
    assert reserved == 13_904
    assert (rule.chunked_prefill_size, rule.cuda_graph_max_bs) == (8192, 256)
    assert rule.value == round((H100_MIB - reserved) / H100_MIB, 3) == 0.830


def test_no_draft_reserve_from_v0_5_14() -> None:
    """v0.5.10-v0.5.13 add 4 GiB to the reserve for an EAGLE draft; v0.5.14 prices the draft in
    the pool's cell instead and reserves nothing for it."""
    model = resolve_model("Qwen/Qwen3-8B")
    plain = Deployment(Engine.SGLANG, "Qwen/Qwen3-8B")
    eagle = Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", speculative_algorithm="EAGLE3")
    for version in ("0.5.14", "0.5.23"):
        a = default_mem_fraction(version, H100_MIB, plain, model).value
        b = default_mem_fraction(version, H100_MIB, eagle, model).value
        assert a == b
    a = default_mem_fraction("0.5.13", H100_MIB, plain, model).value
    b = default_mem_fraction("0.5.13", H100_MIB, eagle, model).value
    assert a - b == pytest.approx(4096 / H100_MIB, abs=0.001)
