"""The manifest of public startup-log excerpts (tests/fixtures/logs/public) is well-formed.

Needs nothing but the fixtures: every id has its .log, every field is present and typed,
and every observed KV token count is either printed in its log or derived from a printed
`# GPU blocks: N` times the block size the entry states.
"""

import json
import re
from pathlib import Path

import pytest

PUBLIC = Path(__file__).parent / "fixtures" / "logs" / "public"
INDEX = PUBLIC / "index.json"

FIELDS = {
    "id": str,
    "engine": str,
    "engine_version": (str, type(None)),
    "model": str,
    "model_in_log_is_local_path": bool,
    "gpu": (str, type(None)),
    "tp": (int, type(None)),
    "source": str,
    "what": str,
    "observed_kv_tokens": (int, type(None)),
    "printed": dict,
    "notes": str,
}


def _entries():
    return json.loads(INDEX.read_text(encoding="utf-8"))


def _ids():
    return [e["id"] for e in _entries()]


def test_index_is_a_list_with_unique_ids():
    entries = _entries()
    assert isinstance(entries, list) and entries
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))


def test_every_log_file_is_listed():
    listed = {e["id"] for e in _entries()}
    on_disk = {p.stem for p in PUBLIC.glob("*.log")}
    assert on_disk == listed


@pytest.mark.parametrize("entry_id", _ids())
def test_entry_fields(entry_id):
    entry = next(e for e in _entries() if e["id"] == entry_id)
    assert set(entry) == set(FIELDS)
    for name, kind in FIELDS.items():
        assert isinstance(entry[name], kind), name
    assert re.fullmatch(r"[a-z0-9][a-z0-9._-]*", entry_id)
    assert entry["engine"] in ("sglang", "vllm")
    assert entry["source"].startswith("https://github.com/")
    log = PUBLIC / f"{entry_id}.log"
    assert log.is_file()
    text = log.read_text(encoding="utf-8")
    assert text.strip()
    assert "/work/" not in text


def _numbers(text):
    """Every integer in the text, with thousands separators removed."""
    return {int(m.replace(",", "")) for m in re.findall(r"\d[\d,]*\d|\d", text)}


@pytest.mark.parametrize("entry_id", _ids())
def test_observed_tokens_are_printed_or_derived(entry_id):
    entry = next(e for e in _entries() if e["id"] == entry_id)
    observed = entry["observed_kv_tokens"]
    if observed is None:
        return
    text = (PUBLIC / f"{entry_id}.log").read_text(encoding="utf-8")
    if observed in _numbers(text):
        return
    printed = entry["printed"]
    blocks, block_size = printed.get("gpu_blocks"), printed.get("block_size")
    assert blocks is not None and block_size is not None, (
        f"{entry_id}: {observed} is not in the log and no gpu_blocks x block_size is stated"
    )
    line = re.search(rf"(# ?)?(GPU|CUDA) blocks: {blocks}\b", text)
    assert line, f"{entry_id}: no GPU/CUDA blocks line with {blocks}"
    assert blocks * block_size == observed
