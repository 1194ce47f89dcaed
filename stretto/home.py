"""STRETTO_HOME and the folders under it: one place that says where things live.

    logs/<domain>/<session>.jsonl         written by stretto-proxy
    shadow/<domain>/, explore/<domain>/   what it records serving a flow in shadow mode, or
                                          exploring (as `stretto init` configures it)
    flows/<domain>.flow.json              the served flows (<domain>.staged.flow.json: a
                                          relearned one waiting for review)
    reports/<domain>/<kind>-<time>/       audit, replay and evaluation tables
    cache/                                what `learn` and `compile` keep between runs
    warehouse/                            Parquet and DuckDB (warehouse.layout says what is in it)
    oracle-cache/                         the System-One runners' answers (stretto.oracle.cache)

Nothing here creates a folder: the code that writes one does.

Everything stretto writes under the home is private to its user: files 0600, folders 0700,
whatever the umask (session logs hold tool results, which hold secrets). One helper for every
writer: `write_private(path, data)` writes a file whole or not at all and 0600 from its first
byte (bytes, text, or a function that writes the file it is given: polars, pyarrow,
matplotlib), making its missing folders 0700; `private_dirs(folder)` creates a folder (and
its missing parents) as 0700, `make_private(path)` sets a file's or folder's mode after
someone else (DuckDB) created it, `private_tree(root)` does that for a whole tree. Symlinks
are left alone (they may point at the user's own folders). So is a folder the user named
that exists already (`--out DIR`): the files stretto writes in it are private all the same.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
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

    def flow(self, domain: str, variant: str | None = None) -> Path:
        """The domain's served flow, `flows/<domain>.flow.json`; with `variant` (`new`,
        `promoted`, ...) a flow beside it, `flows/<domain>.<variant>.flow.json`."""
        return self.flows / (f"{domain}.{variant}.flow.json" if variant else f"{domain}.flow.json")

    def staged_flow(self, domain: str) -> Path:
        """The relearned flow staged beside the served one until it is reviewed
        (stretto.offline.lifecycle.versions.staged_path of `flow(domain)`)."""
        return self.flow(domain, "staged")

    @property
    def reports(self) -> Path:
        return self.home / "reports"

    @property
    def cache(self) -> Path:
        return self.home / "cache"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse"

    @property
    def oracle_cache(self) -> Path:
        """The answer cache's default folder (`--oracle-cache` names another)."""
        return self.home / "oracle-cache"

    def report_folder(self, domain: str, kind: str, when: float | None = None) -> Path:
        """A new report's folder, `reports/<domain>/<kind>-<UTC time>` (e.g.
        `audit-20261121T030000`); `when` is seconds since the epoch (default: now)."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when))
        return self.reports / domain / f"{kind}-{stamp}"


# --- privacy ---------------------------------------------------------------------------------

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dirs(folder: str | os.PathLike, own: bool = True) -> Path:
    """Create `folder` and its missing parents with mode 0700; make `folder` 0700 if it
    existed and is stretto's `own` (not one the user named). Existing parents keep their mode
    (the home's parent is not ours)."""
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
    if not missing and own:
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


TEMP_MARK = ".tmp-"  # temporary files are named .<name>.tmp-<pid>; readers never list them


def temp_beside(path: Path) -> Path:
    return path.parent / f".{path.name}{TEMP_MARK}{os.getpid()}"


def fsync_path(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: str | os.PathLike, data: bytes | str | Callable[[Path], object]) -> Path:
    """Write `path` whole or not at all, 0600 from its first byte whatever the umask: `data`
    (bytes, text as UTF-8, or a function that writes the file it is given) goes to a
    temporary file beside it, made 0600 before anything is in it, then fsync, rename, fsync
    of the folder. Missing folders are made 0700; an existing one keeps its mode. The path."""
    path = Path(path)
    private_dirs(path.parent, own=False)
    # one of its own per thread: the console's threads may write one file at once
    temp = temp_beside(path).with_name(f"{temp_beside(path).name}.{threading.get_native_id()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # one a crashed run left may have another mode
            if not callable(data):
                view = memoryview(data.encode() if isinstance(data, str) else data)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        if callable(data):  # the writer truncates the file it is given, which keeps its mode
            data(temp)
        fsync_path(temp)
        make_private(temp)  # a writer that made the file anew
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
    return path


def read_secret(path: str | os.PathLike, option: str) -> str:
    """The text of a file that holds a secret (a token), `option` naming it in messages (e.g.
    `--listen-token-file`). ValueError, one line, when it cannot be read, or when anyone but
    its owner may read or write it (a token others can read lets them in; one they can write
    lets them choose it): the fix is `chmod 600` — ssh refuses its keys the same way."""
    shown = os.fspath(path)
    try:
        with open(os.path.expanduser(shown), encoding="utf-8") as f:
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            if mode & 0o077:
                raise ValueError(
                    f"{option} {shown}: other users may read or write it (mode {mode:04o}); "
                    f"make it the owner's alone: chmod 600 {shown}"
                )
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{option} {shown}: cannot read: {exc}") from exc
