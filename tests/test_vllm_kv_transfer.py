"""vLLM's --kv-transfer-config keys per release (engines/vllm/kv_transfer.py): a key that is not
a KVTransferConfig field is dropped without a word through v0.15.x (kvtier notes it) and refused
at startup from v0.16.0 (extra="forbid"; kvtier exits 2 naming it); v0.32.0's fields and refusal
checked against vLLM's own KVTransferConfig where its CPU build is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.engines.version import Version
from kvtier.engines.vllm import kv_transfer
from kvtier.errors import KvtierError
from vllm_cpu_support import vllm_json

LMCACHE = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def _v(text: str) -> Version:
    return Version.parse(text, "vLLM")


def test_the_fields_each_release_has() -> None:
    assert len(kv_transfer.fields(_v("0.11.0"))) == 11
    assert kv_transfer.fields(_v("0.12.0"))[-1] == "enable_permute_local_kv"
    assert kv_transfer.fields(_v("0.13.0"))[-1] == "kv_load_failure_policy"
    dropped = set(kv_transfer.fields(_v("0.31.0"))) - set(kv_transfer.fields(_v("0.32.0")))
    assert dropped == {"kv_buffer_size", "kv_rank", "kv_parallel_size", "kv_ip"}
    assert len(kv_transfer.fields(_v("0.33.0"))) == 9


@pytest.mark.parametrize(
    ("version", "key"),
    [("0.16.0", "kv_connecter_extra_config"), ("0.21.0", "kv_rol"), ("0.32.0", "kv_ip")],
)
def test_from_v0_16_a_key_that_is_not_a_field_is_refused_naming_it(version: str, key: str) -> None:
    raw = json.dumps({**LMCACHE, key: 1})
    with pytest.raises(KvtierError) as refused:
        kv_transfer.read(raw, _v(version))
    assert str(refused.value).startswith(
        f"--kv-transfer-config: '{key}' is not a field of vLLM {version}'s KVTransferConfig, "
        "which refuses it at startup (extra fields forbidden from v0.16.0); its fields: "
        "kv_connector, engine_id"
    )


def test_through_v0_15_it_is_dropped_and_noted() -> None:
    raw = json.dumps({**LMCACHE, "kv_buffer_sise": 5})
    config = kv_transfer.read(raw, _v("0.15.0"))
    assert (config.connector, config.extra) == ("LMCacheConnectorV1", {})
    assert config.notes == (
        "--kv-transfer-config kv_buffer_sise: not a KVTransferConfig field in vLLM 0.15.0, "
        "which drops it without a word (ignored), and so does kvtier",
    )
    assert kv_transfer.read(raw.replace("sise", "size"), _v("0.15.0")).notes == ()
    assert kv_transfer.read(None, _v("0.15.0")) == kv_transfer.TransferConfig()


def test_a_dropped_key_is_noted_on_one_line_and_cut() -> None:
    """A key with a newline is quoted (the note would split) and each key cut at 60 characters."""
    raw = json.dumps({**LMCACHE, "a\nb": 1, "z" * 3000: 2})
    (note,) = kv_transfer.read(raw, _v("0.15.0")).notes
    assert note.startswith(f"--kv-transfer-config 'a\\nb', {'z' * 60}: not a KVTransferConfig")
    assert "\n" not in note and len(note) < 300


def test_against_vllms_own_kv_transfer_config(tmp_path: Path) -> None:
    """vLLM's CPU build (v0.32.0): KVTransferConfig's fields in order, and a key that is not one
    refused when the config is built."""
    code = r"""
import dataclasses, json, sys, vllm
from vllm.config.kv_transfer import KVTransferConfig
try:
    KVTransferConfig(**json.loads(sys.argv[1]))
    refused = False
except ValueError:  # pydantic.ValidationError
    refused = True
names = [f.name for f in dataclasses.fields(KVTransferConfig)]
print(json.dumps({"version": vllm.__version__, "fields": names, "refused": refused}))
"""
    got = vllm_json(code, {**LMCACHE, "kv_ip": "127.0.0.1"}, tmp_path)
    assert got["version"].startswith("0.32.0")
    assert tuple(got["fields"]) == kv_transfer.fields(_v("0.32.0"))
    assert got["refused"]  # as kvtier refuses kv_ip at v0.32.0 above
