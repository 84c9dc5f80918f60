"""Each input hostile testing found, refused as one line with exit 2 (or answered right)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_support import cli_json, error_line, with_flags
from kvtier.cli import main

ROOT = Path(__file__).resolve().parents[1]
LOG = str(ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log")
KIMI = ["--engine", "sglang", "--model", "kimi-k2.5", "--gpu", "RTX PRO 6000", "--tp", "8"]
LLAMA = ["--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100"]
VLLM = ["plan", "--gpu", "h100", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
H200 = ["plan", "--gpu", "h200", "--"]
SGLANG = [*H200, "python", "-m", "sglang.launch_server"]
DSV3 = [*SGLANG, "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8", "--enable-dp-attention"]
EMBED = "SGLANG_ENABLE_EMBED_REPLICATION="
EAGLE3 = [*SGLANG, "--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "EAGLE3"]
LMCACHE = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'
LMCACHE_SIM = ["simulate", "{trace}", "--gpu", "h100", "--", "vllm", "serve", "Qwen/Qwen3-8B"]
LMCACHE_SIM += ["--kv-transfer-config", LMCACHE]
SHARED = ["simulate", "--generate", "shared-prefix", "--groups"]
ADVISE = ["advise", "--engine", "sglang", "--model", "qwen3-8b", "--gpu", "h100"]
FLEET = ["simulate", "{trace}", *KIMI, "--replicas", "2"]
LINE = '{"timestamp": %s, "input_length": %s, "output_length": 1, "hash_ids": [1]}'


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hostile")
    trace = root / "t.jsonl"
    assert main(["simulate", "--generate", "chat", "--requests", "10", "-o", str(trace)]) == 0
    files = {"trace": str(trace), "dir": str(root), "fifo": str(root / "fifo")}
    os.mkfifo(files["fifo"])
    for name, text in {
        "ts400": LINE % ("1e400", "10"),
        "len400": LINE % ("1", "1e400"),
        "ts308": LINE % ("1e308", "10"),
        "deep": "[" * 100_000 + "]" * 100_000,
    }.items():
        (root / f"{name}.jsonl").write_text(text + "\n")
        files[name] = str(root / f"{name}.jsonl")
    return files


CASES = [
    (["explain", LOG, "--host-ram-gb", "inf"], "argument --host-ram-gb"),
    (["plan", *LLAMA, "--gpu-mem-gib", "nan"], "argument --gpu-mem-gib"),
    (["plan", *LLAMA, "--weights-gib", "-5"], "argument --weights-gib"),
    (["plan", *LLAMA, "--context", "inf"], "argument --context"),
    (["plan", *LLAMA, "--mem-fraction-static", "nan"], "argument --mem-fraction-static"),
    (["advise", *KIMI, "--node-host-gbps", "0"], "argument --node-host-gbps"),
    (["advise", *KIMI, "--pcie-gbps", "-1"], "argument --pcie-gbps"),
    (["simulate", "{trace}", *KIMI, "--hbm-gbps", "inf"], "argument --hbm-gbps"),
    (["simulate", "{trace}", *KIMI, "--bf16-tflops", "nan"], "argument --bf16-tflops"),
    (["simulate", "{ts400}", "--unbounded"], "`timestamp`"),
    (["simulate", "{len400}", "--unbounded"], "`input_length`"),
    (["simulate", "{ts308}", *KIMI], "`timestamp`"),
    (["simulate", "{deep}", "--unbounded"], "deep.jsonl:1"),
    (["simulate", "--generate", "chat", "-o", "/nonexistent/x.jsonl"], "cannot write"),
    (["simulate", "--generate", "chat", "-o", "{dir}"], "a directory"),
    (["simulate", "--generate", "chat", "-o", "/dev/full"], "cannot write /dev/full"),
    (["simulate", "--generate", "chat", "--rate", "1e-308"], "argument --rate"),
    (["simulate", "--generate", "chat", "--requests", "1" + "0" * 20], "argument --requests"),
    ([*VLLM, "--speculative-config", '"abc"'], "must be a JSON object"),
    ([*VLLM, "--speculative-config", "[1]"], "must be a JSON object"),
    ([*VLLM, "--speculative-config", '{"num_speculative_tokens": 1e400}'], "num_speculative"),
    ([*VLLM, "--speculative-config", '{"num_speculative_tokens": -5}'], "num_speculative"),
    ([*VLLM, "--speculative-config", '{"method": [1]}'], "`method`"),
    ([*VLLM, "--speculative-config", '{"model": ' + "[" * 99_999 + "]" * 99_999 + "}"], "JSON"),
    ([*VLLM, "--max-model-len", "8192", "--max-model-len", "4096"], "contradicts"),
    (["plan", *LLAMA, "--kv-cache-memory-bytes", "99999999999999999999"], "--kv-cache-memory"),
    (["plan", *LLAMA, "--kv-cache-memory-bytes", str(1 << 40)], "more than the card's"),
    (["plan", *LLAMA, "--gpu-memory-utilization", "0.8", "--mem-fraction-static", "0.9"], "0.9"),
    (["plan", *LLAMA, "--max-model-len", "4096", "--context-length", "8192"], "contradicts"),
    (["plan", *LLAMA, "--block-size", "16", "--page-size", "32"], "contradicts"),
    (["explain", "{fifo}"], "not a regular file"),
    (["simulate", "{fifo}", "--unbounded"], "not a regular file"),
    (["plan", *with_flags(LLAMA, "--model", "{fifo}")], "not a regular file"),
    (["report", "-o", "{dir}/r.html", "--from", "plan={fifo}"], "not a regular file"),
    (["report", "{trace}", "-o", "{trace}"], "the same file as the input"),
    # DP attention splits tp over dp ranks: a traceback at dp > tp, tp // dp at dp 3
    ([*DSV3, "--dp", "16", "--enable-dp-lm-head"], "--tp 8 is not a multiple of --dp 16"),
    ([*DSV3, "--dp", "3"], "--tp 8 is not a multiple of --dp 3"),
    # a traceback in simulate at -1, SGLang's default at 0
    ([*EAGLE3, "--speculative-num-steps", "-1"], "--speculative-num-steps must be from 1"),
    ([*EAGLE3, "--speculative-num-steps", "0"], "--speculative-num-steps must be from 1"),
    ([*EAGLE3, "--speculative-eagle-topk", "0"], "--speculative-eagle-topk must be from 1"),
    ([*EAGLE3, "--speculative-eagle-topk", "1" + "0" * 20], "--speculative-eagle-topk must"),
    # --enable-dp-lm-head without DP attention: SGLang asserts; kvtier sized the head at TP
    ([*DSV3[:-1], "--dp", "2", "--enable-dp-lm-head"], "needs --enable-dp-attention"),
    # a switch's value: anything but true/false was read as true
    ([*DSV3, "--dp", "2", "--enable-dp-lm-head=maybe"], "--enable-dp-lm-head: bad value 'maybe'"),
    ([*DSV3, "--dp", "2", "--enable-dp-lm-head="], "--enable-dp-lm-head: bad value ''"),
    # what SGLang's EnvBool cannot read (it warns and keeps false) was read as false in silence
    ([*H200, EMBED + "maybe", *DSV3[4:], "--dp", "2"], "EMBED_REPLICATION='maybe'"),
    ([*H200, EMBED + "", *DSV3[4:], "--dp", "2"], "EMBED_REPLICATION=''"),
    ([*H200, EMBED + "1e3", *DSV3[4:], "--dp", "2"], "EMBED_REPLICATION='1e3'"),
    ([*H200, EMBED + "\u0661", *DSV3[4:], "--dp", "2"], "EMBED_REPLICATION='\u0661'"),
    # a variable set twice: the shell keeps the last; kvtier kept the last in silence
    ([*H200, EMBED + "1", EMBED + "0", *DSV3[4:], "--dp", "2"], "=0 contradicts"),
    # not a shell assignment: read as one
    ([*H200, "=1", *DSV3[4:]], "launch command not recognised (starts with '=1"),
    # an empty value read as none given: no sweep, the default router
    (["simulate", "{trace}", *KIMI, "--sweep", ""], "--sweep is given an empty value"),
    ([*FLEET, "--router", " "], "--router is given an empty value"),
    # an option given twice kept its last value
    (
        [*FLEET, "--router-opt", "cache-threshold=0.5", "--router-opt", "cache-threshold=0.9"],
        "--router-opt cache-threshold is given twice",
    ),
    # sweep points: an infinite bandwidth simulated, a point run twice, no cap on their number
    (["simulate", "{trace}", *KIMI, "--sweep", "pcie-gbps=inf"], "'inf' is not finite"),
    ([*FLEET, "--sweep", "replicas=2,2"], "--sweep replicas: '2' is given twice"),
    ([*FLEET, "--sweep", "replicas=" + ",".join(map(str, range(2, 67)))], "65 values, more than"),
    # 10^7 prompts of 10^8 tokens: MemoryError building their block ids
    (
        [
            "simulate",
            "--generate",
            "random",
            "--input-tokens",
            "100000000",
            "--requests",
            "10000000",
            *KIMI,
        ],
        "more than the 16,777,216 a generated trace holds",
    ),
    # 1,000 prompts of 2^27 tokens: MemoryError building their block ids
    (
        [
            *SHARED,
            "1",
            "--prompts-per-group",
            "1000",
            "--system-tokens",
            "1",
            "--question-tokens",
            str(1 << 27),
            "-o",
            "{dir}/sp.jsonl",
        ],
        "a generated trace holds at most 16,777,216",
    ),
    # advise --workload: a second trace, or a fit's flags beside a trace, were dropped unread
    ([*ADVISE, "--workload", "{trace}", "--workload", "{trace}"], "already gives the requests"),
    ([*ADVISE, "--workload", "{trace}", "--mean-prompt-tokens", "5"], "--mean-prompt-tokens fits"),
    # ray.init retried an address nothing listens at for a minute or more
    ([*FLEET, "--sweep", "replicas=2,3", "--ray", "127.0.0.1:1"], "no Ray cluster there"),
    ([*FLEET, "--sweep", "replicas=2,3", "--ray", "x:99999"], "expected HOST:PORT"),
    # KVTransferConfig refuses an unknown kv_role, or a connector without one; kvtier read on
    ([*VLLM, "--kv-transfer-config", '{"kv_connector": "NixlConnector"}'], "kv_role None"),
    ([*VLLM, "--kv-transfer-config", LMCACHE.replace("kv_both", "maybe")], "kv_role 'maybe'"),
    # a misspelt field (its extra config, so its sizes) was dropped unread; vLLM refuses it
    (
        [*VLLM, "--kv-transfer-config", LMCACHE.replace("kv_role", "kv_rol")],
        "'kv_rol' is not a field of vLLM 0.21.0's KVTransferConfig, which refuses it at startup",
    ),
    (
        [*VLLM, "--kv-transfer-config", '{"kv_connector": 5, "kv_role": "kv_both"}'],
        "kv_connector must be a connector's name (a string), got 5",
    ),
    # LMCache settings: local_cpu=maybe was on, a 10^15 GiB CPU pool and 10^9-token chunks taken
    ([*LMCACHE_SIM[:5], "LMCACHE_LOCAL_CPU=maybe", *LMCACHE_SIM[5:]], "local_cpu"),
    (
        [*LMCACHE_SIM[:5], "LMCACHE_MAX_LOCAL_CPU_SIZE=1e15", *LMCACHE_SIM[5:]],
        "from 0 to 10,000,000",
    ),
    ([*LMCACHE_SIM[:5], "LMCACHE_CHUNK_SIZE=1e9", *LMCACHE_SIM[5:]], "from 0 to 134,217,728"),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a)[:80] for a, _ in CASES])
def test_refused_in_one_line(
    work: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    for name, path in work.items():  # placeholders only: JSON braces stay as written
        argv = [word.replace(f"{{{name}}}", path) for word in argv]
    err = error_line(capsys, argv)
    assert message in err


TWICE = [
    (["plan", *LLAMA, "--tp", "2", "--tp", "4"], "--tp is given twice (2, then 4); give one"),
    (["plan", *LLAMA, "--gpu", "h200"], "--gpu is given twice (h100, then h200)"),
    (["advise", *KIMI, "--tp", "4"], "--tp is given twice (8, then 4)"),
    (["explain", LOG, "--page-size", "16", "--page-size=32"], "--page-size is given twice (16, "),
    (
        ["simulate", "{trace}", *KIMI, "--rate-stages", "1:1", "--rate-stages", "2:1"],
        "--rate-stages is given twice (1:1, then 2:1)",
    ),
    ([*FLEET, "--replicas", "3"], "--replicas is given twice (2, then 3)"),
    ([*FLEET, "--ray", "--ray", "127.0.0.1:6379"], "--ray is given twice (alone, then 127.0"),
    (["plan", *LLAMA, "--model", " "], "--model is given twice (llama-3.1-8b, then ' ')"),
    (["simulate", "--generate", "chat", "-o", "a.jsonl", "--output", "b.jsonl"], "--output is"),
    (["trace", LOG, "-o", "a.jsonl", "-o", "b.jsonl"], "--output is given twice (a.jsonl, then"),
    (["observe", LOG, "--interval", "1", "--interval", "2"], "--interval is given twice"),
    (["report", LOG, "-o", "a.html", "-o", "b.html"], "--output is given twice"),
    # before the `--`: kvtier's; a launch command's own repeat is the engine's to read
    (
        [*VLLM[:3], "--gpu", "b200", *VLLM[3:], "--tp", "2"],
        "--gpu is given twice (h100, then b200)",
    ),
]


@pytest.mark.parametrize(("argv", "message"), TWICE, ids=[" ".join(a)[:80] for a, _ in TWICE])
def test_a_flag_given_twice_with_two_values_is_refused(
    work: dict[str, str], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    argv = [word.replace("{trace}", work["trace"]) for word in argv]
    assert message in error_line(capsys, argv)


def test_a_flag_given_twice_with_one_value_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    once = cli_json(["plan", *LLAMA, "--tp", "2", "--json"])
    assert cli_json(["plan", *LLAMA, "--tp", "2", "--tp=2", "--json", "--json"]) == once


def test_equal_flags_of_one_field_agree(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", *LLAMA, "--gpu-memory-utilization", "0.8", "--mem-fraction-static", "0.8"]
    assert main([*argv, "--quiet"]) == 0


FOUNDING = Path(__file__).resolve().parents[1] / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"


def test_a_negative_avail_mem_is_refused_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = FOUNDING.read_text().replace("avail mem=21.71 GB", "avail mem=-21.71 GB")
    log = tmp_path / "negative.log"
    log.write_text(text)
    err = error_line(capsys, ["explain", str(log)])
    assert "avail mem=-21.71 GB is negative" in err and "line " in err


def test_a_count_too_long_to_be_real_is_not_cut_to_its_first_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 26-digit #tokens is no count: the log is read as having printed none, never as
    its first 15 digits."""
    text = FOUNDING.read_text().replace("#tokens: 159277,", "#tokens: 15927700000000000000000000,")
    assert "#tokens: 15927700000000000000000000," in text
    log = tmp_path / "long.log"
    log.write_text(text)
    assert main(["explain", str(log), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "159277000000000" not in out
    assert "observed_kv_tokens 159277\n" not in out


def test_a_bad_launch_value_is_named_not_echoed_whole(capsys: pytest.CaptureFixture[str]) -> None:
    """A 100,000-character --kv-transfer-config was printed whole in its one line."""
    nested = "[" * 50_000 + "]" * 50_000
    err = error_line(capsys, [*VLLM, "--kv-transfer-config", nested])
    assert "--kv-transfer-config: bad value '[[[" in err and len(err) < 300


def test_a_trace_beside_a_serving_log_is_the_workload(work: dict[str, str]) -> None:
    """The serving log gives the verdict and the trace the requests, in either order; with the
    log first, its fitted workload was replayed and the trace dropped unread."""
    serving = str(ROOT / "examples" / "logs" / "sglang-serving-queue.log")
    for sources in ([serving, work["trace"]], [work["trace"], serving]):
        argv = [*ADVISE, *(w for s in sources for w in ("--workload", s)), "--json"]
        answer = cli_json(argv)
        assert answer["workload"] == work["trace"] and answer["verdict"] is not None


def test_a_ladder_of_ten_million_stages_is_refused_unread(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused by its comma count: reading the 10^7 stages first took 7.7 s and 1.7 GB, and
    the one line echoed all 40 MB of them."""
    ladder = ",".join(["1:1"] * 10_000_000)
    argv = ["simulate", "--generate", "shared-prefix", "--replicas", "2", "--rate-stages", ladder]
    err = error_line(capsys, argv)
    assert "argument --rate-stages: wants RATE:SECONDS" in err and len(err) < 300
