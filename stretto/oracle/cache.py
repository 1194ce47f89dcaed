"""The answer cache (`--oracle-cache DIR`, default `$STRETTO_HOME/oracle-cache`): one file
per question, `<dir>/<ab>/<key>.json`, key = SHA-256 of the serialized request, `ab` its
first two hex digits. An entry holds the answers, the model's version and the token usage —
never the state (the conversation). Files 0600, folders 0700, written atomically: a reader
never sees half an entry, and a crash leaves no partial one."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from stretto.home import Paths

CACHE_VERSION = 1
_KEY = re.compile(r"^[0-9a-f]{64}$")


def default_cache_dir() -> Path:
    """HOME/oracle-cache, HOME the default home (stretto.home.Paths resolves it)."""
    return Paths.at().oracle_cache


class AnswerCache:
    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder).expanduser() if folder is not None else default_cache_dir()

    def path(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.folder / key[:2] / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def get(self, key: str) -> tuple[dict | None, str | None]:
        """(entry, None) on a hit; (None, None) on a miss; (None, why) when an entry is there
        but cannot be used (it is then asked again and overwritten)."""
        path = self.path(key)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"the cached answer {path} could not be read ({exc.strerror or exc})"
        try:
            entry = json.loads(text)
        except ValueError as exc:
            return None, f"the cached answer {path} is not JSON ({exc})"
        if (
            not isinstance(entry, dict)
            or entry.get("stretto_answer") != CACHE_VERSION
            or entry.get("key") != key
            or not isinstance(entry.get("answers"), dict)
        ):
            return None, f"the cached answer {path} is not an answer entry for its key"
        return entry, None

    def put(self, key: str, entry: dict[str, Any]) -> Path:
        path = self.path(key)
        entry = {**entry, "stretto_answer": CACHE_VERSION, "key": key}
        _private_dirs(path.parent, self.folder)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:8]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:  # mkstemp creates it 0600
                f.write(json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def _private_dirs(folder: Path, root: Path) -> None:
    """Make `folder` (and the cache root) if needed, 0700."""
    for directory in (root, folder):
        if not directory.is_dir():
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
