"""vLLM's --quantization and --dtype on `kvtier plan`: online fp8 weights, the checkpoint check,
ModelOpt's KV format, and the model dtype by version and GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import error_line, run_json
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.quantization import LINEAR_GROUPS
from kvtier.engines.sglang import quantization as sglang_quantization
from kvtier.engines.vllm import pool as vllm
from kvtier.engines.vllm.quantization import loaded_model
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan
from kvtier.model.catalog import resolve_model
from kvtier.model.params import EMBEDDING, LM_HEAD, NORMS
from kvtier.model.quant import kv_cache_quant_algo
from kvtier.model.weights import weight_bytes
from kvtier.units import GiB

LOGS = Path(__file__).parent / "fixtures" / "logs"
CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def test_online_fp8_of_llama_3_3_70b_loads_what_its_fp8_checkpoint_loads() -> None:
    """vLLM 0.19 logged 'Model loading took 33.88 GiB' per GPU for the fp8-dynamic checkpoint of
    Llama-3.3-70B at TP2 (l11-vllm.log); online fp8 of the bf16 checkpoint quantizes the same
    Linear layers per tensor and keeps the embedding and lm_head: 33.87 GiB."""
    e = explain_log((LOGS / "l11-vllm.log").read_text(encoding="utf-8"), {})
    measured = e.deployment.measured.weights_gib
    assert measured == 33.88
    online, note = loaded_model(resolve_model("meta-llama/Llama-3.3-70B-Instruct"), "fp8")
    assert note is not None and "per tensor" in note
    assert abs(weight_bytes(online, 2).total_gib - measured) < 0.02


def test_online_fp8_quantizes_linear_and_moe_groups_only() -> None:
    model = resolve_model("deepseek-ai/DeepSeek-V2-Lite-Chat")
    online, _ = loaded_model(model, "fp8_per_tensor")
    assert online.quantization is not None and online.quantization.bytes_per_param == 1
    flags = {g.name: g.quantized for g in online.params}
    assert all(flags[g] for g in LINEAR_GROUPS if g in flags)
    assert not flags[EMBEDDING] and not flags[LM_HEAD] and not flags[NORMS]
    assert weight_bytes(online, 1).total_bytes < weight_bytes(model, 1).total_bytes


def _llama(**kw: object) -> Deployment:
    base: dict = {
        "engine": Engine.VLLM,
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "gpu": "H100",
        "tp": 2,
        "context_length": 8192,
        "engine_version": "0.19.0",
    }
    return Deployment(**{**base, **kw})


def test_online_fp8_plans_as_many_tokens_as_the_fp8_checkpoint() -> None:
    online = plan(_llama(quantization="fp8"))
    checkpoint = plan(_llama(model="RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic"))
    assert abs(online.kv_tokens - checkpoint.kv_tokens) / checkpoint.kv_tokens < 0.001
    assert online.kv_tokens > 2 * plan(_llama()).kv_tokens  # bf16 leaves ~14 GiB for KV


@pytest.mark.parametrize(
    ("model", "flag", "accepted"),
    [
        ("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", "fp8", True),
        ("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", "compressed-tensors", True),
        ("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", "awq", False),
        ("meta-llama/Llama-3.3-70B-Instruct", "awq_marlin", False),
    ],
)
def test_quantization_flag_must_fit_the_checkpoint(model: str, flag: str, accepted: bool) -> None:
    """ModelConfig._verify_quantization: a quantized checkpoint loads under its own method (or
    an override of it); kvtier models no online method but fp8."""
    spec = resolve_model(model)
    if accepted:
        assert loaded_model(spec, flag)[0] is spec
    else:
        with pytest.raises(KvtierError, match=r"does not match|not modelled"):
            loaded_model(spec, flag)


def test_modelopt_kv_cache_quant_algo_turns_auto_kv_into_fp8(tmp_path: Path) -> None:
    """A ModelOpt checkpoint stating kv_cache_quant_algo FP8 (as nvidia's FP8 / NVFP4 exports
    do): vLLM >= 0.19 resolves --kv-cache-dtype auto to fp8_e4m3
    (resolve_kv_cache_dtype_string), halving a bf16 page; an explicit dtype wins."""
    assert kv_cache_quant_algo({"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}) == "fp8"
    assert kv_cache_quant_algo({"quantization": {"kv_cache_quant_algo": "FP8"}}) == "fp8"
    scheme = {"type": "float", "num_bits": 8, "dynamic": False}
    assert kv_cache_quant_algo({"quant_method": "modelopt", "kv_cache_scheme": scheme}) == "fp8"
    assert kv_cache_quant_algo({"quant_method": "fp8", "kv_cache_quant_algo": "FP8"}) is None
    config = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    config["quantization_config"] = {
        "quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))

    def per_token(version: str, kv: str = "auto") -> int:
        d = Deployment(Engine.VLLM, str(path), gpu="H100", context_length=8192,
                       engine_version=version, kv_cache_dtype=kv)  # fmt: skip
        return plan(d).kv_bytes_per_token

    assert per_token("0.19.0") == 32 * 8 * 256  # fp8_e4m3: one byte an element
    assert per_token("0.19.0", "bfloat16") == 32 * 8 * 256 * 2
    assert per_token("0.18.0") == 32 * 8 * 256 * 2  # before the rule: auto is the model dtype

    def kv_rows(version: str) -> list[tuple[str, str]]:
        d = Deployment(Engine.VLLM, str(path), gpu="H100", context_length=8192,
                       engine_version=version)  # fmt: skip
        return [(i.value, i.origin) for i in plan(d).inputs if "kv" in i.name and "dtype" in i.name]

    # one row, stating the dtype the pool was sized in and the rule that chose it
    assert kv_rows("0.19.0") == [
        (
            "fp8_e4m3",
            "auto -> fp8_e4m3: the checkpoint's kv_cache_quant_algo fp8 "
            "(resolve_kv_cache_dtype_string, vLLM v0.19+)",
        )
    ]
    assert kv_rows("0.18.0") == [("bfloat16", "default")]
    config["quantization_config"]["kv_cache_quant_algo"] = "NVFP4"
    path.write_text(json.dumps(config))
    with pytest.raises(KvtierError, match="nvfp4"):
        per_token("0.21.0")


def test_v0_dtype_rule() -> None:
    """v0.6 _get_and_verify_dtype: a float32 config runs in float16 on any GPU (gemma2:
    bfloat16); bfloat16 is refused below compute capability 8.0."""
    assert vllm.model_dtype_v0("auto", "float32", None, (8, 0)) == "float16"
    assert vllm.model_dtype_v0("auto", "float32", "gemma2", (9, 0)) == "bfloat16"
    assert vllm.model_dtype_v0("auto", "bfloat16", None, (9, 0)) == "bfloat16"
    assert vllm.model_dtype_v0("float", "bfloat16", None, (9, 0)) == "float32"
    with pytest.raises(KvtierError, match=r"compute capability of at least 8\.0"):
        vllm.model_dtype_v0("auto", "float32", "gemma2", (7, 5))
    with pytest.raises(KvtierError, match="Unknown dtype"):
        vllm.model_dtype_v0("int8", "bfloat16", None, (9, 0))


def _dtype_input(ledger_json: dict) -> str:
    return next(i["value"] for i in ledger_json["inputs"] if i["name"] == "model dtype")


@pytest.mark.parametrize(("version", "dtype"), [("0.6.6", "float16"), ("0.19.0", "bfloat16")])
def test_float32_config_runs_by_era(
    version: str, dtype: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A float32 Llama config on an A100 (compute capability 8.0): V0 takes float16, V1
    bfloat16; the KV page is 2 bytes an element either way, 4 with --dtype float32."""
    config = json.loads((CONFIGS / "llama-3.1-8b.json").read_text())
    config["torch_dtype"] = "float32"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    argv = ["plan", "--engine", "vllm", "--model", str(path), "--gpu", "A100 80GB",
            "--max-model-len", "8192", "--vllm-version", version, "--json"]  # fmt: skip
    auto = run_json(capsys, argv)
    assert _dtype_input(auto) == dtype
    wide = run_json(capsys, [*argv, "--dtype", "float32"])
    assert _dtype_input(wide) == "float32"
    assert wide["kv_bytes_per_token"] == 2 * auto["kv_bytes_per_token"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--dtype", "fp9"], "argument --dtype: invalid choice: 'fp9'"),
        (["--quantization", "int3"], "--quantization 'int3' is not a vLLM quantization method"),
        (["--quantization", "bitsandbytes"], "not modelled"),
        (["--engine", "sglang", "--quantization", "fp8_per_tensor"], "not a SGLang quantization"),
    ],
)
def test_bad_values_exit_2_with_one_line(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = [] if "--engine" in flags else ["--engine", "vllm"]
    argv = ["plan", *engine, "--model", "llama-3.1-8b", "--gpu", "h100", *flags]
    assert says in error_line(capsys, argv)


def test_launch_command_quantization_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    launch = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--quantization", "fp8"]
    argv = ["plan", "--gpu", "h100", "--max-model-len", "8192", "--json", "--", *launch]
    out = run_json(capsys, argv)
    weights = next(i for i in out["ledger"] if i["item"] == "weights")
    assert "--quantization fp8" in weights["source"]
    assert weights["gib"] < 9 * GiB / GiB  # 8.49 GiB: 6.5 GiB of bf16 Linear weights halved


def test_sglang_online_fp8_is_the_same_rule() -> None:
    """SGLang loads `--quantization fp8` on an unquantized checkpoint with Fp8Config(): Linear
    and fused-MoE layers per tensor, as vLLM does; its checkpoint names are its own."""
    model = resolve_model("meta-llama/Llama-3.3-70B-Instruct")
    online, _ = sglang_quantization.loaded_model(model, "fp8")
    assert online == loaded_model(model, "fp8")[0]
    fp8 = resolve_model("RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic")
    assert sglang_quantization.loaded_model(fp8, "w8a8_fp8")[0] is fp8
    with pytest.raises(KvtierError, match="not a vLLM quantization method"):
        loaded_model(fp8, "w8a8_fp8")


def test_sglang_plan_takes_online_fp8(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--engine", "sglang", "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]
    bf16 = run_json(capsys, argv)
    fp8 = run_json(capsys, [*argv, "--quantization", "fp8"])
    assert fp8["kv_tokens"] > bf16["kv_tokens"]
    weights = next(i for i in fp8["ledger"] if i["item"] == "weights")
    assert "--quantization fp8" in weights["source"]


def test_explain_resolves_an_unprinted_auto_kv_dtype_as_plan_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vLLM 0.21 log of a ModelOpt NVFP4 checkpoint whose config states FP8 KV and whose lines
    print no KV dtype: `auto` is fp8 for explain as for plan (35,136 B/token at TP8, not the
    bfloat16 model dtype's 70,272), so the logged count is reproduced, not halved."""
    log = tmp_path / "nvfp4.log"
    log.write_text(
        "INFO 01-05 10:00:00 [api_server.py:1] vLLM API server version 0.21.0\n"
        "INFO 01-05 10:00:00 [utils.py:1] non-default args: {'model': "
        "'nvidia/DeepSeek-V3.1-NVFP4', 'tensor_parallel_size': 8, 'max_model_len': 8192, "
        "'gpu_memory_utilization': 0.9}\n"
        "(Worker_TP0 pid=1) INFO 01-05 10:00:05 [gpu_worker.py:1] Available KV cache memory: "
        "100.00 GiB\n"
        "(EngineCore_DP0 pid=1) INFO 01-05 10:00:05 [kv_cache_utils.py:1] GPU KV cache size: "
        "3,055,808 tokens\n",
        encoding="utf-8",
    )
    out = run_json(capsys, ["explain", str(log), "--gpu", "B200", "--json"])
    deployment = ["--model", "nvidia/DeepSeek-V3.1-NVFP4", "--gpu", "B200", "--tp", "8"]
    planned = run_json(
        capsys,
        ["plan", "--engine", "vllm", *deployment, "--vllm-version", "0.21.0", "--json"],
    )
    assert out["kv_bytes_per_token"] == planned["kv_bytes_per_token"] == 35_136
    row = next(i for i in out["inputs"] if i["name"] == "kv cache dtype")
    assert row["value"] == "fp8_e4m3" and "kv_cache_quant_algo" in row["source"]["text"]
    assert out["verdict"] == "match"
