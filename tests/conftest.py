"""Test-run settings: CI runs the property tests on a fixed example sequence, so a run is
reproducible; local runs keep exploring new examples."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
