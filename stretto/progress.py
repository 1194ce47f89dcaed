"""A progress bar on stderr when it is a terminal, and nothing when it is not."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, unit: str = "", enabled: bool | None = None):
        self.total = max(total, 0)
        self.label = label
        self.unit = unit
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._started = time.monotonic()
        self._drawn = 0.0

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        now = time.monotonic()
        finished = bool(self.total) and self.done >= self.total
        if self.enabled and (now - self._drawn > 0.1 or finished):
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = now - self._started
        if not self.total:  # how much there is to do is not known: a counter
            sys.stderr.write(f"\rstretto: {self.label} {self.done}{self.unit} {elapsed:5.1f}s")
            sys.stderr.flush()
            return
        width = 30
        share = self.done / self.total if self.total else 1.0
        filled = int(width * min(share, 1.0))
        sys.stderr.write(
            f"\rstretto: {self.label} [{'#' * filled}{'.' * (width - filled)}] "
            f"{self.done}/{self.total}{self.unit} {elapsed:5.1f}s"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and (self.total or self.done):
            sys.stderr.write("\n")
            sys.stderr.flush()
