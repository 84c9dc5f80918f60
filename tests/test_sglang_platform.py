"""SGLang's ROCm build sizes its default fraction by the CUDA rules less what it asks is_cuda()
for; its NPU build does too, after its own chunk and CUDA-graph batch tiers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine, Measured
from kvtier.engines.sglang.defaults import default_mem_fraction
from kvtier.engines.sglang.platform import npu_tiers
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.ledger.explain import explain_log
from kvtier.ledger.plan import plan
from kvtier.model.catalog import resolve_model
from kvtier.model.gpu import resolve_gpu


@pytest.mark.parametrize("gpu", ["MI300X", "MI325X", "MI355X", "AMD Instinct MI325X"])
def test_amd_cards_are_served_by_the_rocm_build(gpu: str) -> None:
    assert resolve_gpu(gpu).vendor == "AMD"
    assert resolve_gpu("H100").vendor == "NVIDIA"


def test_mi325x_is_its_nominal_256_gib() -> None:
    card = resolve_gpu("MI325X")
    assert (card.memory_mib, card.hbm_gbps, card.compute_capability) == (262_144, 6000, None)


def test_rocm_takes_the_cuda_fraction_rule_and_says_so() -> None:
    """v0.5.9 heuristics at 262,144 MiB, the >= 160 GiB tier (chunk 16,384, graph batch 512):
    512 + 1.5 x 16,384 + 2 x 512 + 1,024 / 8 = 26,240 MiB, round((262144 - 26240) / 262144, 3)
    = 0.9, what an NVIDIA card of that memory gets (no prefill graph reserve before v0.5.10)."""
    rocm = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="MI325X"))
    assert rocm.mem_fraction == 0.9
    (fraction,) = [i for i in rocm.inputs if i.name == "mem_fraction_static"]
    assert "round((262144 - 26240) / 262144, 3)" in fraction.origin
    (note,) = [n for n in rocm.notes if n.startswith("ROCm build (AMD MI325X)")]
    assert "without a prefill CUDA-graph reserve" in note
    pinned = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="MI325X", mem_fraction=0.9))
    assert not any(n.startswith("ROCm build") for n in pinned.notes)
    cuda = plan(Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="H200"))
    assert not any(n.startswith("ROCm build") for n in cuda.notes)


@pytest.mark.parametrize(
    ("version", "on_rocm", "on_cuda"),
    [
        ("0.4.7", 0.9062, 0.79),  # the 0.79 above 180,000 MiB is is_cuda() only
        ("0.5.13", 0.867, 0.864),  # piecewise graphs off on non-CUDA hardware: 592 MiB less
        ("0.5.23", 0.867, 0.864),  # default_prefill_backend: breakable on CUDA only
    ],
)
def test_rocm_differs_where_sglang_asks_is_cuda(
    version: str, on_rocm: float, on_cuda: float
) -> None:
    """Qwen3-8B on a 196,592 MiB card (MI300X), the fraction unset (oracle-checked with
    is_hip() True over every release)."""
    model, d = resolve_model("Qwen/Qwen3-8B"), Deployment(Engine.SGLANG, "Qwen/Qwen3-8B")
    assert default_mem_fraction(version, 196_592, d, model, rocm=True).value == pytest.approx(
        on_rocm, abs=5e-5
    )
    assert default_mem_fraction(version, 196_592, d, model).value == on_cuda
    mi300x = Deployment(Engine.SGLANG, "Qwen/Qwen3-8B", gpu="MI300X", engine_version=version)
    assert plan(mi300x).mem_fraction == pytest.approx(on_rocm, abs=5e-5)


def test_an_ascend_npu_fails_closed(capsys: pytest.CaptureFixture[str]) -> None:
    """NPU builds pick other chunk and graph-batch tiers per release; kvtier has no NPU card."""
    args = ["plan", "--engine", "sglang", "--model", "Qwen/Qwen3-8B", "--gpu", "Ascend 910B"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown GPU 'Ascend 910B'" in err[0]


@pytest.mark.parametrize(
    ("version", "mib", "tp", "tiers"),
    [
        ("0.5.3", 30 * 1024, 1, None),  # no NPU tier before v0.5.4
        ("0.5.4", 20 * 1024 - 1, 1, None),  # the T4 tier comes first
        ("0.5.4", 20 * 1024, 1, (32768, 16)),
        ("0.5.5", 32 * 1024 - 1, 4, (32768, 64)),
        ("0.5.5", 32 * 1024, 1, None),  # upper bounds out
        ("0.5.5", 60 * 1024, 4, (32768, 128)),
        ("0.5.5", 64 * 1024, 1, None),
        ("0.5.7", 16 * 1024, 1, (4096, 16)),
        ("0.5.9", 32 * 1024, 4, (4096, 64)),  # bounds in from v0.5.7
        ("0.5.9", 32 * 1024 + 1, 1, (8192, 64)),
        ("0.5.23", 64 * 1024, 8, (8192, 256)),
        ("0.5.23", 64 * 1024 + 1, 1, None),
    ],
)
def test_the_npu_tiers_per_release(
    version: str, mib: int, tp: int, tiers: tuple[int, int] | None
) -> None:
    """v0.5.4-v0.5.5 is_npu() tiers in _handle_gpu_memory_settings; v0.5.7-v0.5.23
    hardware_backend/npu/utils.py set_default_server_args (same values, bounds included)."""
    assert npu_tiers(mib, tp, Version.parse(version, "SGLang")) == tiers


@pytest.mark.parametrize(
    ("version", "card", "fraction"),
    [
        # (32,768 - 512 - 4,096 x 1.5 - 16 x 2 - 1/8 x 1,024) / 32,768 = 0.79199; CUDA: 0.885
        ("0.5.9", ["--gpu-mem-gib", "32"], 0.792),
        # 8,192 and 64 on 40,960 MiB: (40,960 - 13,056) / 40,960 = 0.68125; CUDA: 0.833
        ("0.5.9", ["--gpu", "A100-40GB"], 0.681),
        ("0.5.5", ["--gpu", "A100-40GB"], 0.833),  # no NPU tier at 35-60 GiB: the CUDA one
        ("0.5.23", ["--gpu", "H100"], 0.835),  # above 64 GiB the CUDA tiers decide
        # v0.4.7's get_device_memory_capacity has no npu branch: memory unknown, 0.88
        ("0.4.7", ["--gpu", "H100"], 0.88),
    ],
)
def test_the_npu_default_fraction(
    version: str, card: list[str], fraction: float, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--engine", "sglang", "--model", "Qwen/Qwen3-8B", "--device", "npu"]
    assert main([*args, *card, "--sglang-version", version, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mem_fraction"] == fraction
    assert any("NPU chunk and CUDA-graph batch tiers" in n for n in out["notes"])


def test_the_npu_build_fails_closed_where_unmodelled(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--engine", "sglang", "--model", "Qwen/Qwen3-8B", "--gpu", "H100"]
    assert main([*args, "--device", "npu", "--mem-fraction-static", "0.8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["page_size"] == 128  # the ascend backend's page when --page-size is unset
    assert any(n.startswith("Ascend NPU build") for n in out["notes"])
    dsa = [
        "plan",
        "--engine",
        "sglang",
        "--model",
        "deepseek-ai/DeepSeek-V3.2-Exp",
        "--gpu",
        "H100",
    ]
    assert main([*dsa, "--tp", "8", "--device", "npu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "serves a DSA model" in err[0]
    assert main([*args, "--device", "npu", "--sglang-version", "0.4.6"]) == 2
    assert "has no --device npu" in capsys.readouterr().err
    assert main([*args, "--device", "xpu"]) == 2
    assert "--device xpu is not modelled" in capsys.readouterr().err
    assert main([*args, "--device", "cuda"]) == 0


# An NPU start as SGLang prints it: the resolved device in server_args
NPU_LOG = "".join(
    f"{line}\n"
    for line in (
        "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, "
        "mem_fraction_static=0.8, device='npu', page_size=128)",
        "[2026-01-01 00:00:01 TP0] Load weight begin. avail mem=60.00 GB",
        "[2026-01-01 00:00:09 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=44.50 GB, mem usage=15.50 GB.",
        "[2026-01-01 00:00:10 TP0] KV Cache is allocated. #tokens: 236544, K size: 16.24 GB, "
        "V size: 16.24 GB",
        "[2026-01-01 00:00:10 TP0] Memory pool end. avail mem=12.00 GB",
    )
)


def test_an_npu_log_is_recomputed_at_its_printed_fraction() -> None:
    """profile_max_num_token has no NPU branch: (44.50 - 60.00 x 0.2) GiB / 147,456 B, down to the
    page of 128 the log prints = 236,544; without the fraction printed, the NPU default rule runs
    over a card estimated from the free memory before load, and its range holds the count."""
    rec = explain_log(NPU_LOG, {}).reconciliation
    assert rec.status == "match" and rec.predicted == 236_544
    assert rec.observed is not None and rec.observed.value == 236_544
    unstated = explain_log(NPU_LOG.replace("mem_fraction_static=0.8, ", ""), {}).reconciliation
    assert unstated.status == "match" and unstated.unchecked is None
    assert unstated.predicted_low is not None and unstated.predicted_high is not None
    assert unstated.predicted_low <= 236_544 <= unstated.predicted_high
    assert unstated.ledger is not None
    assert any("as torch_npu reports it" in n for n in unstated.ledger.notes)


def test_the_public_npu_log_is_a_count_without_a_recomputation() -> None:
    """sgl-project/sglang#29853 (Grok-2 on Ascend NPU, TP16): SGLang's own pool lines, so the
    grammar reads the count and the KV size; no card kvtier knows, so nothing recomputes it."""
    log = Path(__file__).parent / "fixtures" / "logs" / "public"
    text = (log / "sglang-2026-grok2-ascend-npu-tp16.log").read_text(encoding="utf-8")
    rec = explain_log(text, {}).reconciliation
    assert rec.status == "observed only" and rec.observed is not None
    assert rec.observed.value == 387_968
    # no 'Load weight' line, model or card: no range, and the flags explain takes, not plan's
    # --free-before-load-gib / --weights-gib (which explain refuses)
    assert rec.predicted_low == rec.predicted_high == 387_968
    assert rec.unchecked is not None and "neither a count nor a range" in rec.unchecked
    assert "--gpu or --gpu-mem-gib" in rec.unchecked and "--model" in rec.unchecked
    assert "--free-before-load-gib" not in rec.unchecked
    carded = explain_log(text, {}, Measured(gpu_mem_gib=64.0)).reconciliation
    assert carded.unchecked is not None and "--weights-gib" not in carded.unchecked
    assert "--gpu-mem-gib" not in carded.unchecked and "--model" in carded.unchecked
    with pytest.raises(KvtierError, match="unknown GPU 'Ascend 910B'"):
        resolve_gpu("Ascend 910B")
