"""Pasted launch commands: accepted forms parse to the same values; bad ones fail in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from founding_support import KIMI_LAUNCH
from kvtier.cli import main
from kvtier.engines.deployment import Engine
from kvtier.engines.launch import LMCACHE_SETTINGS, parse_launch
from kvtier.errors import KvtierError
from kvtier.sim.vllm_tiers import LMCACHE_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]

FOUNDING = {
    "model": "moonshotai/Kimi-K2.5",
    "tp": 8,
    "mem_fraction": 0.88,
    "speculative_algorithm": "EAGLE3",
}


@pytest.mark.parametrize(
    "command",
    [
        KIMI_LAUNCH,
        [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model_path=moonshotai/Kimi-K2.5",
            "--tp-size=8",
            "--mem_fraction_static",
            "0.88",
            "--speculative-algo",
            "eagle3",
        ],
        # an environment, a full interpreter path and a line continuation left in
        [
            "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7",
            "/opt/venv/bin/python",
            *KIMI_LAUNCH[1:5],
            "\\",
            *KIMI_LAUNCH[5:],
        ],
        [
            "python -m sglang.launch_server \\\n  --model-path moonshotai/Kimi-K2.5 \\\n"
            "  --tp 8 \\\n"
            "  --mem-fraction-static 0.88 --speculative-algorithm EAGLE3"
        ],
        ["sglang", "serve", *KIMI_LAUNCH[3:]],
    ],
)
def test_sglang_forms(command: list[str]) -> None:
    parsed = parse_launch(command)
    assert parsed.engine is Engine.SGLANG
    assert parsed.values == FOUNDING


@pytest.mark.parametrize(
    "command",
    [
        [
            "vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "--tensor-parallel-size",
            "2",
            "--gpu-memory-utilization",
            "0.95",
            "--max-model-len",
            "8192",
            "--block_size=32",
            "--kv-cache-dtype",
            "fp8",
        ],
        [
            "python",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "Qwen/Qwen3-8B",
            "-tp",
            "2",
            "--gpu_memory_utilization=0.95",
            "--max-model-len",
            "8192",
            "--block-size",
            "32",
            "--kv-cache-dtype",
            "fp8",
        ],
    ],
)
def test_vllm_forms(command: list[str]) -> None:
    parsed = parse_launch(command)
    assert parsed.engine is Engine.VLLM
    assert parsed.values == {
        "model": "Qwen/Qwen3-8B",
        "tp": 2,
        "mem_fraction": 0.95,
        "context_length": 8192,
        "page_size": 32,
        "kv_cache_dtype": "fp8",
    }


def test_boolean_switches_and_speculative_config() -> None:
    parsed = parse_launch(
        [
            "vllm",
            "serve",
            "m",
            "--enable-prefix-caching",
            "--speculative-config",
            '{"method": "eagle3", "model": "d", "num_speculative_tokens": 3}',
        ]
    )
    assert parsed.values["speculative_algorithm"] == "EAGLE3"
    assert parsed.values["draft_model"] == "d"
    s = parse_launch(
        [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "m",
            "--enable-hierarchical-cache",
            "--hicache-ratio",
            "4",
        ]
    )
    assert s.values["hicache.enable"] is True and s.values["hicache.ratio"] == 4.0


def test_vllm_no_spelling_turns_a_switch_off() -> None:
    """vLLM's EngineArgs booleans are BooleanOptionalAction: `--no-X` sets X False (it was read
    as a harmless flag and left prefix caching on); SGLang has no such spelling."""
    off = parse_launch(["vllm serve m --no-enable-prefix-caching --no-enable-chunked-prefill"])
    assert off.values == {
        "model": "m",
        "hybrid.enable_prefix_caching": False,
        "enable_chunked_prefill": False,
    }
    assert off.ignored == ()
    with pytest.raises(KvtierError, match="contradicts"):
        parse_launch(["vllm serve m --enable-prefix-caching --no-enable-prefix-caching"])
    s = parse_launch(["python -m sglang.launch_server --model-path m --no-enable-prefix-caching"])
    assert "hybrid.enable_prefix_caching" not in s.values


def test_unknown_flags_are_reported_known_harmless_ones_are_not() -> None:
    parsed = parse_launch(
        [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "m",
            "--port",
            "30000",
            "--tool-call-parser",
            "kimi_k2",
            "--enable-foo",
            "--bar",
            "3",
        ]
    )
    assert parsed.ignored == ("--enable-foo", "--bar")


@pytest.mark.parametrize(
    ("command", "unread"),
    [
        (
            "SGLANG_FOO=1 CUDA_VISIBLE_DEVICES=0 SGLANG_ENABLE_EMBED_REPLICATION=1 "
            "SGLANG_RETRACT_DECODE_STEPS=5 python -m sglang.launch_server --model-path m",
            ("SGLANG_FOO", "SGLANG_RETRACT_DECODE_STEPS"),
        ),
        (
            "VLLM_ATTENTION_BACKEND=FLASHINFER NCCL_DEBUG=INFO LMCACHE_FOO=1 LMCACHE_CHUNK_SIZE=8 "
            "VLLM_USE_SIMPLE_KV_OFFLOAD=0 HF_TOKEN=x vllm serve m --bar 3",
            ("VLLM_ATTENTION_BACKEND", "LMCACHE_FOO", "--bar"),
        ),
        ("SGLANG_FOO=1 SGLANG_FOO=1 vllm serve m", ("SGLANG_FOO",)),
        # the allocator's settings change what it reserves; the ledger does not model them
        (
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vllm serve m",
            ("PYTORCH_CUDA_ALLOC_CONF",),
        ),
        (
            "PYTORCH_ALLOC_CONF=backend:cudaMallocAsync PYTORCH_NO_CUDA_MEMORY_CACHING=0 "
            "python -m sglang.launch_server --model-path m",
            ("PYTORCH_ALLOC_CONF",),
        ),
    ],
)
def test_engine_variables_kvtier_does_not_read_are_reported(
    command: str, unread: tuple[str, ...]
) -> None:
    """An SGLANG_* / VLLM_* / LMCACHE_* assignment kvtier does not read, or PyTorch's allocator
    settings, is named with the flags it ignores (it was dropped without a word);
    CUDA_VISIBLE_DEVICES and the like are not."""
    assert parse_launch([command]).ignored == unread


def test_the_warning_names_the_unread_variable(capsys: pytest.CaptureFixture[str]) -> None:
    command = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 python -m sglang.launch_server"
    argv = ["plan", "--gpu", "h100", "--quiet", "--", *f"{command} --model-path m".split()]
    assert main([*argv[:-1], "meta-llama/Llama-3.1-8B-Instruct"]) == 0
    err = capsys.readouterr().err
    assert err == (
        "kvtier: warning: launch command flags and variables not modelled (ignored): "
        "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING\n"
    )


def test_the_warning_is_one_line_of_words_cut_at_60(capsys: pytest.CaptureFixture[str]) -> None:
    """An ignored word is the command's text: a newline in it is quoted, a long one cut."""
    long = "VLLM_" + "Z" * 2000
    launch = [f"{long}=1", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--x\ny"]
    assert main(["plan", "--gpu", "h100", "--quiet", "--", *launch]) == 0
    assert capsys.readouterr().err == (
        "kvtier: warning: launch command flags and variables not modelled (ignored): "
        f"{long[:60]} '--x\\ny'\n"
    )


def test_the_lmcache_settings_read_are_those_the_simulator_reads() -> None:
    source = (ROOT / "src" / "kvtier" / "sim" / "vllm_tiers.py").read_text()
    read = set(re.findall(r'settings(?:\[|\.get\(|, )"(\w+)"', source)) | set(LMCACHE_DEFAULTS)
    assert read == set(LMCACHE_SETTINGS)


@pytest.mark.parametrize(
    "command, message",
    [
        (["docker", "run", "img"], "not recognised"),
        (["python", "-m", "sglang.launch_server", "--tp", "8"], "names no model"),
        (["python -m sglang.launch_server --model-path 'unterminated"], "malformed"),
        (
            ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "eight"],
            "bad value",
        ),
        (
            ["python", "-m", "sglang.launch_server", "--model-path", "m", "--mem-fraction-static"],
            "needs a value",
        ),
    ],
)
def test_malformed_commands_fail_in_one_line(command: list[str], message: str) -> None:
    with pytest.raises(KvtierError, match=message) as info:
        parse_launch(command)
    assert "\n" not in str(info.value)
