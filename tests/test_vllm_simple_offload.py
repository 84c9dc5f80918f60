"""vLLM's SimpleCPUOffloadConnector (v0.19.0 on): bytes a rank = cpu_bytes_to_use // world_size
(SimpleCPUOffloadConnector.__init__), blocks = max(1, num_gpu_blocks x bytes a rank // the GPU
pool's bytes) = max(1, bytes a rank // one GPU block's bytes on a rank)
(SimpleCPUOffloadScheduler._derive_cpu_config). Golden numbers by hand; one check against
vLLM's own _derive_cpu_config where its CPU build is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine, Hybrid
from kvtier.engines.ledger import HostPool
from kvtier.errors import KvtierError
from kvtier.ledger.plan import plan
from kvtier.units import GiB
from vllm_cpu_support import vllm_json

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # 32 layers, 8 KV heads of 128, bf16
MLA = "deepseek-ai/DeepSeek-V2-Lite-Chat"  # 27 layers, a 576-wide latent, bf16
# One 16-token GPU block of Llama-3.1-8B on one rank: 16 x 32 layers x 2 (K, V) x 8 heads x
# 128 x 2 B = 2 MiB at TP1, 1 MiB at TP2
LLAMA_BLOCK = 16 * 32 * 2 * 8 * 128 * 2
MLA_BLOCK = 16 * 27 * 576 * 2  # 497,664 B: the latent, one copy a rank


def _simple(**extra: object) -> str:
    return json.dumps(
        {
            "kv_connector": "SimpleCPUOffloadConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        }
    )


def _deployment(model: str, version: str, tp: int = 1, **values: object) -> Deployment:
    return Deployment(Engine.VLLM, model, gpu="H100", tp=tp, engine_version=version, **values)  # type: ignore[arg-type]


def _pool(model: str, version: str, tp: int = 1, **values: object) -> HostPool:
    pool = plan(_deployment(model, version, tp, **values)).host_pool
    assert pool is not None
    return pool


def test_the_size_flag_under_the_variable_is_split_over_the_ranks() -> None:
    """VLLM_USE_SIMPLE_KV_OFFLOAD=1 --kv-offloading-size 10 at TP2: 10 x 2^30 // 2 ranks =
    5,368,709,120 B a rank // 1 MiB = 5,120 blocks of 16 tokens, each rank pinning 5 GiB."""
    pool = _pool(LLAMA, "0.19.0", tp=2, kv_offloading_size_gib=10.0, simple_kv_offload=True)
    assert LLAMA_BLOCK // 2 == 1_048_576
    assert pool.tokens == 10 * GiB // 2 // (LLAMA_BLOCK // 2) * 16 == 81_920
    assert pool.bytes_per_rank == 5_120 * (1 << 20) and pool.bytes_per_node == 10 * GiB
    assert "SimpleCPUOffloadConnector _derive_cpu_config, vLLM 0.19.0" in pool.source
    assert "'SimpleCPUOffloadScheduler: Allocating 5120 CPU blocks (5.00 GB, mode=eager)'" in (
        pool.source
    )


@pytest.mark.parametrize(
    ("version", "tp", "blocks"),
    [
        # the native connector: 21,487 (page-aligned from v0.27.0, one MLA copy at TP2)
        ("0.27.0", 1, 21_575),  # 10 x 2^30 // 497,664: no alignment
        ("0.27.0", 2, 10_787),  # 5 x 2^30 // 497,664: every rank keeps its own copy
        ("0.33.0", 2, 10_787),
    ],
)
def test_no_alignment_and_no_replicated_layout(version: str, tp: int, blocks: int) -> None:
    config = _simple(cpu_bytes_to_use=10 * GiB)
    pool = _pool(MLA, version, tp=tp, kv_transfer_config=config)
    assert blocks == 10 * GiB // tp // MLA_BLOCK
    assert pool.tokens == blocks * 16 and pool.bytes_per_rank == blocks * MLA_BLOCK


