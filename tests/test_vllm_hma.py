"""vLLM's hybrid KV cache manager under a KV connector (VllmConfig.__post_init__, engines/vllm/
hma.py): off, every sliding-window layer is sized as full attention; a hybrid linear-attention
model cannot start. Golden numbers by hand; the connector table checked against vLLM v0.32.0's
own KVConnectorFactory.supports_hma_config where its CPU build is installed."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine, Measured, Profile
from kvtier.engines.launch import parse_launch
from kvtier.engines.version import Version
from kvtier.engines.vllm import hma, kv_transfer
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan
from vllm_cpu_support import vllm_json

# gpt-oss-20b on one H100 at 131,072, v0.32.0: 12 full + 12 sliding layers (window 128) of 8 KV
# heads of 64, bf16, block 16: a layer's page 16 x 2 x 8 x 64 x 2 B = 32,768 B. The budget:
# 79.19 x 0.9 - 13.5 - 2.0 - 0.25 - 1.0 GiB = 58,541,477,986 B.
MEASURED = Measured(
    profile=Profile(activation_gib=2.0, non_torch_gib=0.25),
    weights_gib=13.5,
    gpu_mem_gib=79.19,
    cuda_graph_gib=1.0,
)
GPT_OSS = Deployment(
    Engine.VLLM,
    "openai/gpt-oss-20b",
    gpu="H100",
    context_length=131_072,
    measured=MEASURED,
    engine_version="0.32.0",
)
BUDGET = int((79.19 * 0.9 - 13.5 - 2.0 - 0.25 - 1.0) * 2**30)
# off: one group of 24 layers, a block 24 x 32,768 B; tokens = blocks x 16 (8,192 a request)
OFF_BLOCKS = BUDGET // (24 * 32_768)
# on: two groups of 12, a block 12 x 32,768 B; a request 8,192 full + cdiv(127 + 16,384, 16) + 1
# = 1,033 sliding blocks (v0.26.0 on, test_vllm_sliding.py)
ON_BLOCKS = BUDGET // (12 * 32_768)


def _connector(name: str, **extra: object) -> str:
    return json.dumps(
        {"kv_connector": name, "kv_role": "kv_both", "kv_connector_extra_config": extra}
    )


def _v(text: str) -> Version:
    return Version.parse(text, "vLLM")


def _reason(rule: Callable[..., str | None], d: Deployment, version: str) -> str | None:
    """`rule` (hma.off_reason, hma.chunked_off_reason) over `d`'s config as the plan reads it."""
    return rule(d, kv_transfer.read(d.kv_transfer_config, _v(version)), _v(version))


def _off(version: str, **values: object) -> str | None:
    return _reason(hma.off_reason, dataclasses.replace(GPT_OSS, **values), version)  # type: ignore[arg-type]


def test_a_connector_without_hma_sizes_every_layer_as_full_attention() -> None:
    assert (OFF_BLOCKS, ON_BLOCKS) == (74_439, 148_878)
    off = plan(dataclasses.replace(GPT_OSS, kv_transfer_config=_connector("P2pNcclConnector")))
    assert off.figures.num_blocks == OFF_BLOCKS
    assert off.kv_tokens == OFF_BLOCKS * 16 == 1_191_024
    note = next(n for n in off.notes if n.startswith("the hybrid KV cache manager is off"))
    assert "P2pNcclConnector does not support it" in note and "the 12 sliding-window" in note
    assert not any(n.startswith("hybrid KV groups") for n in off.notes)
    for given in ({}, {"kv_transfer_config": _connector("NixlConnector")}):
        on = plan(dataclasses.replace(GPT_OSS, **given))  # type: ignore[arg-type]
        assert on.figures.num_blocks == ON_BLOCKS
        assert on.kv_tokens == int(ON_BLOCKS / (8192 + 1033) * 131_072) == 2_115_310
    flag = plan(dataclasses.replace(GPT_OSS, disable_hybrid_kv_cache_manager=True))
    assert flag.kv_tokens == off.kv_tokens


