"""A tokenizer the user has locally, for prompts logged or dumped as text: never downloaded.

`transformers.AutoTokenizer.from_pretrained(NAME, local_files_only=True)` reads a folder (the
served model's, or one holding its tokenizer files) or a model id already in the local Hugging
Face cache. A completion prompt is encoded with the tokenizer's special tokens, as vLLM and
SGLang do for `/v1/completions`; chat messages go through the tokenizer's chat template with the
generation prompt, its text tokenized without special tokens (a template writes its own), as both
engines' chat endpoints do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.errors import KvtierError


@dataclass(frozen=True, slots=True)
class LocalTokenizer:
    """A loaded tokenizer and the name it was loaded from."""

    name: str
    backend: Any

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=True))

    def chat(self, messages: Sequence[object], where: str) -> list[int]:
        if not getattr(self.backend, "chat_template", None):
            raise KvtierError(
                f"{where}: chat messages, and the tokenizer {self.name} has no chat template"
            )
        try:
            ids = self.backend.apply_chat_template(
                list(messages), tokenize=True, add_generation_prompt=True, return_dict=False
            )
        except Exception as exc:  # the template's own checks: roles, content types
            raise KvtierError(
                f"{where}: the chat template refused these messages ({exc})"
            ) from None
        if isinstance(ids, dict):  # some versions return a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]


def load_tokenizer(name: str) -> LocalTokenizer:
    """The tokenizer at `name` (a folder, or a model id in the local cache), offline only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise KvtierError(
            "--tokenizer needs the transformers package: pip install 'kvtier[tokenizer]'"
        ) from None
    try:
        backend = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as exc:  # OSError, ValueError, ...: whatever transformers says of the folder
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KvtierError(
            f"--tokenizer {name}: no tokenizer there (a local folder or a model in the local "
            f"Hugging Face cache; nothing is downloaded): {first[:200]}"
        ) from None
    return LocalTokenizer(name, backend)
