"""nvidia-smi's "used" against the startup ledger (explain and observe --nvidia-smi)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.errors import KvtierError
from kvtier.files import read_text
from kvtier.ledger.explain import explain_log
from kvtier.observe.nvidia_smi import parse_nvidia_smi, reconcile_card

ROOT = Path(__file__).resolve().parent.parent
SMI = ROOT / "tests" / "fixtures" / "observe" / "nvidia-smi"
KIMI = ROOT / "examples" / "logs" / "sglang-kimi-k25-eagle3.log"
DECODE = (
    "[2026-02-28 13:05:0{s} TP0] Decode batch. #running-req: 40, #token: 150000, "
    "token usage: 0.94, gen throughput (token/s): 900.00, #queue-req: 12\n"
)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_h200_table_driver_550_every_row() -> None:
    gpus = parse_nvidia_smi(read_text(str(SMI / "h200-550.txt"), "t"), "t")
    assert [(g.index, g.used_mib, g.total_mib, g.line) for g in gpus] == [
        (0, 124585, 143771, 10),
        (1, 124729, 143771, 14),
    ]
    assert round(gpus[1].total_gib, 2) == 140.4  # 143,771 MiB / 1,024


def test_driver_610_table_and_process_rows_not_read() -> None:
    gpus = parse_nvidia_smi(read_text(str(SMI / "rtx5090-610.txt"), "t"), "t")
    assert [(g.index, g.used_mib) for g in gpus] == [(0, 29024), (1, 29174)]
    kimi = parse_nvidia_smi(read_text(str(SMI / "kimi-k25-serving.txt"), "t"), "t")
    assert len(kimi) == 8 and {g.total_mib for g in kimi} == {97871}  # process MiB ignored


@pytest.mark.parametrize("name", ["query-header.csv", "query-noheader-nounits.csv"])
def test_query_gpu_csv_with_and_without_header_and_units(name: str) -> None:
    gpus = parse_nvidia_smi(read_text(str(SMI / name), "t"), "t")
    assert [(g.index, g.used_mib, g.total_mib) for g in gpus] == [
        (0, 94286, 97871),
        (1, 94254, 97871),
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("hello world\n", "line 1: not nvidia-smi output"),
        ("0, [N/A], 97871\n", "line 1: not 'index, used MiB, total MiB'"),
        ("index, name\n0, H20\n", "no memory.used column"),
        ("0, 99000, 97871\n", "GPU 0 uses 99000 MiB of 97871 MiB"),
        ("0, 1, 9\n0, 2, 9\n", "GPU 0 appears twice"),
        ("| N/A 30C P0 115W / 700W |  1MiB / 9MiB |\n", "memory with no GPU row"),
    ],
)
def test_bad_input_is_one_line_naming_it(text: str, says: str) -> None:
    with pytest.raises(KvtierError, match=says) as caught:
        parse_nvidia_smi(text, "smi.txt")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("smi.txt")


def test_founding_case_92_of_96_gb_item_by_item() -> None:
    """Kimi K2.5 on 96 GB cards: 92.08 GiB used while serving, against 11.18 GiB free at start.

    1.54 context + 72.33 weights + 10.42 KV + 0.11 pool extras + 0.60 draft KV = 85.00 GiB;
    the other 7.08 GiB is draft weights, CUDA graphs and the caching allocator's keep.
    """
    gpus = parse_nvidia_smi(read_text(str(SMI / "kimi-k25-serving.txt"), "t"), "t")
    card = reconcile_card(gpus, explain_log(read_text(str(KIMI), "log"), {}))
    assert card.compared.index == 0 and card.compared.used_mib == 94286
    rows = {i.item: round(i.gib, 2) for i in card.items}
    assert rows == {
        "CUDA context and before-load overheads": 1.54,  # 97,871 MiB - 94.04 GiB
        "target weights": 72.33,
        "KV cache pool (target)": 10.42,
        "allocated with the pool (request table, allocator)": 0.11,
        "draft KV pool": 0.6,
    }
    assert round(card.remainder.gib, 2) == 7.08
    assert card.unsized == ("draft weights", "CUDA graphs (target)", "CUDA graphs (draft)")
    assert sum(i.gib for i in card.items) + card.remainder.gib == pytest.approx(gpus[0].used_gib)
    assert any("95.58 - 11.18 = 84.40 GiB" in n and "7.68 GiB more" in n for n in card.notes)


def test_explain_nvidia_smi_json_and_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    smi = str(SMI / "kimi-k25-serving.txt")
    code, out, _ = _run(capsys, "explain", str(KIMI), "--nvidia-smi", smi, "--json")
    card = json.loads(out)["nvidia_smi"]
    assert code == 0 and card["compared_gpu"] == 0 and len(card["gpus"]) == 8
    assert card["items"][0]["mib"] == 1574.0 and card["remainder_gib"] == 7.079
    code, out, _ = _run(capsys, "explain", str(KIMI), "--nvidia-smi", smi)
    assert "nvidia-smi used 94,286 MiB = 92.08 GiB of 95.58 GiB" in out
    assert "remainder: kept by" in out and "caching" in out


def test_explain_bad_nvidia_smi_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "smi.txt"
    bad.write_text("GPU 0: 92 GB\n")
    code, out, err = _run(capsys, "explain", str(KIMI), "--nvidia-smi", str(bad))
    assert code == 2 and out == "" and err.count("\n") == 1 and "not nvidia-smi output" in err
    small = str(SMI / "rtx5090-610.txt")  # 31.84 GiB cards cannot have had 94.04 GiB free
    code, _, err = _run(capsys, "explain", str(KIMI), "--nvidia-smi", small)
    assert code == 2 and "not this server's card" in err


def test_observe_reconciles_with_the_same_logs_startup(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    log.write_text(KIMI.read_text() + "".join(DECODE.format(s=s) for s in range(3)))
    smi = str(SMI / "kimi-k25-serving.txt")
    code, out, _ = _run(capsys, "observe", str(log), "--nvidia-smi", smi, "--json")
    payload = json.loads(out)
    assert code == 0 and payload["diagnosis"] == "kv-bound"
    assert payload["nvidia_smi"]["remainder_gib"] == 7.079
    code, out, _ = _run(capsys, "observe", str(log), "--nvidia-smi", smi, "--quiet")
    assert "nvidia_smi_used_mib 94286" in out and "nvidia_smi_remainder_gib 7.08" in out


def test_observe_without_startup_lines_names_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "serving.log"
    log.write_text("".join(DECODE.format(s=s) for s in range(3)))
    smi = str(SMI / "query-header.csv")
    code, out, _ = _run(capsys, "observe", str(log), "--nvidia-smi", smi, "--json")
    card = json.loads(out)["nvidia_smi"]
    assert code == 0 and card["items"][0]["item"] == "unexplained: no startup ledger"
    assert "no SGLang or vLLM startup lines" in card["notes"][0]
    bad = tmp_path / "smi.txt"
    bad.write_text("index, memory.used [MiB]\n0, 5 MiB\n")
    code, out, err = _run(capsys, "observe", str(log), "--nvidia-smi", str(bad))
    assert code == 2 and "no memory.total column" in err
