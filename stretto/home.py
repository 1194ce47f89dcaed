"""STRETTO_HOME and the folders under it: one place that says where things live.

    logs/<domain>/<session>.jsonl         written by stretto-proxy
    shadow/<domain>/, explore/<domain>/   what it records serving a flow in shadow mode, or
                                          exploring (as `stretto init` configures it)
    flows/<domain>.flow.json              the served flows
    reports/<domain>/<kind>-<time>/       audit, replay and evaluation tables
    cache/                                what `learn` and `compile` keep between runs
    warehouse/                            Parquet and DuckDB (warehouse.layout says what is in it)

Nothing here creates a folder: the code that writes one does.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self


def default_home() -> Path:
    """$STRETTO_HOME, else ~/.stretto."""
    return Path(os.environ.get("STRETTO_HOME") or "~/.stretto").expanduser()


@dataclass(frozen=True)
class Paths:
    """The paths under one STRETTO_HOME."""

    home: Path

    @classmethod
    def at(cls, home: str | Path | None = None) -> Self:
        """The paths under `home` (default: default_home()), made absolute."""
        return cls(Path(home).expanduser().resolve() if home else default_home().resolve())

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def shadow(self) -> Path:
        return self.home / "shadow"

    @property
    def explore(self) -> Path:
        return self.home / "explore"

    @property
    def flows(self) -> Path:
        return self.home / "flows"

    @property
    def reports(self) -> Path:
        return self.home / "reports"

    @property
    def cache(self) -> Path:
        return self.home / "cache"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    def report_folder(self, domain: str, kind: str, when: float | None = None) -> Path:
        """A new report's folder, `reports/<domain>/<kind>-<UTC time>` (e.g.
        `audit-20261121T030000`); `when` is seconds since the epoch (default: now)."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when))
        return self.reports / domain / f"{kind}-{stamp}"
