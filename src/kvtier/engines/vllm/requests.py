"""vLLM's request log (`--enable-log-requests`; 0.6.6 logs unless `--disable-log-requests`).

Emitter: `RequestLogger` (vllm/entrypoints/logger.py; vllm/entrypoints/serve/utils/
request_logger.py in 0.32), behind vLLM's prefix `LEVEL MM-DD HH:MM:SS [file.py:N] ` (no year,
whole seconds; 0.6 prints `file.py:N]` without the bracket). By version (read in the wheels):

    0.6.6        INFO  Received request R: prompt: %r, params: P, prompt_token_ids: [..],
                       lora_request: L, prompt_adapter_request: A.
    0.10.2-0.11  INFO  Received request R: prompt: %r, params: P, prompt_token_ids: [..],
                       prompt_embeds shape: S, lora_request: L.
    0.12-0.32    DEBUG Request R details: prompt: %r, prompt_token_ids: [..],
                       prompt_embeds shape: S.
                 INFO  Received request R: params: P, lora_request: L.
    outputs (`--enable-log-outputs`, chat and responses endpoints only):
    0.10.2-0.17  INFO  Generated response R[ (streaming delta|complete)]: output: %r,
                       output_token_ids: [..], finish_reason: F
    0.20-0.32    DEBUG Generated response R[ (streaming ...)] details: output_token_ids: [..]
    A streamed answer prints one `(streaming delta)` line a piece, with that piece's ids, and a
    `(streaming complete)` line whose ids are None (0.32, read on the real server).

So from 0.12 on the prompt's token ids are printed only when the server logs at DEBUG
(`VLLM_LOGGING_LEVEL=DEBUG`); an INFO-only log names requests without their prompts and is
refused. `--max-log-len N` cuts prompt and ids to N without a mark: the startup line
`non-default args: {..., 'max_log_len': N}` gives N, and a prompt with N or more logged ids is
refused as possibly cut. P is `SamplingParams(..., max_tokens=M, ...)`: the output length is M
(`ignore_eos` or a model that runs to the cap) unless output lines give the generated count (the
whole answer's ids, or the sum of the streamed pieces').

A request arrives at its `Received` line's time: vLLM's own, in whole seconds, or where the line
carries a sub-second ISO time before vLLM's prefix (`docker logs -t`, `kubectl logs
--timestamps`: UTC, nanoseconds), that one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from kvtier.errors import KvtierError
from kvtier.logs.pyrepr import Call, ReprError, read_value
from kvtier.logs.requests import (
    ISO_TIME,
    Clock,
    HashedPrompt,
    HashPrompt,
    LoggedRequest,
    iso_seconds,
    token_ids,
)

ENGINE = "vllm"
_HEAD = re.compile(
    r"(?:INFO|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,]\d{1,6})? "
    r"\[?[^\]\s]{1,300}:\d{1,6}\] "
)
_RECEIVED = re.compile(r"Received request (\S{1,300}?): (prompt|params): ")
_DETAILS = re.compile(r"Request (\S{1,300}?) details: prompt: ")
_GENERATED = re.compile(
    r"Generated response (\S{1,300}?)(?: \(streaming (delta|complete)\))?"
    r"(: output: | details: output_token_ids: )"
)
_MAX_LOG_LEN = re.compile(r"'max_log_len': (\d{1,12})\b|\bmax_log_len=(\d{1,12})\b")
_TITLES = ("Received request ", "Request ", "Generated response ")
_STAMPED = "the line's UTC time stamp"


@dataclass(slots=True)
class _Draft:
    line: int
    rid: str
    arrival_s: float
    stamped: bool  # by a sub-second UTC time before vLLM's prefix (docker logs -t)
    prompt: HashedPrompt | None
    text: str | None
    output_len: int | None
    output_from: str
    streamed: int = 0


class VllmRequests:
    """vLLM's request lines read into `LoggedRequest`s (see the module's table)."""

    engine = ENGINE

    def __init__(self, hash_prompt: HashPrompt) -> None:
        self._hash = hash_prompt
        self._clock = Clock()
        self._details: dict[str, tuple[int, HashedPrompt | None, str | None]] = {}
        self._drafts: list[_Draft] = []
        self._by_rid: dict[str, _Draft] = {}
        self._left_out = 0
        self._max_log_len: tuple[int, int] | None = None  # (N, line)

    def feed(self, number: int, text: str) -> bool:
        head = _HEAD.search(text)
        if head is None or not text.startswith(_TITLES, head.end()):
            if self._max_log_len is None and "max_log_len" in text:  # the startup arguments
                found = _MAX_LOG_LEN.search(text)
                if found and "args" in text[: found.start()]:
                    self._max_log_len = (int(found.group(1) or found.group(2)), number)
            return False
        where = f"line {number}"
        month, day, hour, minute, second = (int(g) for g in head.groups())
        at = head.end()
        try:
            if m := _RECEIVED.match(text, at):
                when = self._clock.month_day(month, day, (hour, minute, second), where)
                outer = ISO_TIME.search(text, 0, head.start())
                if outer is not None and outer.group(7):  # docker logs -t: UTC, sub-second
                    when = iso_seconds(outer, where)
                self._received(number, m, text, when, outer is not None and bool(outer.group(7)))
            elif m := _DETAILS.match(text, at):
                self._read_details(number, m, text)
            elif m := _GENERATED.match(text, at):
                self._generated(m, text)
            else:
                return False
        except ReprError as exc:
            raise KvtierError(
                f"{where}: not a vLLM request line as vLLM prints it ({exc})"
            ) from None
        return True

    def _received(
        self, number: int, m: re.Match[str], text: str, when: float, stamped: bool
    ) -> None:
        rid, where = m.group(1), f"line {number}"
        if m.group(2) == "prompt":  # 0.6-0.11: one line with everything
            prompt, end = read_value(text, m.end())
            end = _expect(text, end, ", params: ", where)
            params, end = read_value(text, end)
            end = _expect(text, end, ", prompt_token_ids: ", where)
            ids, _ = read_value(text, end)
            hashed = self._ids(ids, where)
        else:
            params, _ = read_value(text, m.end())
            found = self._details.pop(rid, None)
            if found is None:
                raise KvtierError(
                    f"{where}: vLLM logged request {rid} without its prompt: from vLLM 0.12 on the "
                    "prompt token ids are printed at DEBUG ('Request ... details'); restart the "
                    "server with VLLM_LOGGING_LEVEL=DEBUG (or --log-level debug)"
                )
            _, hashed, prompt = found
        if not isinstance(params, Call) or params.name == "PoolingParams":
            self._left_out += 1  # an embedding or scoring request generates nothing
            return
        if hashed is None and not isinstance(prompt, str):
            self._left_out += 1  # prompt embeddings: no tokens to hash
            return
        cap = params.fields.get("max_tokens")
        draft = _Draft(
            number,
            rid,
            when,
            stamped,
            hashed,
            prompt if isinstance(prompt, str) and hashed is None else None,
            cap if isinstance(cap, int) and not isinstance(cap, bool) else None,
            "max_tokens",
        )
        self._drafts.append(draft)
        self._by_rid[rid] = draft

    def _read_details(self, number: int, m: re.Match[str], text: str) -> None:
        where = f"line {number}"
        prompt, end = read_value(text, m.end())
        end = _expect(text, end, ", prompt_token_ids: ", where)
        ids, _ = read_value(text, end)
        self._details[m.group(1)] = (
            number,
            self._ids(ids, where),
            prompt if isinstance(prompt, str) else None,
        )

    def _generated(self, m: re.Match[str], text: str) -> None:
        draft = self._by_rid.get(m.group(1))
        if draft is None:
            return  # a request whose prompt line came before the log did
        end = m.end()
        if m.group(3) == ": output: ":
            _, end = read_value(text, end)
            if not text.startswith(", output_token_ids: ", end):
                return  # 0.20 on: the count is on the DEBUG line
            end += len(", output_token_ids: ")
        ids, _ = read_value(text, end)
        if not isinstance(ids, list) or not ids:
            return  # `(streaming complete)` prints None: the pieces counted it
        cut = self._max_log_len
        if cut is not None and len(ids) >= cut[0]:
            return  # maybe cut: the cap stands
        if m.group(2) == "delta":  # a streamed piece: the output so far is the pieces' sum
            draft.streamed += len(ids)
            draft.output_len, draft.output_from = draft.streamed, "generated"
        else:
            draft.output_len, draft.output_from = len(ids), "generated"

    def _ids(self, value: object, where: str) -> HashedPrompt | None:
        ids = token_ids(value, where, "prompt_token_ids")
        if ids is None:
            return None
        cut = self._max_log_len
        if cut is not None and len(ids) >= cut[0]:
            raise KvtierError(
                f"{where}: {len(ids)} prompt token ids, and the server cut them at "
                f"--max-log-len {cut[0]} (line {cut[1]}): this prompt may be longer; restart the "
                "server without --max-log-len"
            )
        return self._hash(ids)

    def requests(self) -> Iterator[LoggedRequest]:
        for d in self._drafts:
            if d.output_len is None or d.output_len < 1:
                raise KvtierError(
                    f"line {d.line}: request {d.rid} has no max_tokens and no logged output: "
                    "its output length is unknown"
                )
            yield LoggedRequest(
                d.line,
                d.rid,
                d.arrival_s,
                _STAMPED if d.stamped else "vLLM's line time",
                d.stamped,
                d.prompt,
                d.text,
                None,
                d.output_len,
                d.output_from,
            )

    def left_out(self) -> int:
        return self._left_out + len(self._details)


def _expect(text: str, pos: int, literal: str, where: str) -> int:
    if not text.startswith(literal, pos):
        raise KvtierError(
            f"{where}: not a vLLM request line as vLLM prints it "
            f"(expected {literal.strip(', ')!r} at column {pos + 1})"
        )
    return pos + len(literal)
