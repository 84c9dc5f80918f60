"""vLLM's refusal of a KV connector under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
(VllmConfig._verify_kv_transfer_compat, v0.21.0 on) unless sleep mode or, from v0.22.0, the cumem
allocator is on (engines/vllm/alloc_conf.py); checked against vLLM v0.32.0's own method where
its CPU build is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.launch import parse_launch
from kvtier.engines.version import Version
from kvtier.engines.vllm import kv_transfer
from kvtier.engines.vllm.alloc_conf import check_kv_transfer_compat
from kvtier.errors import KvtierError
from vllm_cpu_support import vllm_json

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def _refused(version: str, **values: object) -> bool:
    d = Deployment(Engine.VLLM, LLAMA, **values)  # type: ignore[arg-type]
    try:
        v = Version.parse(version, "vLLM")
        check_kv_transfer_compat(d, kv_transfer.read(d.kv_transfer_config, v), v)
    except KvtierError:
        return True
    return False


@pytest.mark.parametrize(
    ("version", "values", "refused"),
    [
        ("0.32.0", {"kv_transfer_config": NIXL}, True),
        ("0.32.0", {"kv_offloading_size_gib": 10.0}, True),
        ("0.32.0", {"kv_offloading_size_gib": 10.0, "kv_offloading_backend": "lmcache"}, True),
        ("0.20.0", {"kv_transfer_config": NIXL}, False),  # the check arrived in v0.21.0
        ("0.21.0", {"kv_transfer_config": NIXL}, True),
        ("0.21.0", {"kv_transfer_config": NIXL, "enable_sleep_mode": True}, False),
        ("0.21.0", {"kv_transfer_config": NIXL, "enable_cumem_allocator": True}, True),
        ("0.22.0", {"kv_transfer_config": NIXL, "enable_cumem_allocator": True}, False),
        ("0.33.0", {"kv_transfer_config": NIXL, "enable_sleep_mode": True}, False),
        ("0.33.0", {}, False),  # no connector
    ],
)
def test_the_rule_per_release(version: str, values: dict[str, object], refused: bool) -> None:
    assert _refused(version, expandable_segments=True, **values) is refused
    assert not _refused(version, **values)  # without expandable segments


def test_plan_refuses_it_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    command = f"{EXPANDABLE} vllm serve {LLAMA} --kv-offloading-size 10"
    args = ["plan", "--gpu", "H100", "--vllm-version", "0.32.0", "--"]
    assert main([*args, command]) == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("kvtier: error")]
    assert errors == [
        "kvtier: error: KV connector OffloadingConnector is incompatible with "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless enable_cumem_allocator is also "
        "enabled: vLLM 0.32.0 refuses it at startup (unset it, or pass --enable-cumem-allocator "
        "/ --enable-sleep-mode)"
    ]
    assert main([*args, command + " --enable-cumem-allocator"]) == 0


def test_the_launch_command_sets_the_three() -> None:
    launch = parse_launch(
        [f"{EXPANDABLE},max_split_size_mb:512 vllm serve {LLAMA} --enable-sleep-mode"]
    )
    assert launch.values["expandable_segments"] is True
    assert launch.values["enable_sleep_mode"] is True
    assert "PYTORCH_CUDA_ALLOC_CONF" in launch.ignored  # the ledger still does not model it
    other = parse_launch([f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False vllm serve {LLAMA}"])
    assert other.values["expandable_segments"] is False


def test_against_vllms_own_verify_kv_transfer_compat(tmp_path: Path) -> None:
    """vLLM's CPU build (v0.32.0): VllmConfig._verify_kv_transfer_compat on a config holding
    only what it reads, each allocator setting with and without the cumem allocator."""
    code = r"""
import json, os, sys, types, vllm
from vllm.config import VllmConfig
from vllm.config.kv_transfer import KVTransferConfig
out = []
for conf, cumem in json.loads(sys.argv[1]):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    config = types.SimpleNamespace(
        kv_transfer_config=KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both"),
        model_config=types.SimpleNamespace(enable_cumem_allocator=cumem))
    try:
        VllmConfig._verify_kv_transfer_compat(config)
        out.append(False)
    except ValueError:
        out.append(True)
print(json.dumps({"version": vllm.__version__, "refused": out}))
"""
    cases = [
        (conf, cumem)
        for conf in ("expandable_segments:True", "expandable_segments:False", "")
        for cumem in (False, True)
    ]
    got = vllm_json(code, cases, tmp_path)
    assert got["version"].startswith("0.32.0")
    ours = [
        _refused(
            "0.32.0",
            kv_transfer_config=NIXL,
            expandable_segments="expandable_segments:True" in conf,
            enable_cumem_allocator=cumem,
        )
        for conf, cumem in cases
    ]
    assert got["refused"] == ours == [True, False, False, False, False, False]