def test_the_defaults_the_per_rank_override_and_the_least_block() -> None:
    """No cpu_bytes_to_use: DEFAULT_CPU_CAPACITY_BYTES 8 GiB; cpu_bytes_to_use_per_rank takes
    the place of the share; max(1, ...) keeps a block under a block's bytes."""
    assert (
        _pool(LLAMA, "0.21.0", kv_transfer_config=_simple()).tokens == 8 * GiB // LLAMA_BLOCK * 16
    )
    per_rank = _simple(cpu_bytes_to_use=10 * GiB, cpu_bytes_to_use_per_rank=GiB)
    pool = _pool(LLAMA, "0.21.0", tp=2, kv_transfer_config=per_rank)
    assert pool.tokens == 1_024 * 16 and "cpu_bytes_to_use_per_rank" in pool.source
    assert _pool(LLAMA, "0.21.0", kv_transfer_config=_simple(cpu_bytes_to_use=1000)).tokens == 16
    zero = _pool(LLAMA, "0.21.0", kv_offloading_size_gib=0.0, simple_kv_offload=True)
    assert zero.tokens == 16  # --kv-offloading-size 0 is read: cpu_bytes_to_use 0, one block


def test_num_cpu_blocks_is_read_from_v0_33() -> None:
    """v0.33.0 _derive_cpu_config: an explicit num_cpu_blocks between 1 and the blocks the
    bytes allow (5,120 at TP2); earlier releases do not read it."""
    size = {"kv_offloading_size_gib": 10.0, "simple_kv_offload": True}
    config = _simple(num_cpu_blocks=100)
    assert _pool(LLAMA, "0.33.0", tp=2, kv_transfer_config=config, **size).tokens == 1_600
    assert _pool(LLAMA, "0.32.0", tp=2, kv_transfer_config=config, **size).tokens == 81_920
    over = _deployment(LLAMA, "0.33.0", 2, kv_transfer_config=_simple(num_cpu_blocks=5_121), **size)
    with pytest.raises(KvtierError, match="between 1 and the 5,120 blocks"):
        plan(over)


def test_pipeline_stages_to_v0_32_count_stage_0s_blocks() -> None:
    """PP2: the scheduler's KVCacheConfig is rank 0's, Llama's first 16 layers (1 MiB a block
    at TP1); 10 GiB // 2 ranks // 1 MiB = 5,120 blocks. v0.33.0 takes the least over the
    stages' workers, which kvtier refuses."""
    size = {"kv_offloading_size_gib": 10.0, "simple_kv_offload": True}
    pool = _pool(LLAMA, "0.32.0", pp=2, **size)
    assert pool.tokens == 5_120 * 16
    with pytest.raises(KvtierError, match=r"PP 2 in vLLM 0\.33\.0"):
        plan(_deployment(LLAMA, "0.33.0", pp=2, **size))


@pytest.mark.parametrize(
    ("version", "values", "message"),
    [
        ("0.18.0", {"kv_transfer_config": _simple()}, "no SimpleCPUOffloadConnector"),
        ("0.28.0", {"kv_transfer_config": _simple(kv_offload_backend="disk")}, "on a disk"),
        ("0.28.0", {"kv_transfer_config": _simple(kv_offload_backend="nvme")}, "takes cpu, disk"),
        ("0.21.0", {"kv_transfer_config": _simple(cpu_bytes_to_use="ten")}, "whole number"),
        ("0.21.0", {"kv_transfer_config": _simple(cpu_bytes_to_use_per_rank=-1)}, "0 or more"),
        ("0.21.0", {"kv_transfer_config": _simple(cpu_bytes_to_use=1e30)},
         r"cpu_bytes_to_use 1e\+30 B is more than 1e\+07 GiB"),
        ("0.21.0", {"kv_transfer_config": _simple(cpu_bytes_to_use_per_rank=10**7 * 2**30 + 1)},
         r"cpu_bytes_to_use_per_rank 1.07e\+16 B is more than"),
    ],
)  # fmt: skip
def test_a_form_vllm_refuses_or_kvtier_does_not_size_exits_2(
    version: str, values: dict[str, object], message: str
) -> None:
    with pytest.raises(KvtierError, match=message):
        plan(_deployment(LLAMA, version, **values))


def test_the_disk_backend_key_is_not_read_before_v0_28() -> None:
    config = _simple(kv_offload_backend="disk", cpu_bytes_to_use=GiB)
    assert _pool(LLAMA, "0.27.0", kv_transfer_config=config).tokens == 512 * 16


def test_prefix_caching_off_sizes_no_pool_and_says_so() -> None:
    d = _deployment(
        LLAMA,
        "0.21.0",
        kv_offloading_size_gib=10.0,
        simple_kv_offload=True,
        hybrid=Hybrid(enable_prefix_caching=False),
    )
    ledger = plan(d)
    assert ledger.host_pool is None
    assert any("disabling CPU offload" in note for note in ledger.notes)


