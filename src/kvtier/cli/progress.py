"""Progress bars with the time left, for commands whose work runs longer than a moment."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class Progress:
    """Progress bars with the time left on stderr, one per phase; silent when `enabled` is
    False or stderr is not a terminal. `bar(label, total)` gives the callback a phase reports
    its count to."""

    def __init__(self, enabled: bool) -> None:
        self._rich: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress as RichProgress

            self._rich = RichProgress(
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=False,  # results go to stdout, after the bars are cleared
                redirect_stderr=False,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()

    def done(self) -> None:
        """Clear the bars before the results print (stdout and stderr share a terminal)."""
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def bar(self, label: str, total: int) -> Callable[[int], None] | None:
        rich = self._rich
        if rich is None:
            return None
        rich.start()  # shown from the first bar on; starting again is a no-op
        for task in rich.tasks:  # the phase before this one is over
            rich.update(task.id, visible=False)
        task = rich.add_task(label, total=total)
        return lambda done: rich.update(task, completed=done)
