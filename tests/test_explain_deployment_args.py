"""vLLM's printed `non-default args` are the deployment: a `dtype` or `kv_cache_dtype` there sizes
the pool. The L05 startup (Llama-3.1-8B on an H100, vLLM 0.19, 58.11 GiB for KV) with one
argument changed, and the count vLLM's get_num_blocks gives for it: a float32 run takes 4 B an
element (238,016 tokens, was explained at bfloat16's 476,032: +100%), fp8 one (952,064)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.engines.vllm import kv_transfer
from kvtier.engines.vllm.versions import V0_32
from kvtier.ledger.explain import explain_log
from vllm_cpu_support import vllm_json

L05 = Path(__file__).parent / "fixtures" / "logs" / "l05-vllm.log"
ARGS = "'enable_prefix_caching': False}"
COUNT = "GPU KV cache size: 476,016 tokens"


def _blocks_tokens(kv_gib: float, element_bytes: int) -> int:
    """get_num_blocks for Llama-3.1-8B (32 layers, 8 KV heads of 128, block 16) at TP1."""
    page = 16 * 8 * 128 * element_bytes * 2
    return int(kv_gib * 2**30) // page // 32 * 16


@pytest.mark.parametrize(
    ("arg", "element_bytes", "dtype"),
    [
        ("'dtype': 'float32'", 4, "float32"),
        ("'dtype': 'float16'", 2, "float16"),
        ("'dtype': 'half'", 2, "float16"),
        ("'kv_cache_dtype': 'fp8'", 1, "fp8"),
        ("'dtype': 'float32', 'kv_cache_dtype': 'fp8_e5m2'", 1, "fp8_e5m2"),
    ],
)
def test_printed_dtype_sizes_the_pool(arg: str, element_bytes: int, dtype: str) -> None:
    tokens = _blocks_tokens(58.11, element_bytes)
    text = L05.read_text(encoding="utf-8").replace(ARGS, f"{arg}, {ARGS}")
    text = text.replace(COUNT, f"GPU KV cache size: {tokens:,} tokens")
    e = explain_log(text, {})
    rec = e.reconciliation
    assert rec.observed is not None and rec.observed.value == tokens
    assert rec.predicted == tokens
    assert e.inputs.kv_dtype.name == dtype
    assert e.inputs.kv_dtype.element_bytes == element_bytes


def test_the_dtype_row_names_the_argument_line() -> None:
    text = L05.read_text(encoding="utf-8").replace(ARGS, f"'dtype': 'float32', {ARGS}")
    e = explain_log(text, {})
    assert "float32: line 2" in e.inputs.kv_dtype_source.text


def test_an_unknown_model_run_in_float32_is_recomputed() -> None:
    """A model kvtier does not know, run in float32: the stand-in's KV is float32 too (was
    refused: 'float32' is no vLLM KV dtype)."""
    tokens = _blocks_tokens(58.11, 4)
    text = L05.read_text(encoding="utf-8").replace(ARGS, f"'dtype': 'float32', {ARGS}")
    text = text.replace("meta-llama/Llama-3.1-8B-Instruct", "someone/private-8b")
    text = text.replace(COUNT, f"GPU KV cache size: {tokens:,} tokens")
    e = explain_log(text, {})
    assert not e.inputs.model_known
    assert e.reconciliation.unchecked is None
    assert e.reconciliation.predicted == tokens


TRANSFER = (
    "'kv_transfer_config': KVTransferConfig(kv_connector='OffloadingConnector', engine_id='e1', "
    "kv_buffer_device='cuda', kv_buffer_size=1000000000.0, kv_role='kv_both', kv_rank=None, "
    "kv_parallel_size=1, kv_ip='127.0.0.1', kv_port=14579, kv_connector_extra_config={EXTRA}, "
    "kv_connector_module_path=None)"
)


def test_a_printed_kv_transfer_config_is_the_deployments() -> None:
    """vLLM prints --kv-transfer-config as its KVTransferConfig repr: read as the deployment's
    connector (unset fields left out), so the release's rules apply to it: v0.19.0 sizes the
    OffloadingConnector's host pool by cpu_bytes_to_use and does not read num_cpu_blocks."""
    base = L05.read_text(encoding="utf-8")
    sized = TRANSFER.replace("{EXTRA}", "{'cpu_bytes_to_use': 10737418240}")
    e = explain_log(base.replace(ARGS, f"{sized}, {ARGS}"), {})
    (fact,) = [f for name, f in e.inputs.plan_settings if name == "kv_transfer_config"]
    assert json.loads(str(fact.value)) == {
        "kv_connector": "OffloadingConnector",
        "engine_id": "e1",
        "kv_buffer_device": "cuda",
        "kv_role": "kv_both",
        "kv_port": 14579,
        "kv_connector_extra_config": {"cpu_bytes_to_use": 10737418240},
        "kv_buffer_size": 1000000000.0,
        "kv_parallel_size": 1,
        "kv_ip": "127.0.0.1",
    }
    assert fact.line == 2
    assert e.reconciliation.predicted == 476_032
    unsized = TRANSFER.replace("{EXTRA}", "{'num_cpu_blocks': 10000}")
    e = explain_log(base.replace(ARGS, f"{unsized}, {ARGS}"), {})
    assert e.reconciliation.unchecked is not None
    assert "num_cpu_blocks is not read there" in e.reconciliation.unchecked


