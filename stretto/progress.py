"""A progress bar on stderr when it is a terminal (drawn by rich), and nothing when it is not."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """`total` steps of `label` (0: not known, so a counter), counted in `unit` (e.g. " files").
    `enabled`: draw (True), stay silent (False), or draw when stderr is a terminal (None)."""

    def __init__(self, total: int, label: str, unit: str = "", enabled: bool | None = None):
        self.total = max(total, 0)
        self.label = label
        self.unit = unit
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None
        self._task: Any = None
        if self.enabled:
            self._start()

    def _start(self) -> None:
        # rich is loaded only to draw: most runs (tests, pipes, the Dagster UI) never need it
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        label = TextColumn("stretto: {task.description}")
        unit = TextColumn(self.unit.strip())
        if self.total:
            columns = [label, BarColumn(), MofNCompleteColumn(), unit, TimeRemainingColumn()]
        else:  # how much there is to do is not known: a counter
            columns = [label, TextColumn("{task.completed}"), unit, TimeElapsedColumn()]
        bar = Bar(
            *columns,
            console=_console(),
            # stdout carries the command's output; stderr lines are printed above the bar
            redirect_stdout=False,
        )
        bar.start()  # on the screen's other bars, if any (rich stacks them)
        self._bar = bar
        self._task = bar.add_task(self.label, total=self.total or None)
        _drawn[self] = None

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        _drawn.pop(self, None)


_drawn: dict[Progress, None] = {}  # the bars on screen, in the order they were opened
_consoles: list = []


def _console():
    """The one console every bar is drawn on (stderr), so that bars open at once stack."""
    if not _consoles:
        from rich.console import Console  # only to draw, as in Progress._start

        _consoles.append(Console(stderr=True, force_terminal=True))
    return _consoles[0]


def close_all() -> None:
    """Take every bar off the screen (a command that failed half-way leaves its bar open, and
    the cursor hidden)."""
    for progress in reversed(list(_drawn)):  # the newest first: rich nests them
        progress.close()
