"""SGLang's `--dtype auto` on a float32 config (configs/model_config.py _get_and_verify_dtype,
v0.5.3 - v0.5.23): float16, bfloat16 for Gemma; the KV under `--kv-cache-dtype auto` follows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.sglang.dtype import run_dtype
from kvtier.ledger.plan import plan
from kvtier.model.catalog import resolve_model

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
RULE = "configs/model_config.py _get_and_verify_dtype, SGLang v0.5.3 - v0.5.23"


def _config(tmp_path: Path, name: str, dtype: str | None) -> str:
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    if dtype is not None:
        config["torch_dtype"] = dtype
    path = tmp_path / f"{name}-{dtype}.json"
    path.write_text(json.dumps(config))
    return str(path)


def _kv_row(model: str, **values: object) -> tuple[str, str, int]:
    d = Deployment(Engine.SGLANG, model, gpu="H100", **values)  # type: ignore[arg-type]
    ledger = plan(d)
    (row,) = [i for i in ledger.inputs if i.name == "kv cache dtype"]
    return row.value, row.origin, ledger.kv_bytes_per_token


# Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes
LLAMA_CELL = 32 * 8 * 128 * 2 * 2


@pytest.mark.parametrize("dtype", ["float32", None])  # an unstated dtype is read as float32
def test_a_float32_llama_runs_its_kv_in_float16(tmp_path: Path, dtype: str | None) -> None:
    value, origin, cell = _kv_row(_config(tmp_path, "llama-3.1-8b", dtype))
    assert value == "float16"
    assert origin == f"auto: the model's dtype; a float32 config runs in float16 ({RULE})"
    assert cell == LLAMA_CELL  # two bytes, as bfloat16


def test_a_float32_gemma_runs_in_bfloat16(tmp_path: Path) -> None:
    value, origin, _ = _kv_row(_config(tmp_path, "gemma-2-9b-it", "float32"))
    assert (value, origin) == (
        "bfloat16",
        f"auto: the model's dtype; a float32 config runs in bfloat16 for Gemma ({RULE})",
    )


def test_a_bfloat16_config_and_explicit_flags_keep_their_rows(tmp_path: Path) -> None:
    assert _kv_row("llama-3.1-8b")[:2] == ("bfloat16", "default")
    f32 = _config(tmp_path, "llama-3.1-8b", "float32")
    assert _kv_row(f32, kv_cache_dtype="fp8_e4m3")[:2] == ("fp8_e4m3", "default")
    assert _kv_row(f32, dtype="bfloat16")[0] == "bfloat16"  # --dtype given: no downcast rule


def test_run_dtype_keeps_a_stated_half_dtype() -> None:
    spec = resolve_model("llama-3.1-8b")
    assert run_dtype(spec).name == spec.dtype == "bfloat16"


CHECKPOINT_RULE = (
    "auto -> fp8_e4m3: the checkpoint's kv_cache_quant_algo fp8 "
    "(ModelRunner.configure_kv_cache_dtype, SGLang v0.5.3+)"
)


def _sglang_row(model: str, **values: object) -> tuple[str, str, int]:
    d = Deployment(Engine.SGLANG, model, gpu="B200", tp=8, **values)  # type: ignore[arg-type]
    ledger = plan(d)
    (row,) = [i for i in ledger.inputs if i.name == "kv cache dtype"]
    return row.value, row.origin, ledger.kv_bytes_per_token


# DeepSeek-V3.1's MLA latent: 61 layers x (512 + 64) elements a token
LATENT = 61 * (512 + 64)


@pytest.mark.parametrize("version", [None, "0.5.3", "0.5.9", "0.5.23"])
def test_a_modelopt_fp8_kv_checkpoint_stores_fp8_under_auto(version: str | None) -> None:
    # nvidia/DeepSeek-V3.1-NVFP4 states {"quantization": {"kv_cache_quant_algo": "FP8"}}
    assert _sglang_row("deepseek-v3.1-nvfp4", engine_version=version) == (
        "fp8_e4m3",
        CHECKPOINT_RULE,
        LATENT,
    )


def test_the_checkpoint_rule_starts_in_v0_5_3_and_yields_to_the_flag() -> None:
    assert _sglang_row("deepseek-v3.1-nvfp4", engine_version="0.5.2")[::2] == (
        "bfloat16",
        2 * LATENT,
    )
    assert _sglang_row("deepseek-v3.1-nvfp4", kv_cache_dtype="bfloat16")[::2] == (
        "bfloat16",
        2 * LATENT,
    )


def test_an_nvfp4_kv_checkpoint_keeps_the_run_dtype(tmp_path: Path) -> None:
    # configure_kv_cache_dtype takes FP8 only: an NVFP4 KV format leaves `auto` the run dtype
    config: dict[str, Any] = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    config["quantization_config"] = {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4",
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert _kv_row(str(path))[::2] == ("bfloat16", LLAMA_CELL)
    config["quantization_config"]["kv_cache_quant_algo"] = "FP8"
    path.write_text(json.dumps(config))
    assert _kv_row(str(path)) == ("fp8_e4m3", CHECKPOINT_RULE, LLAMA_CELL // 2)
