"""STRETTO_HOME and the folders under it: one place that says where things live.

    logs/<domain>/<session>.jsonl         written by stretto-proxy
    shadow/<domain>/, explore/<domain>/   what it records serving a flow in shadow mode, or
                                          exploring (as `stretto init` configures it)
    flows/<domain>.flow.json              the served flows
    reports/<domain>/<kind>-<time>/       audit, replay and evaluation tables
    cache/                                what `learn` and `compile` keep between runs
    warehouse/                            Parquet and DuckDB (warehouse.layout says what is in it)

Nothing here creates a folder: the code that writes one does.

Everything stretto writes under the home is private to its user: files 0600, folders 0700,
whatever the umask (session logs hold tool results, which hold secrets). One helper for every
writer: `private_dirs(folder)` creates a folder (and its missing parents) as 0700,
`make_private(path)` sets a file's or folder's mode after someone else (DuckDB, pyarrow,
matplotlib) created it, `private_tree(root)` does that for a whole tree. Symlinks are left
alone (they may point at the user's own folders).
"""

from __future__ import annotations

import os
import stat
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


# --- privacy ---------------------------------------------------------------------------------

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dirs(folder: str | os.PathLike) -> Path:
    """Create `folder` and its missing parents with mode 0700; make `folder` 0700 if it
    existed. Existing parents keep their mode (the home's parent is not ours)."""
    folder = Path(folder)
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            pass
        os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask; chmod is not
    if not missing:
        make_private(folder)
    return folder


def make_private(path: str | os.PathLike) -> None:
    """Make a file 0600 and a folder 0700 (a symlink is left alone: it may point at the
    user's own folder, as the learn cache's logs/ does)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return
    mode = DIR_MODE if stat.S_ISDIR(info.st_mode) else FILE_MODE
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def private_tree(root: str | os.PathLike) -> None:
    """make_private for `root` and everything under it (not following symlinks)."""
    make_private(root)
    for folder, dirs, files in os.walk(os.fspath(root)):
        for name in dirs + files:
            make_private(os.path.join(folder, name))
