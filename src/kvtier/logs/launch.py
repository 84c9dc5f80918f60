"""A launch command pasted into a log (`python -m sglang.launch_server ...`, `vllm serve M ...`)."""

from __future__ import annotations

import re

from kvtier.logs.lines import LogLine
from kvtier.logs.records import Args

_COMMAND = re.compile(
    r"sglang\.launch_server|sglang serve|vllm serve|vllm\.entrypoints\.openai\.api_server"
)
_FLAG = re.compile(r"(?<!\S)--([a-z][a-z0-9-]{0,60})(?:=(\S{1,400})|\s+(?!-)(\S{1,400}))?")
_SERVE_MODEL = re.compile(r"(?:vllm|sglang) serve\s+(?!-)(\S{1,400})")
_CONTINUED_LINES = 40  # a wrapped command spans at most this many lines


def find_launch(lines: list[LogLine]) -> Args | None:
    """The last launch command in the log, with its `--flag value` pairs (dashes to underscores).

    A model given positionally (`vllm serve MODEL`) is stored under `model`.
    """
    found = None
    for index, line in enumerate(lines):
        if "serve" not in line.text and "launch_server" not in line.text:
            continue
        match = _COMMAND.search(line.text)
        if match is None or ("--" not in line.text and "serve" not in line.text):
            continue
        parts = [line.text[match.start() :]]
        follow = index
        while parts[-1].rstrip().endswith("\\") and follow + 1 < min(
            len(lines), index + _CONTINUED_LINES
        ):
            follow += 1
            parts.append(lines[follow].text)
        command = " ".join(part.rstrip().rstrip("\\") for part in parts)
        values: dict[str, object] = {}
        served = _SERVE_MODEL.search(command)
        if served:
            values["model"] = served.group(1)
        for flag in _FLAG.finditer(command):
            value = flag.group(2) or flag.group(3)
            values[flag.group(1).replace("-", "_")] = value if value is not None else True
        found = Args(line.number, line.text, None, values)
    return found