def test_the_variable_names_the_connector_from_v0_19(capsys: pytest.CaptureFixture[str]) -> None:
    command = f"VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve {LLAMA} --kv-offloading-size 10"
    assert main(["plan", "--gpu", "H100", "--json", "--", command]) == 0
    assert "SimpleCPUOffloadConnector" in capsys.readouterr().out
    old = ["plan", "--gpu", "H100", "--json", "--vllm-version", "0.18.0", "--", command]
    assert main(old) == 0
    out = capsys.readouterr().out
    assert "CPUOffloadingSpec" in out and "SimpleCPUOffloadConnector" not in out
    note = (
        "VLLM_USE_SIMPLE_KV_OFFLOAD=1: not read by vLLM 0.18.0 (from v0.19.0), which ignores it "
        "without a word, and so does kvtier; --kv-offloading-size sizes OffloadingConnector"
    )
    assert note in json.loads(out)["notes"]
    assert main(["plan", "--gpu", "H100", "--json", "--vllm-version", "0.19.0", "--", command]) == 0
    assert "VLLM_USE_SIMPLE_KV_OFFLOAD=1: not read" not in capsys.readouterr().out
    bad = f"VLLM_USE_SIMPLE_KV_OFFLOAD=yes vllm serve {LLAMA}"
    assert main(["plan", "--gpu", "H100", "--", bad]) == 2


def test_against_vllms_own_derive_cpu_config(tmp_path: Path) -> None:
    """vLLM's CPU build (v0.32.0): SimpleCPUOffloadScheduler._derive_cpu_config over a
    KVCacheConfig of Llama-3.1-8B at TP2 built from vLLM's own FullAttentionSpec: its page x 32
    layers is kvtier's block, and its count kvtier's at each size."""
    code = r"""
import json, sys, torch, vllm
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor)
from vllm.v1.simple_kv_offload.manager import SimpleCPUOffloadScheduler
spec = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=128, dtype=torch.bfloat16)
layers = [f"model.layers.{i}.self_attn.attn" for i in range(32)]
page, n = spec.page_size_bytes, 27_117
tensor = KVCacheTensor(size=n * page * 32, layers=layers, layer_stride=n * page,
                       block_stride=page)
gpu = KVCacheConfig(num_blocks=n, kv_cache_tensors=[tensor],
                    kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
counts = [SimpleCPUOffloadScheduler._derive_cpu_config(gpu, b).num_blocks
          for b in json.loads(sys.argv[1])]
print(json.dumps({"version": vllm.__version__, "block": page * 32, "counts": counts}))
"""
    per_rank = [10 * GiB // 2, GiB, 1000, 3 * GiB + 12345]
    got = vllm_json(code, per_rank, tmp_path)
    assert got["version"].startswith("0.32.0") and got["block"] == LLAMA_BLOCK // 2
    ours = [
        _pool(LLAMA, "0.32.0", tp=2, kv_transfer_config=_simple(cpu_bytes_to_use=2 * b)).tokens
        // 16
        for b in per_rank
    ]
    assert got["counts"] == ours == [5_120, 1_024, 1, 3_072]


def test_simulate_hits_the_host_pool_and_refuses_lazy_offload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Prompt A, another prompt B, then A again, with 5,200 device tokens: B evicts most of A
    from the GPU, and A's 312 full blocks are hit past the device prefix in the host pool
    (2 GiB // 2 MiB = 1,024 blocks, 16,384 tokens, holding both prompts)."""
    trace = tmp_path / "aba.jsonl"
    a, b = list(range(313)), list(range(1000, 1313))
    trace.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": 5000, "output_length": 1,
                        "hash_ids": ids, "block_tokens": 16}) + "\n"
            for t, ids in ((0, a), (1_000_000, b), (2_000_000, a))
        )
    )  # fmt: skip
    base = ["simulate", str(trace), "--gpu", "h100", "--device-tokens", "5200", "--json"]
    command = f"VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve {LLAMA} --kv-offloading-size 2"
    assert main([*base, "--", command]) == 0
    result = json.loads(capsys.readouterr().out)
    hits = result["hit_tokens_by_tier"]
    assert result["params"]["host_tokens"] == 2 * GiB // LLAMA_BLOCK * 16 == 16_384
    assert hits["host"] > 0 and hits["device"] + hits["host"] == 312 * 16
    lazy = f"vllm serve {LLAMA} --kv-transfer-config '{_simple(lazy_offload=True)}'"
    assert main([*base, "--", lazy]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lazy_offload" in err[0]
