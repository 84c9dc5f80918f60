"""The operation sequence both prefix caches replay, with no dependency beyond the standard
library (it is imported by kvtier's side and by SGLang's side, each in its own virtualenv).

The sequence file is JSON: {"page_size", "capacity_tokens", "block_size", "requests":
[[input_length, [hash_id, ...]], ...]}. A request's tokens are its blocks expanded
deterministically: block id b -> [b * 512 + i for i in range(n)], n = 512 except for the real
partial last block (input_length - 512 x (blocks - 1)). Per request, in order:

    match    the longest cached prefix of its page-aligned tokens (matched tokens are summed)
    insert   its page-aligned tokens
    evict    when the tree holds more than capacity_tokens, at least the excess, LRU leaves first
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any


def read_sequence(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def expand(input_length: int, hash_ids: list[int], block_size: int) -> array:
    """The request's token ids (int64) from its block ids."""
    tokens = array("q")
    last = input_length - block_size * (len(hash_ids) - 1)
    for j, b in enumerate(hash_ids):
        n = block_size if j < len(hash_ids) - 1 else last
        base = b * block_size
        tokens.extend(range(base, base + n))
    return tokens


def expand_all(seq: dict[str, Any]) -> list[array]:
    return [expand(n, ids, seq["block_size"]) for n, ids in seq["requests"]]
