"""Errors the CLI turns into one clear line and a non-zero exit code."""

from __future__ import annotations

from dataclasses import dataclass


def shown(word: str) -> str:
    """A word of the input as a refusal shows it: a blank or unprintable one (a newline would
    split the refusal's one line) quoted."""
    return word if word.isprintable() and word.strip() == word != "" else repr(word)


class KvtierError(Exception):
    """A problem with the user's input or environment, stated for the user. Exit code 2."""

    exit_code = 2


class UnsupportedModel(KvtierError):
    """A model config kvtier does not understand; refused rather than guessed."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One launch setting, and why the engine would start with it."""

    flag: str
    value: float
    why: str


class DoesNotStart(KvtierError):
    """The engine would refuse to start the deployment: an answer about it, not bad input.
    Exit code 1. Carries the engine's message, the KV tokens it sized before refusing (None when
    it refuses before sizing a pool) with their range, and the nearest setting that starts."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        tokens: int | None = None,
        tokens_range: tuple[int, int] | None = None,
        would_start: Setting | None = None,
    ) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.tokens_range = tokens_range
        self.would_start = would_start
