"""The simulator's scheduling limits are the ledger's: plan and simulate agree on one rule."""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main
from kvtier.engines.deployment import Deployment, Engine, HiCache, Hybrid
from kvtier.ledger.plan import build_ledger, resolve
from kvtier.sim.setup import build_config


def _both(**values: object) -> tuple[int, int, int]:
    """(plan's max running requests, simulate's, the ledger's KV tokens) for one deployment."""
    d = Deployment(Engine.SGLANG, **values)  # type: ignore[arg-type]
    ledger = build_ledger(resolve(d))
    config = build_config(d, 512)
    assert config.device_tokens == ledger.kv_tokens
    assert config.page_size == ledger.page_size
    assert config.chunked_prefill_size == ledger.figures.chunked_prefill_size
    assert ledger.max_running_requests is not None
    return ledger.max_running_requests, config.max_running_requests, ledger.kv_tokens


# Qwen3.5-27B on one H100 (v0.5.9 rules unless given): 32 state slots from the ratio split
# (int(rest x 0.9 / 1.9 // state bytes)); three a request with the radix cache, five with
# extra_buffer (v0.5.14, the auto strategy for Qwen3.5), one without the radix cache.
@pytest.mark.parametrize(
    ("values", "limit"),
    [
        ({}, 32 // 3),
        ({"engine_version": "0.5.14"}, 32 // 5),
        ({"hybrid": Hybrid(disable_radix_cache=True)}, 32 // 1),
    ],
)
def test_a_hybrid_model_runs_as_many_requests_as_its_state_slots_allow(
    values: dict[str, object], limit: int
) -> None:
    plan, simulate, tokens = _both(model="qwen3.5-27b", gpu="H100", **values)
    assert plan == simulate == limit
    assert tokens // 2 > limit  # the slots, not the pool, hold it back


def test_a_plain_model_runs_the_request_rows_and_a_draft_its_default_of_48() -> None:
    # Llama-3.1-8B on an H100: clamp(tokens / 131072 x 512, 2048, 4096) rows, below tokens // 2
    plan, simulate, tokens = _both(model="llama-3.1-8b", gpu="H100")
    assert plan == simulate == min(max(int(tokens / 131_072 * 512), 2048), 4096) == 2048
    # EAGLE3 without --max-running-requests: server_args sets 48
    plan, simulate, _ = _both(
        model="kimi-k2.5",
        gpu="RTX PRO 6000",
        tp=8,
        mem_fraction=0.88,
        speculative_algorithm="EAGLE3",
    )
    assert plan == simulate == 48


def test_plain_dp_does_not_divide_the_flag() -> None:
    # ModelRunner.dp_size is the DP size only under --enable-dp-attention; each replica runs 64
    plan, simulate, _ = _both(model="llama-3.1-8b", gpu="H100", dp=2, max_running_requests=64)
    assert plan == simulate == 64


def test_given_device_tokens_keep_the_ledger_rule_and_its_slot_cap() -> None:
    plain = Deployment(Engine.SGLANG, "llama-3.1-8b", gpu="H100")
    assert build_config(plain, 512, device_tokens=1_000).max_running_requests == 1_000 // 2
    hybrid = Deployment(Engine.SGLANG, "qwen3.5-27b", gpu="H100")
    config = build_config(hybrid, 512, device_tokens=1_000_000)
    assert config.max_running_requests == 32 // 3
    assert "state slots allow 10" in dict(config.sources)["max running requests"]


def test_plan_json_and_simulate_state_the_same_limit(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--engine", "sglang", "--model", "qwen3.5-27b", "--gpu", "H100"]
    assert main(["plan", *argv, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["max_running_requests"]
    assert main(["simulate", "--generate", "chat", "--requests", "20", *argv]) == 0
    out = capsys.readouterr().out
    assert f"source: max running requests: {planned} from the ledger" in out
    assert planned == 10


LAUNCH = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "meta-llama/Llama-3.1-8B-Instruct",
]
# SGLang's multi-turn benchmark against a small device pool: later turns find their history in
# the host tier and the L3 store
TIMED = ["simulate", "--generate", "multiturn", "--clients", "16", "--rounds", "6"]
TIMED += ["--request-tokens", "2048", "--output-tokens", "64", "--round-barrier"]
TIMED += ["--block-tokens", "64", "--seed", "1", "--gpu", "h100", "--device-tokens", "30000"]
STORE = ["--store-tokens", "10000000", "--store-gbps", "0.2", "--json"]


def _simulate(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, object], str]:
    assert main(argv) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_pasted_hicache_policies_run_as_kvtier_s_own_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    policies = ["--hicache-write-policy", "write_back"]
    policies += ["--hicache-storage-prefetch-policy", "wait_complete"]
    pasted, err = _simulate(
        [*TIMED, *STORE, "--", *LAUNCH, "--hicache-ratio", "2", *policies], capsys
    )
    assert "ignored" not in err
    own, _ = _simulate([*TIMED, *STORE, *policies, "--", *LAUNCH, "--hicache-ratio", "2"], capsys)
    default, _ = _simulate([*TIMED, *STORE, "--", *LAUNCH, "--hicache-ratio", "2"], capsys)
    params = pasted["params"]
    assert isinstance(params, dict)
    assert params["write_policy"] == "write_back"
    assert params["prefetches"]["policy"] == "wait_complete"
    assert params["sources"]["write policy"] == "write_back (launch command)"
    assert default["params"]["write_policy"] == "write_through"  # type: ignore[index]
    assert default["params"]["prefetches"]["policy"] == "best_effort"  # type: ignore[index]
    assert pasted["hit_tokens_by_tier"] != default["hit_tokens_by_tier"]  # the policy matters
    for name in ("hit_rate", "hit_tokens_by_tier", "ttft_s", "evictions", "prefetches"):
        mine = own[name] if name in own else own["params"][name]  # type: ignore[index]
        theirs = pasted[name] if name in pasted else params[name]
        assert mine == theirs, name


@pytest.mark.parametrize(
    ("kvtier_flag", "pasted_flag", "message"),
    [
        (
            ["--hicache-write-policy", "write_through"],
            ["--hicache-write-policy", "write_back"],
            "kvtier's --hicache-write-policy write_through contradicts the launch command's "
            "--hicache-write-policy write_back",
        ),
        (
            ["--store-tokens", "1000", "--hicache-storage-prefetch-policy", "timeout"],
            ["--hicache_storage_prefetch_policy=best_effort"],
            "kvtier's --hicache-storage-prefetch-policy timeout contradicts the launch command's "
            "--hicache-storage-prefetch-policy best_effort",
        ),
        (
            [],
            ["--hicache-storage-prefetch-policy", "timeout"],
            "--hicache-storage-prefetch-policy timeout (launch command) applies to an L3 store",
        ),
        (
            [],
            ["--hicache-write-policy", "write_around"],
            "--hicache-write-policy: bad value 'write_around' (takes one of write_back, "
            "write_through, write_through_selective)",
        ),
    ],
)
def test_policy_conflicts_exit_2_naming_both(
    kvtier_flag: list[str],
    pasted_flag: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*TIMED, *kvtier_flag, "--", *LAUNCH, "--hicache-ratio", "2", *pasted_flag]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_host_tier_is_sized_in_the_ledger_s_kv_dtype() -> None:
    # DeepSeek-V3.2 on B200s: `auto` is fp8_e4m3 for a DSA model from compute capability 10.0,
    # 43,188 B a token on the host (HostKVCache.get_size_per_token); 100 GB per rank, page 64
    d = Deployment(
        Engine.SGLANG,
        "deepseek-v3.2",
        gpu="B200",
        tp=8,
        hicache=HiCache(enable=True, size_gb=100.0),
    )
    ledger = build_ledger(resolve(d))
    assert ledger.host_pool is not None
    tokens = (int(100e9 // 43_188) // 64 + 1) * 64
    assert build_config(d, 512).host_tokens == ledger.host_pool.tokens == tokens == 2_315_520


@pytest.mark.parametrize(
    ("engine", "given", "read"),
    [
        (Engine.SGLANG, "0.3.0", "SGLang v0.5.23"),
        (Engine.SGLANG, "0.5.9", "SGLang v0.5.23"),
        (Engine.VLLM, "0.20.0", "vLLM v0.32.0"),
    ],
)
def test_an_older_stated_release_is_noted_as_the_scheduler_model_s(
    engine: Engine, given: str, read: str
) -> None:
    """The scheduler model (sim/servers) was read in one release; a deployment stating an
    older one runs it all the same, in one note; the release read in, a later one, or none
    stated gives no note."""
    d = Deployment(engine, "llama-3.1-8b", gpu="H100", engine_version=given)
    notes = build_config(d, 512).notes()
    assert [n for n in notes if "scheduler model" in n] == [
        f"the scheduler model follows {read}, the release it was read in; the deployment "
        f"states {read.split()[0]} {given}, an older one (the KV pool and tiers follow "
        f"{given}'s rules)"
    ]
    for version in (read.split()[1][1:], "main", None):
        same = Deployment(engine, "llama-3.1-8b", gpu="H100", engine_version=version)
        assert not any("scheduler model" in n for n in build_config(same, 512).notes())


def test_simulate_json_carries_the_older_release_note(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--generate", "chat", "--requests", "20", "--engine", "vllm"]
    argv += ["--vllm-version", "0.20.0", "--model", "llama-3.1-8b", "--gpu", "H100", "--json"]
    assert main(argv) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("the scheduler model follows vLLM v0.32.0") for n in notes)
