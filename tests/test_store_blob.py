"""Blob format and fingerprints: a page is served only intact and only to its own fingerprint."""

from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.model.description import AttentionKind, KVGeometry, LayerKind, ModelSpec
from kvtier.store.base import StoreFingerprint, StoreStats
from kvtier.store.blob import (
    HEADER_SIZE,
    MAGIC,
    CorruptBlob,
    ForeignBlob,
    StaleBlob,
    decode_blob,
    encode_blob,
    encode_head,
    verify_blob,
)
from store_support import FP

HASH = bytes(range(16))


@given(payload=st.binary(max_size=4096), page_hash=st.binary(min_size=1, max_size=64))
def test_round_trip_is_exact(payload: bytes, page_hash: bytes) -> None:
    blob = encode_blob(FP.digest, page_hash, payload)
    assert len(blob) == HEADER_SIZE + len(page_hash) + len(payload)
    assert decode_blob(FP.digest, page_hash, blob) == payload


@settings(max_examples=200)
@given(payload=st.binary(min_size=1, max_size=512), data=st.data())
def test_any_single_bit_flip_is_detected(payload: bytes, data: st.DataObject) -> None:
    blob = bytearray(encode_blob(FP.digest, HASH, payload))
    pos = data.draw(st.integers(0, len(blob) - 1))
    blob[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises((CorruptBlob, ForeignBlob)):
        decode_blob(FP.digest, HASH, bytes(blob))


@given(payload=st.binary(max_size=512), data=st.data())
def test_any_truncation_is_corrupt(payload: bytes, data: st.DataObject) -> None:
    blob = encode_blob(FP.digest, HASH, payload)
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(CorruptBlob):
        decode_blob(FP.digest, HASH, blob[:cut])


def test_extra_bytes_are_corrupt() -> None:
    with pytest.raises(CorruptBlob):
        decode_blob(FP.digest, HASH, encode_blob(FP.digest, HASH, b"kv") + b"\0")


def test_foreign_fingerprint_is_refused() -> None:
    other = dataclasses.replace(FP, kv_dtype="fp8_e4m3")
    blob = encode_blob(other.digest, HASH, b"page bytes")
    with pytest.raises(ForeignBlob, match="fingerprint"):
        decode_blob(FP.digest, HASH, blob)


def test_blob_of_another_page_is_refused() -> None:
    blob = encode_blob(FP.digest, HASH, b"page bytes")
    with pytest.raises(ForeignBlob, match="another page"):
        decode_blob(FP.digest, bytes(16), blob)


@pytest.mark.parametrize(
    "change",
    [
        {"model_id": "meta-llama/Llama-3.1-70B"},
        {"geometry": "mha:heads=4:k=128:v=128"},
        {"kv_dtype": "float16"},
        {"tp_rank": 1, "tp_size": 2},
        {"tp_size": 2},
        {"page_size": 32},
        {"layout": "page_first"},
    ],
)
def test_every_field_changes_the_fingerprint(change: dict[str, object]) -> None:
    assert dataclasses.replace(FP, **change).digest != FP.digest  # type: ignore[arg-type]


def test_fingerprint_rejects_a_rank_outside_tp() -> None:
    with pytest.raises(ValueError, match="tp_rank"):
        dataclasses.replace(FP, tp_rank=2, tp_size=2)


def _spec(kv: KVGeometry) -> ModelSpec:
    return ModelSpec(
        model_id="m",
        architecture="A",
        kv=kv,
        num_hidden_layers=kv.num_layers,
        hidden_size=1,
        num_attention_heads=1,
        vocab_size=1,
        context_length=1,
        dtype="bfloat16",
        quantization=None,
        params=(),
    )


def test_for_model_describes_one_ranks_shard() -> None:
    gqa = KVGeometry(AttentionKind.MHA, 8, 128, 128, (LayerKind.FULL,) * 2)
    tp2 = StoreFingerprint.for_model(
        _spec(gqa), kv_dtype="bfloat16", tp_rank=0, tp_size=2, page_size=16
    )
    assert tp2.geometry == "mha:heads=4:k=128:v=128:layers=full,full"
    mla = KVGeometry(
        AttentionKind.MLA, 1, 576, 0, (LayerKind.FULL,), kv_lora_rank=512, qk_rope_head_dim=64
    )
    fp = StoreFingerprint.for_model(
        _spec(mla), kv_dtype="bfloat16", tp_rank=3, tp_size=8, page_size=64
    )
    assert fp.geometry == "mla:latent=512+64:layers=full"


def test_stats_add_field_by_field() -> None:
    total = StoreStats(puts=1, bytes_read=5) + StoreStats(puts=2, errors=1)
    assert total == StoreStats(puts=3, errors=1, bytes_read=5)


def test_fields_cannot_run_into_each_other() -> None:
    """Field values holding any separator still give distinct digests (the encoding is
    canonical JSON, not a join)."""
    a = dataclasses.replace(FP, model_id="m\x1fmha", geometry="x")
    b = dataclasses.replace(FP, model_id="m", geometry="mha\x1fx")
    assert a.digest != b.digest
    c = dataclasses.replace(FP, model_id='m","geometry":"g')
    assert c.digest != dataclasses.replace(FP, model_id="m", geometry="g").digest


@pytest.mark.parametrize("version", [1, 2])
def test_a_blob_of_an_older_format_is_stale_not_served(version: int) -> None:
    """Formats 1 and 2 (a 36-byte header with a CRC-32) read as another format's page: a miss
    (`StaleBlob`, counted as foreign), never data and never an error."""
    payload = b"page bytes"
    crc = zlib.crc32(payload, zlib.crc32(HASH, zlib.crc32(FP.digest)))
    header = struct.pack("<4sBBH16sQI", MAGIC, version, len(HASH), 0, FP.digest, len(payload), crc)
    with pytest.raises(StaleBlob, match=f"format-{version}"):
        decode_blob(FP.digest, HASH, header + HASH + payload)


def test_a_payload_given_as_runs_checks_as_one() -> None:
    """The checksum of a page given as runs of memory is that of the joined page, and a damaged
    run fails it."""
    runs = [bytes([i]) * (100 + i) for i in range(5)]
    head = encode_head(FP.digest, HASH, runs)
    assert head == encode_head(FP.digest, HASH, b"".join(runs))
    verify_blob(FP.digest, HASH, head, [memoryview(r) for r in runs])
    runs[3] = b"\xff" + runs[3][1:]
    with pytest.raises(CorruptBlob, match="checksum"):
        verify_blob(FP.digest, HASH, head, runs)
