"""vLLM's CPU offloading connector per release (engines/vllm/offloading.py): num_cpu_blocks in
v0.11.0 - v0.13.x, cpu_bytes_to_use (or --kv-offloading-size GiB) over a block's bytes from
v0.14.0, as CPUOffloadingSpec.__init__ counts them; a key or value the release does not take
exits 2 naming it."""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine
from kvtier.engines.ledger import HostPool
from kvtier.errors import KvtierError
from kvtier.ledger.plan import plan

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MLA = "deepseek-ai/DeepSeek-V2-Lite-Chat"
TEN_GIB = 10 * (1 << 30)


def _config(**extra: object) -> str:
    return json.dumps(
        {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        }
    )


def _pool(model: str, version: str | None, tp: int = 1, **values: object) -> HostPool:
    d = Deployment(Engine.VLLM, model, gpu="H100", tp=tp, engine_version=version, **values)  # type: ignore[arg-type]
    pool = plan(d).host_pool
    assert pool is not None
    return pool


def test_num_cpu_blocks_is_the_count_to_v0_13() -> None:
    """v0.11.0 - v0.13.x: the blocks as given; 1,000 of Llama-3.1-8B's 16-token blocks, 2 MiB
    each over its 32 layers at TP1."""
    pool = _pool(LLAMA, "0.11.0", kv_transfer_config=_config(num_cpu_blocks=1000))
    assert pool.tokens == 16_000 and pool.bytes_per_node == 1000 * 2 * (1 << 20)
    assert "num_cpu_blocks 1,000" in pool.source


def test_bytes_become_blocks_from_v0_14() -> None:
    """--kv-offloading-size 10 at TP2: cpu_bytes_to_use 10 x 2^30 // (1 MiB a GPU block on a
    rank x 2 ranks) = 5,120 blocks = 81,920 tokens; the same bytes in kv_transfer_config."""
    sized = _pool(LLAMA, "0.14.0", tp=2, kv_offloading_size_gib=10.0)
    given = _pool(LLAMA, "0.14.0", tp=2, kv_transfer_config=_config(cpu_bytes_to_use=TEN_GIB))
    assert sized.tokens == given.tokens == 81_920
    assert "--kv-offloading-size 10 GiB" in sized.source and "5,120 blocks" in given.source


@pytest.mark.parametrize(
    ("version", "tp", "tokens"),
    [
        # 27 layers x 16 tokens x 576 x 2 B = 497,664 B a block on a rank
        ("0.26.0", 1, 21_575 * 16),  # 10 GiB // 497,664
        ("0.27.0", 1, 21_487 * 16),  # // 499,712: rounded up to the 4,096-B page
        ("0.26.0", 2, 10_787 * 16),  # // (2 x 497,664): a copy a rank
        ("0.27.0", 2, 21_487 * 16),  # the replicated layout: one copy of the MLA latent
        ("0.33.0", 2, 21_487 * 16),
    ],
)
def test_alignment_and_the_replicated_mla_layout(version: str, tp: int, tokens: int) -> None:
    pool = _pool(MLA, version, tp=tp, kv_transfer_config=_config(cpu_bytes_to_use=TEN_GIB))
    assert pool.tokens == tokens


def test_the_size_flag_overrides_the_configs_bytes() -> None:
    """_post_init_kv_transfer_config updates kv_connector_extra_config with the flag's bytes."""
    both = _pool(
        LLAMA,
        "0.21.0",
        kv_offloading_size_gib=10.0,
        kv_transfer_config=_config(cpu_bytes_to_use=1 << 30, block_size=64),
    )
    assert both.tokens == TEN_GIB // (4 * (2 << 20)) * 64


@pytest.mark.parametrize(
    ("version", "values", "message"),
    [
        ("0.21.0", {"kv_transfer_config": _config(num_cpu_blocks=1000)},
         "needs kv_connector_extra_config cpu_bytes_to_use (v0.14.0 on) (num_cpu_blocks is not"),
        ("0.13.0", {"kv_transfer_config": _config(cpu_bytes_to_use=TEN_GIB)},
         "needs kv_connector_extra_config num_cpu_blocks (v0.11.0 - v0.13.x)"),
        ("0.10.2", {"kv_transfer_config": _config(num_cpu_blocks=10)}, "no OffloadingConnector"),
        ("0.11.0", {"kv_offloading_size_gib": 10.0}, "has no --kv-offloading-size"),
        ("0.13.0", {"kv_offloading_size_gib": 10.0, "kv_offloading_backend": "native"},
         "sets num_cpu_blocks 0"),
        ("0.21.0", {"kv_transfer_config": _config(cpu_bytes_to_use="lots")},
         "cpu_bytes_to_use must be a positive number, got 'lots'"),
        ("0.21.0", {"kv_transfer_config": _config(cpu_bytes_to_use=0)}, "positive number"),
        ("0.21.0", {"kv_transfer_config": _config(cpu_bytes_to_use=1e30)},
         "OffloadingConnector cpu_bytes_to_use 1e.30 B is more than 1e.07 GiB"),
        ("0.11.0", {"kv_transfer_config": _config(num_cpu_blocks=True)}, "positive number"),
        ("0.21.0", {"kv_transfer_config": _config(cpu_bytes_to_use=TEN_GIB, blocks_per_chunk=2)},
         "blocks_per_chunk is read from vLLM v0.26.0"),
        ("0.21.0", {"kv_offloading_size_gib": 0.0}, "--kv-offloading-size 0"),
    ],
)  # fmt: skip
def test_a_form_the_release_does_not_take_is_refused(
    version: str, values: dict[str, object], message: str
) -> None:
    d = Deployment(Engine.VLLM, LLAMA, gpu="H100", engine_version=version, **values)  # type: ignore[arg-type]
    with pytest.raises(KvtierError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan(d)


def test_the_size_alone_is_not_read_in_v0_12_and_v0_13() -> None:
    """_post_init_kv_transfer_config returns when kv_offloading_backend is None (its default
    before v0.14.0): no connector, no host pool."""
    d = Deployment(
        Engine.VLLM, LLAMA, gpu="H100", engine_version="0.12.0", kv_offloading_size_gib=10.0
    )
    assert plan(d).host_pool is None


def test_plan_exits_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    command = ["vllm", "serve", LLAMA, "--kv-transfer-config", _config(num_cpu_blocks=1000)]
    assert main(["plan", "--gpu", "H100", "--", *command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num_cpu_blocks is not read there" in err[0]
    assert main(["plan", "--gpu", "H100", "--vllm-version", "0.11.0", "--", *command]) == 0
    assert "16,000" in capsys.readouterr().out