def test_gemma_3_under_a_connector_before_v0_22() -> None:
    """Gemma-3-27B (10 full + 52 sliding layers of 16 KV heads of 128, bf16: 8,192 B a token a
    layer): any connector turns the manager off to v0.21.x. On, a block is one group of 10
    layers, 16 x 10 x 8,192 = 1,310,720 B; off, all 62: 16 x 62 x 8,192 = 8,126,464 B, over
    the same budget. At 131,072 its 62 GiB a request no longer fit, as vLLM says."""
    d = Deployment(
        Engine.VLLM,
        "google/gemma-3-27b-it",
        gpu="H100",
        engine_version="0.21.0",
        context_length=16_384,
    )
    on = plan(d).figures.num_blocks
    off = plan(dataclasses.replace(d, kv_offloading_size_gib=10.0))
    assert on * 1_310_720 // 8_126_464 <= off.figures.num_blocks
    assert off.figures.num_blocks <= (on + 1) * 1_310_720 // 8_126_464
    assert off.kv_tokens == off.figures.num_blocks * 16 and off.kv_bytes_per_token == 62 * 8192
    assert any("(OffloadingConnector) in vLLM 0.21.0" in n for n in off.notes)
    native = plan(dataclasses.replace(d, engine_version="0.22.0", kv_offloading_size_gib=10.0))
    assert not any("manager is off" in n for n in native.notes)
    whole = dataclasses.replace(d, context_length=131_072, kv_offloading_size_gib=10.0)
    with pytest.raises(KvtierError, match=r"62\.00 GiB KV cache is needed"):
        plan(whole)


@pytest.mark.parametrize(
    ("version", "values", "off"),
    [
        ("0.12.0", {"kv_transfer_config": _connector("NixlConnector")}, True),
        # a bool defaulting to False to v0.12.x: --no-disable-... changes nothing
        (
            "0.12.0",
            {
                "kv_transfer_config": _connector("NixlConnector"),
                "disable_hybrid_kv_cache_manager": False,
            },
            True,
        ),
        ("0.21.0", {"kv_transfer_config": _connector("NixlConnector")}, True),
        ("0.20.0", {"kv_offloading_size_gib": 10.0}, True),
        ("0.22.0", {"kv_transfer_config": _connector("NixlConnector")}, False),
        ("0.22.0", {"kv_offloading_size_gib": 10.0}, False),
        ("0.29.0", {"kv_transfer_config": _connector("MoRIIOConnector")}, True),
        ("0.30.0", {"kv_transfer_config": _connector("MoRIIOConnector")}, False),
        ("0.33.0", {"kv_transfer_config": _connector("LMCacheConnectorV1")}, True),
        ("0.33.0", {"kv_offloading_size_gib": 4.0, "kv_offloading_backend": "lmcache"}, True),
        ("0.33.0", {"disable_hybrid_kv_cache_manager": True}, True),
        ("0.33.0", {}, False),
        # MultiConnector: every child must support it; none is support only in v0.22.x
        ("0.32.0", {"kv_transfer_config": _connector("MultiConnector", connectors=[])}, True),
        ("0.22.0", {"kv_transfer_config": _connector("MultiConnector", connectors=[])}, False),
        (
            "0.32.0",
            {
                "kv_transfer_config": _connector(
                    "MultiConnector",
                    connectors=[
                        {"kv_connector": "NixlConnector"},
                        {"kv_connector": "OffloadingConnector"},
                    ],
                )
            },
            False,
        ),
        (
            "0.32.0",
            {
                "kv_transfer_config": _connector(
                    "MultiConnector",
                    connectors=[
                        {"kv_connector": "NixlConnector"},
                        {"kv_connector": "LMCacheConnectorV1"},
                    ],
                )
            },
            True,
        ),
    ],
)
def test_the_rule_per_release(version: str, values: dict[str, object], off: bool) -> None:
    assert (_off(version, **values) is not None) is off


@pytest.mark.parametrize(
    ("version", "values", "words"),
    [
        ("0.32.0", {"kv_transfer_config": _connector("P2pNcclConnector")}, "does not support HMA"),
        ("0.20.0", {"kv_transfer_config": _connector("NixlConnector")}, "before v0.22.0"),
    ],
)
def test_an_explicit_manager_with_a_connector_vllm_may_refuse_exits_2(
    version: str, values: dict[str, object], words: str
) -> None:
    with pytest.raises(KvtierError, match=words):
        _off(version, disable_hybrid_kv_cache_manager=False, **values)


@pytest.mark.parametrize("version", ["0.21.0", "0.32.0"])
def test_a_child_connector_name_is_shown_on_one_line(version: str) -> None:
    """A MultiConnector child's name is the config's text: a newline in it is quoted, not
    printed into the note."""
    config = _connector("MultiConnector", connectors=[{"kv_connector": "a\nb"}])
    reason = _off(version, kv_transfer_config=config)
    assert reason is not None and "'a\\nb'" in reason and "\n" not in reason


