"""Errors the CLI turns into one clear line and a non-zero exit code."""

from __future__ import annotations


class KvtierError(Exception):
    """A problem with the user's input or environment, stated for the user. Exit code 2."""

    exit_code = 2


class UnsupportedModel(KvtierError):
    """A model config kvtier does not understand; refused rather than guessed."""
