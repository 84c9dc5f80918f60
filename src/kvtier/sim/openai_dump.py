"""OpenAI-format request dumps (JSONL) read into logged requests, tokenized locally.

One request per line: the body sent to `/v1/completions` (`prompt`) or `/v1/chat/completions`
(`messages`), either as the line itself or under `body` (OpenAI's batch input format:
`{"custom_id": .., "method": "POST", "url": .., "body": {..}}`).

- Prompt: `prompt` as a string (encoded with special tokens) or as token ids; `messages` through
  the tokenizer's chat template. One prompt per request.
- Output length, first found: `output_length` on the line, the response's
  `usage.completion_tokens` (`response`, or `response.body` as the batch output has it, or
  `usage` on the line), else the request's cap: `max_completion_tokens`, `max_tokens`,
  `max_new_tokens`.
- Arrival: `timestamp` on the line in ms (Mooncake's unit), else `created` in s (OpenAI's);
  a dump with neither needs `--rate`: request i arrives at i / rate seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, TypeGuard

from kvtier.errors import KvtierError
from kvtier.logs.requests import HashPrompt, LoggedRequest, token_ids
from kvtier.sim.tokenizer import LocalTokenizer

_CAPS = ("max_completion_tokens", "max_tokens", "max_new_tokens")
_MAX_SECONDS = 1e11


def read_dump(
    lines: Iterable[tuple[int, str]],
    hash_prompt: HashPrompt,
    tokenizer: LocalTokenizer | None,
    rate: float | None,
) -> Iterator[LoggedRequest]:
    """`(number, text)` lines of a dump as requests, in the dump's order."""
    index = 0
    clock: tuple[str, int] | None = None  # the first line's time field and line
    for number, text in lines:
        if not text.strip():
            continue
        where = f"line {number}"
        try:
            line = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise KvtierError(f"{where}: not a JSON object ({str(exc)[:60]})") from None
        if not isinstance(line, dict):
            raise KvtierError(f"{where}: not a JSON object")
        inner = line.get("body")
        body: dict[str, Any] = inner if isinstance(inner, dict) else line
        ids, text_prompt = _prompt(body, tokenizer, where)
        hashed = None if ids is None else hash_prompt(ids)
        output_len, output_from = _output(line, body, where)
        arrival, arrival_from = _arrival(line, index, rate, where)
        clock = clock or (arrival_from, number)
        if arrival_from != clock[0]:
            raise KvtierError(
                f"{where}: its time is `{arrival_from}` where line {clock[1]}'s is `{clock[0]}`: "
                "two clocks in one dump (ms since the start and Unix seconds); give one"
            )
        yield LoggedRequest(
            number,
            # a batch line's custom_id names one request; `user` names a caller, not a request
            str(line.get("custom_id", f"line {number}")),
            arrival,
            arrival_from,
            False,
            hashed,
            text_prompt,
            None,
            output_len,
            output_from,
        )
        index += 1


def _prompt(
    body: dict[str, Any], tokenizer: LocalTokenizer | None, where: str
) -> tuple[list[int] | None, str | None]:
    prompt, messages = body.get("prompt"), body.get("messages")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list) and prompt and all(type(v) is int for v in prompt):
        return token_ids(prompt, where, "`prompt`"), None
    if isinstance(prompt, str):
        return None, prompt  # encoded with the rest, by build_trace's tokenizer
    if isinstance(messages, list) and messages:
        if tokenizer is None:
            raise KvtierError(f"{where}: chat messages need --tokenizer (its chat template)")
        return token_ids(tokenizer.chat(messages, where), where, "the chat template's ids"), None
    if isinstance(prompt, list):
        raise KvtierError(f"{where}: `prompt` holds several prompts; give one per line")
    raise KvtierError(f"{where}: no `prompt` (string or token ids) and no `messages`")


def _output(line: dict[str, Any], body: dict[str, Any], where: str) -> tuple[int, str]:
    given = line.get("output_length")
    if _count(given):
        return given, "output_length"
    response = line.get("response")
    for holder in (
        response.get("body") if isinstance(response, dict) else None,
        response,
        line,
    ):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if _count(generated):
            return generated, "generated"
    for cap in _CAPS:
        value = body.get(cap)
        if _count(value):
            return value, "max_tokens"
    raise KvtierError(
        f"{where}: no output length: give `output_length`, a response with `usage`, or "
        "`max_tokens` in the request"
    )


def _arrival(line: dict[str, Any], index: int, rate: float | None, where: str) -> tuple[float, str]:
    for key, scale in (("timestamp", 1e-3), ("created", 1.0)):
        value = line.get(key)
        if value is None:
            continue
        if type(value) not in (int, float) or not 0 <= value * scale <= _MAX_SECONDS:
            raise KvtierError(f"{where}: `{key}` is not a time ({str(value)[:40]})")
        return float(value) * scale, key
    if rate is None:
        raise KvtierError(
            f"{where}: no `timestamp` (ms) or `created` (s); give --rate R to space the "
            "requests R per second"
        )
    return index / rate, "--rate"


def _count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 1
