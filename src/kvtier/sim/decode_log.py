"""When each decode iteration of a run ended, kept as runs and unrolled only when asked.

A server advances a fixed batch several iterations at once; it records the run's start, the
index of its first iteration and the iteration's time as lines (`timing.StepLines`). The token
times a serving benchmark measures (inter-token latency) are then every iteration's end, which
`ends` unrolls once at the end of the simulation, iteration index by index.
"""

from __future__ import annotations

import numpy as np

from kvtier.sim.timing import StepLines


class DecodeLog:
    """Decode runs in order: (start seconds, first iteration index, iterations, lines)."""

    def __init__(self, kept: bool = True) -> None:
        self.kept = kept  # False: nothing is recorded (a run that reports no token times)
        self.runs: list[tuple[float, int, int, StepLines]] = []

    def record(self, start_s: float, first: int, steps: int, lines: StepLines) -> None:
        if self.kept:
            self.runs.append((start_s, first, steps, lines))

    def shorten(self, steps: int) -> None:
        """The run in flight stops after `steps` iterations (a request arrived)."""
        if not self.kept:
            return
        start, first, _, lines = self.runs[-1]
        self.runs[-1] = (start, first, steps, lines)

    def ends(self) -> np.ndarray:
        """End time of every decode iteration, indexed by iteration number."""
        if not self.runs:
            return np.zeros(0)
        _, first, steps, _ = self.runs[-1]
        out = np.zeros(first + steps)
        for start, first, steps, lines in self.runs:
            out[first : first + steps] = start + lines.ends(steps)
        return out
