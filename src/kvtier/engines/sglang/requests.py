"""SGLang's request log (`--log-requests`, `--log-requests-level`, `--log-requests-format`).

Emitter: `TokenizerManager` (0.5.3-0.5.5: `logger.info`, behind SGLang's `[YYYY-MM-DD HH:MM:SS]`
prefix) and from 0.5.9 `RequestLogger` (srt/utils/request_logger.py: its own logger printing the
bare message). Text format, per request:

    Receive: obj=GenerateReqInput(rid='..', text='..', input_ids=[..], sampling_params={..}, ...)
    Finish: obj=GenerateReqInput(...)[, headers={..}], out={'text': '..', 'output_ids': [..],
            'meta_info': {'id': '..', 'prompt_tokens': N, 'completion_tokens': M,
                          'e2e_latency': S, ...}}

JSON format (0.5.9 on, `--log-requests-format json`): one object per line with `timestamp`
(`datetime.now().isoformat()`), `event` (`request.received`, `request.finished`), `rid`, `obj`
and `out`, the same fields. Levels (`_compute_metadata`, the same in 0.5.3 and 0.5.23): 0 and 1
leave out the prompt (`text`, `input_ids`) and the output ids; 2 prints prompts whole up to 2,048
items and cuts longer ones to the first and last 1,024 (`'head' ... 'tail'`); 3 prints them whole.

A `Finish` line is a request: its prompt is `input_ids` (a request sent as ids, or the chat
endpoint's templated ids) or `text` (counted with a local tokenizer); its output is
`completion_tokens`, what was generated. Its arrival is, first found: `meta_info.
request_received_ts` (`--enable-metrics`), `obj.received_time` (0.5.9 on), both `time.time()`;
else the line's printed time (its own prefix or JSON `timestamp`, or failing that the last time
printed before it) less `e2e_latency`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, TypeGuard

from kvtier.errors import KvtierError
from kvtier.logs.pyrepr import Call, ReprError, Truncation, read_value
from kvtier.logs.requests import ISO_TIME, HashPrompt, LoggedRequest, iso_seconds, token_ids

ENGINE = "sglang"
_TEXT = re.compile(r"(Receive|Finish): obj=")
_JSON_EVENT = '"event": "request.'
_TIME_SPAN = 80  # a line's own time is printed in its first characters


class SglangRequests:
    """SGLang's request lines read into `LoggedRequest`s (see the module's docstring)."""

    engine = ENGINE

    def __init__(self, hash_prompt: HashPrompt) -> None:
        self._hash = hash_prompt
        self._received: set[str] = set()
        self._finished: list[LoggedRequest] = []
        self._left_out = 0
        self._last_time: float | None = None

    def feed(self, number: int, text: str) -> bool:
        where = f"line {number}"
        found = _TEXT.search(text)
        # a time in the prefix only: a prompt may print dates of its own
        own = ISO_TIME.search(text, 0, found.start() if found else _TIME_SPAN)
        line_time = iso_seconds(own, where) if own else None
        if line_time is not None:
            self._last_time = line_time
        try:
            if found is not None:
                obj, end = read_value(text, found.end())
                if found.group(1) == "Receive":
                    self._receive(obj)
                else:
                    out = _out(text, end)
                    self._finish(number, obj, out, line_time)
                return True
            at = text.find(_JSON_EVENT)
            if at >= 0:
                return self._json(number, text, text.rfind("{", 0, at))
        except ReprError as exc:
            raise KvtierError(
                f"{where}: not an SGLang request line as SGLang prints it ({exc})"
            ) from None
        return False

    def _json(self, number: int, text: str, start: int) -> bool:
        where = f"line {number}"
        try:
            record = json.loads(text[start:]) if start >= 0 else None
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            raise KvtierError(f"{where}: an SGLang request event that is not one JSON object")
        stamp = record.get("timestamp")
        found = ISO_TIME.fullmatch(stamp) if isinstance(stamp, str) else None
        if found is None:
            raise KvtierError(f"{where}: an SGLang request event without its ISO timestamp")
        when = iso_seconds(found, where)
        self._last_time = when
        event = record.get("event")
        if event == "request.received":
            self._receive(record.get("obj"))
        elif event == "request.finished":
            self._finish(number, record.get("obj"), record.get("out"), when)
        return True

    def _receive(self, obj: object) -> None:
        rid = _fields(obj).get("rid")
        if isinstance(rid, str):
            self._received.add(rid)

    def _finish(self, number: int, obj: object, out: object, when: float | None) -> None:
        where = f"line {number}"
        fields = _fields(obj)
        rid = fields.get("rid")
        rid = rid if isinstance(rid, str) else f"line {number}"
        self._received.discard(rid)
        meta = _fields(out).get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        completion = meta.get("completion_tokens")
        if not isinstance(out, dict | Call) or not _count(completion):
            self._left_out += 1  # an embedding, or an output without a count
            return
        ids, text = fields.get("input_ids"), fields.get("text")
        # text format: 'head' ... 'tail'; JSON: [head..., "...", tail...]
        cut_json = isinstance(ids, list) and "..." in ids
        if (
            isinstance(ids, Truncation)
            or cut_json
            or (ids is None and isinstance(text, Truncation))
        ):
            raise KvtierError(
                f"{where}: SGLang cut this prompt to its first and last 1,024 items "
                "(--log-requests-level 2); level 3 prints it whole"
            )
        if ids is None and text is None:
            raise KvtierError(
                f"{where}: SGLang logged request {rid} without its prompt (--log-requests-level "
                "0 or 1); levels 2 and 3 print it"
            )
        if isinstance(ids, list) and ids and isinstance(ids[0], list):
            self._left_out += 1  # a batch of prompts in one object: not one prompt's ids
            return
        checked = token_ids(ids, where, "input_ids")
        hashed = None if checked is None else self._hash(checked)
        arrival, source, epoch = _arrival(fields, meta, when, self._last_time, where)
        prompt_tokens = meta.get("prompt_tokens")
        self._finished.append(
            LoggedRequest(
                number,
                rid,
                arrival,
                source,
                epoch,
                hashed,
                text if hashed is None and isinstance(text, str) else None,
                prompt_tokens if _count(prompt_tokens) else None,
                completion,
                "generated",
            )
        )

    def requests(self) -> Iterator[LoggedRequest]:
        yield from self._finished

    def left_out(self) -> int:
        return self._left_out + len(self._received)


def _out(text: str, end: int) -> object:
    """The `out=` value after the object (behind optional `headers=`), or None (multimodal)."""
    while text.startswith(", ", end):
        name_end = text.find("=", end)
        if name_end < 0:
            break
        name = text[end + 2 : name_end]
        value, end = read_value(text, name_end + 1)
        if name == "out":
            return value
    return None


def _fields(value: object) -> dict[str, Any]:
    if isinstance(value, Call):
        return value.fields
    return value if isinstance(value, dict) else {}


def _count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 1


def _number(value: object) -> float | None:
    if type(value) in (int, float) and value == value and 0 < value < 1e11:  # type: ignore[operator]
        return float(value)  # type: ignore[arg-type]
    return None


def _arrival(
    fields: dict[str, Any],
    meta: dict[str, Any],
    when: float | None,
    last_time: float | None,
    where: str,
) -> tuple[float, str, bool]:
    for source, value in (
        ("meta_info.request_received_ts", meta.get("request_received_ts")),
        ("obj.received_time", fields.get("received_time")),
    ):
        if (seconds := _number(value)) is not None:
            return seconds, source, True
        if value is not None:
            raise KvtierError(f"{where}: {source}={value!r} is no date (Unix seconds)")
    given = meta.get("e2e_latency")
    latency = float(given) if isinstance(given, int | float) and given >= 0 else None
    clock = when if when is not None else last_time
    if clock is None or latency is None:
        raise KvtierError(
            f"{where}: no arrival time: the line prints neither request_received_ts "
            "(--enable-metrics) nor received_time, and no time with e2e_latency "
            "(--log-requests-format json prints one)"
        )
    label = "line time" if when is not None else "last printed time"
    return clock - latency, f"{label} - e2e_latency", False