@pytest.mark.parametrize("version", ["0.21.0", "0.32.0"])
@pytest.mark.parametrize("child", [{}, {"kv_connector": None}, {"kv_connector": 5}])
def test_a_child_without_a_connector_name_is_refused(
    version: str, child: dict[str, object]
) -> None:
    """KVConnectorFactory.get_connector_class raises 'Connector name is not set' for a child
    lacking kv_connector (v0.32.0): refused naming the child, not noted as 'None'."""
    children = [{"kv_connector": "NixlConnector"}, child]
    config = _connector("MultiConnector", connectors=children)
    with pytest.raises(KvtierError, match=r"connectors\[1\] has no kv_connector") as caught:
        _off(version, kv_transfer_config=config)
    assert "\n" not in str(caught.value)


def test_a_connector_from_a_module_path_is_refused() -> None:
    """From v0.22.0 it depends on the class's SupportsHMA, which is not known; before, any
    connector turns the manager off, its class whatever it is."""
    config = json.dumps(
        {"kv_connector": "Mine", "kv_role": "kv_both", "kv_connector_module_path": "my.mod"}
    )
    with pytest.raises(KvtierError, match="kv_connector_module_path"):
        _off("0.32.0", kv_transfer_config=config)
    assert _off("0.21.0", kv_transfer_config=config) == "a KV connector (Mine) in vLLM 0.21.0"