def test_a_printed_kv_events_config_is_the_deployments() -> None:
    """KVEventsConfig(...) likewise: before v0.20.0 it turns the hybrid KV cache manager off."""
    events = "'kv_events_config': KVEventsConfig(enable_kv_cache_events=True, publisher='zmq')"
    e = explain_log(L05.read_text(encoding="utf-8").replace(ARGS, f"{events}, {ARGS}"), {})
    (fact,) = [f for name, f in e.inputs.plan_settings if name == "kv_events_config"]
    assert json.loads(str(fact.value)) == {"enable_kv_cache_events": True, "publisher": "zmq"}


def test_a_printed_config_that_is_not_a_json_object_is_a_warning() -> None:
    """A Namespace prints the flag's text: text that is no JSON object is named, not applied."""
    base = L05.read_text(encoding="utf-8")
    for arg, name in (
        ("'kv_transfer_config': 'not json'", "kv_transfer_config"),
        ("'kv_events_config': '5'", "kv_events_config"),
    ):
        e = explain_log(base.replace(ARGS, f"{arg}, {ARGS}"), {})
        assert f"line 2: {name}=" in " ".join(e.inputs.warnings)
        assert name not in dict(e.inputs.plan_settings)


_VLLM_REPR = r"""
import json, sys
from vllm.config import KVEventsConfig, KVTransferConfig
args = {"kv_transfer_config": KVTransferConfig(**json.loads(sys.argv[1])),
        "kv_events_config": KVEventsConfig(enable_kv_cache_events=True, publisher="zmq")}
print(json.dumps({"pairs": repr(args)[1:-1]}))  # as `non-default args: {...}` prints them
"""


def test_vllms_own_config_reprs_read_as_the_deployment(tmp_path: Path) -> None:
    """The text vLLM v0.32.0's CPU build prints for its own KVTransferConfig and KVEventsConfig
    (every field, defaults included) reads back as the config it was built from, and that
    release's rules take it (no field refused)."""
    given = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 10737418240},
    }
    pairs = vllm_json(_VLLM_REPR, given, tmp_path)["pairs"]
    assert "KVTransferConfig(" in pairs and "KVEventsConfig(" in pairs
    e = explain_log(L05.read_text(encoding="utf-8").replace(ARGS, f"{pairs}, {ARGS}"), {})
    settings = dict(e.inputs.plan_settings)
    config = json.loads(str(settings["kv_transfer_config"].value))
    assert {k: config[k] for k in given} == given
    transfer = kv_transfer.read(json.dumps(config), V0_32)
    assert transfer.connector == "OffloadingConnector" and not transfer.notes
    events = json.loads(str(settings["kv_events_config"].value))
    assert events["enable_kv_cache_events"] is True and events["publisher"] == "zmq"
