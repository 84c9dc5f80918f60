"""Open a page in headless Debian chromium over the DevTools pipe and report what went wrong.

Stdlib only: chromium's `--remote-debugging-pipe` reads NUL-terminated JSON commands on fd 3 and
writes replies and events on fd 4. Unlike `--dump-dom`, the protocol tells console errors from
other output, reports uncaught exceptions and blocked loads, and can measure laid-out charts.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

# Every chart: its title, laid-out size, and how many of its marks have a non-zero area.
MEASURE_CHARTS = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  const marks = [...svg.querySelectorAll('.mark')];
  const drawn = marks.filter(m => { const b = m.getBBox(); return b.width * b.height > 0; });
  return {title: svg.querySelector('title').textContent, width: box.width,
          height: box.height, marks: marks.length, drawn: drawn.length};
}))"""


@dataclass
class PageReport:
    """What loading one page produced: problems (console, exceptions, loads) and a measurement."""

    problems: list[str] = field(default_factory=list)
    value: Any = None


class Chromium:
    """One headless chromium with a fresh profile, driven over the DevTools pipe."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="kvtier-chromium-")
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()

        def wire_fds() -> None:  # the browser expects exactly fds 3 (in) and 4 (out), inheritable
            inp, out = os.dup(to_child), os.dup(from_child)
            os.dup2(inp, 3)
            os.dup2(out, 4)

        args = [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe"]
        self.proc = subprocess.Popen(
            args,
            preexec_fn=wire_fds,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([self._from_browser], [], [], wait)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read(deadline))

    def load(self, path: Path, expression: str, media: str = "") -> PageReport:
        """Open `path`, wait for its load event, evaluate `expression` (a JSON string).

        `media` ("print" or "screen") emulates that CSS media type; empty keeps the default.
        """
        self.events.clear()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(f"{domain}.enable", session=session)
        if media:
            self.call("Emulation.setEmulatedMedia", {"media": media}, session)
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session)
        self.wait_for("Page.loadEventFired")
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session
        )
        report = PageReport(problems=problems(self.events))
        if "exceptionDetails" in result:
            report.problems.append(f"check failed: {result['exceptionDetails']}")
        else:
            report.value = json.loads(result["result"]["value"])
        self.call("Target.closeTarget", {"targetId": target})
        return report

    def close(self) -> None:
        """Ask the browser to quit (it takes its child processes along); kill it if it hangs."""
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):  # it may go before replying
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


def problems(events: list[dict[str, Any]]) -> list[str]:
    """Console output of any kind, uncaught exceptions, error log entries, non-local requests."""
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            found.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            found.append(f"exception: {details.get('exception', {}).get('description', details)}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            found.append(f"log: {params['entry']['text']}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:", "about:")):
                found.append(f"network request: {url}")
    return found
