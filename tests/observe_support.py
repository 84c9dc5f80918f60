"""Reading serving fixtures as `kvtier observe` does, for the observe tests."""

from __future__ import annotations

import io
import json
from pathlib import Path

from kvtier.observe.logread import read_stream
from kvtier.observe.metrics import is_metrics_text, observe_scrapes, parse_scrape
from kvtier.observe.observer import Observation, Observer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "observe"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))


def observe_text(text: str, source: str = "test", points: int = 120) -> Observation:
    """The observation of a log or saved metrics text."""
    observer = Observer(source, points)
    if is_metrics_text(text):
        observe_scrapes([parse_scrape(text, source, 0.0, "saved")], observer)
    else:
        read_stream(io.BytesIO(text.encode("utf-8")), observer)
    return observer.result()


def observe_fixture(name: str) -> Observation:
    return observe_text((FIXTURES / name).read_text(encoding="utf-8"), name)