def test_a_hybrid_linear_model_cannot_start_with_the_manager_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = (
        "vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4 "
        f"--kv-transfer-config '{_connector('P2pNcclConnector')}'"
    )
    assert main(["plan", "--gpu", "H100", "--vllm-version", "0.32.0", "--", command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Failed to promote local KV cache specs" in err[0]
    nixl = command.replace("P2pNcclConnector", "NixlConnector")
    assert main(["plan", "--gpu", "H100", "--vllm-version", "0.32.0", "--", nixl]) == 0


def test_the_launch_flag_is_read_both_ways() -> None:
    for word, value in (("disable", True), ("no-disable", False)):
        launch = parse_launch([f"vllm serve openai/gpt-oss-20b --{word}-hybrid-kv-cache-manager"])
        assert launch.values["disable_hybrid_kv_cache_manager"] is value


def test_against_vllms_own_supports_hma_config(tmp_path: Path) -> None:
    """vLLM's CPU build (v0.32.0): KVConnectorFactory.supports_hma_config over every connector it
    registers (those whose module imports there) and three MultiConnector configs, against
    kvtier's decision with no --[no-]disable-hybrid-kv-cache-manager."""
    multi = [
        [],
        [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"},
        ],
        [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            {"kv_connector": "ExampleConnector", "kv_role": "kv_both"},
        ],
    ]
    code = r"""
import json, sys, vllm
from vllm.config.kv_transfer import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory as F
configs = [{"kv_connector": n, "kv_role": "kv_both"} for n in sorted(F._registry)]
configs += [{"kv_connector": "MultiConnector", "kv_role": "kv_both",
             "kv_connector_extra_config": {"connectors": c}} for c in json.loads(sys.argv[1])]
out = []
for c in configs:
    try:
        out.append([c, F.supports_hma_config(KVTransferConfig(**c))])
    except ImportError:
        pass  # a connector whose package the CPU build lacks
print(json.dumps({"version": vllm.__version__, "hma": out}))
"""
    got = vllm_json(code, multi, tmp_path)
    assert got["version"].startswith("0.32.0") and len(got["hma"]) >= 18
    for config, supports in got["hma"]:
        assert (_off("0.32.0", kv_transfer_config=json.dumps(config)) is None) is supports, config


# Llama-4-Scout at TP8, 65,536, a 30 GiB budget: 48 layers, a layer's page 16 x 2 x 1 x 128 x 2 B
# = 8,192 B; with the manager off every layer is full attention, 30 GiB // (8,192 x 48) = 81,920
# blocks = 1,310,720 tokens.
SCOUT = Deployment(
    Engine.VLLM,
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    gpu="H200",
    tp=8,
    context_length=65_536,
    kv_cache_memory_bytes=30 * 2**30,
)
SCOUT_TOKENS = 30 * 2**30 // (8_192 * 48) * 16


@pytest.mark.parametrize(
    ("version", "changes"),
    [
        ("0.13.0", {}),  # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 0
        ("0.11.0", {}),
        ("0.21.0", {"allow_chunked_local_hma": False}),
        ("0.21.0", {"speculative_algorithm": "EAGLE3"}),  # use_eagle
        ("0.21.0", {"disable_hybrid_kv_cache_manager": True}),
        ("0.19.0", {"kv_events_config": "{}"}),
        ("0.21.0", {"kv_transfer_config": _connector("P2pNcclConnector")}),
    ],
)
def test_llama4_is_full_attention_where_the_manager_is_off(version: str, changes: dict) -> None:
    d = dataclasses.replace(SCOUT, engine_version=version, **changes)
    if changes.get("speculative_algorithm"):
        assert _reason(hma.chunked_off_reason, d, version).startswith("chunked local")
        return
    assert plan(d).kv_tokens == SCOUT_TOKENS == 1_310_720


@pytest.mark.parametrize(
    ("version", "changes"),
    [
        ("0.21.0", {}),  # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1
        ("0.14.0", {}),
        ("0.13.0", {"allow_chunked_local_hma": True}),
        ("0.20.0", {"kv_events_config": "{}"}),  # events no longer turn it off
        ("0.22.0", {"kv_transfer_config": _connector("NixlConnector")}),
    ],
)
def test_llama4_keeps_chunked_local_groups_where_the_manager_is_on(
    version: str, changes: dict
) -> None:
    """Four groups of 12 layers (tests/test_vllm_chunked.py): 30 GiB // (12 x 8,192 B)."""
    d = dataclasses.replace(SCOUT, engine_version=version, **changes)
    assert _reason(hma.chunked_off_reason, d, version) is None
    ledger = plan(d)
    assert ledger.figures.num_blocks == 30 * 2**30 // (12 * 8_192) == 327_680
    assert ledger.notes[0].startswith("hybrid KV groups: 1 full + 3 chunked-local groups of 12")


@pytest.mark.parametrize("version", ["0.13.0", "0.19.0"])
def test_kv_events_turn_the_manager_off_before_v0_20(version: str) -> None:
    d = dataclasses.replace(GPT_OSS, engine_version=version, kv_events_config="{}")
    assert _reason(hma.off_reason, d, version) == f"--kv-events-config in vLLM {version}"
    assert _reason(hma.off_reason, d, "0.20.0") is None
    with pytest.raises(KvtierError, match="explicitly enabled but is not supported"):
        _reason(
            hma.off_reason, dataclasses.replace(d, disable_hybrid_kv_cache_manager=False), version
        )


def test_the_launch_command_reads_the_chunked_variable_and_kv_events() -> None:
    words = (
        "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 vllm serve "
        "meta-llama/Llama-4-Scout-17B-16E-Instruct --kv-events-config {}"
    )
    launch = parse_launch([words])
    assert launch.values["allow_chunked_local_hma"] is False
    assert launch.values["kv_events_config"] == "{}"
    assert not launch.ignored
    with pytest.raises(KvtierError, match="not a whole number"):
        parse_launch([f"{hma.ALLOW_CHUNKED}=yes vllm serve m"])


def _scout_log(assignment: str, tokens: str = "1,310,720") -> str:
    """A v0.21.0 start of Llama-4-Scout at TP8: 30 GiB, the 1,310,720 tokens of SCOUT_TOKENS
    (every layer full attention) unless `tokens` says otherwise."""
    model = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    return "".join(
        f"{line}\n"
        for line in (
            f"(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] {assignment}vllm serve "
            f"{model} -tp 8",
            "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version "
            "0.21.0",
            "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: "
            f"{{'model': '{model}', 'tensor_parallel_size': 8, 'max_model_len': 65536}}",
            "(EngineCore_DP0 pid=2) (Worker_TP0 pid=3) INFO 01-01 00:00:20 [gpu_worker.py:1] "
            "Available KV cache memory: 30.00 GiB",
            "(EngineCore_DP0 pid=2) INFO 01-01 00:00:21 [kv_cache_utils.py:1] "
            f"GPU KV cache size: {tokens} tokens",
        )
    )


def test_a_logged_launch_line_carries_the_chunked_variable() -> None:
    """VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 before the logged command: explain
    recomputes every layer as full attention; without it the chunked-local groups, whose count
    v0.21.0 logs as int(327,680 / 7,168 x 65,536) (tests/test_vllm_chunked.py)."""
    on = explain_log(_scout_log("", "2,995,931"), {"gpu": "H200"}).reconciliation
    assert on.status == "match"
    assert explain_log(_scout_log(""), {"gpu": "H200"}).reconciliation.status == "mismatch"
    off = explain_log(_scout_log(f"{hma.ALLOW_CHUNKED}=0 "), {"gpu": "H200"}).reconciliation
    assert off.status == "match" and SCOUT_TOKENS == 1_310_720
