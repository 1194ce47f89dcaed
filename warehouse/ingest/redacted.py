"""`stretto ingest --redact`: a warehouse of pseudonymised sessions, to share without its values.

The logs under HOME/logs/ are copied through `stretto redact`'s pseudonymisation
(stretto.logs.redact: the one implementation; each folder of logs is one census) into
HOME/warehouse/redacted/, mirroring the folders, and ingest reads that copy instead of the
logs: no original value of an argument, a result, the conversation, a notification or an
error text reaches the warehouse. A copy whose log is gone is removed; a copy that would come
out the same is not rewritten (its content, so its rows, stay as they are).

A warehouse is redacted or not, for good: a marker (warehouse/redaction.json, the options it
was made with, never the salt) is written by the first redacted run, and ingest refuses to mix
— the originals of a redacted warehouse would otherwise come in as conflicting copies of its
sessions, or the other way round.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stretto.home import private_dirs
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV, RedactError
from stretto.logs.redact import redact_folder, salt_from_env
from warehouse import registry
from warehouse.files import write_atomic
from warehouse.layout import Layout


@dataclass(frozen=True)
class Redaction:
    """How `ingest --redact` pseudonymises (stretto redact's options)."""

    salt_env: str = SALT_ENV
    keep_shared: int = KEEP_SHARED
    hash_fields: tuple[str, ...] = field(default_factory=tuple)


def root(layout: Layout) -> Path:
    return layout.warehouse / "redacted"


def marker(layout: Layout) -> Path:
    return layout.warehouse / "redaction.json"


def check(layout: Layout, redaction: Redaction | None) -> None:
    """Refuse an ingest that would mix redacted and original sessions (RedactError)."""
    redacted = marker(layout).is_file()
    if redaction is None and redacted:
        raise RedactError(
            f"the warehouse {layout.warehouse} holds redacted sessions only: ingest with "
            "--redact (the same salt), or into another home"
        )
    if redaction is not None and not redacted and registry.commit_names(layout):
        raise RedactError(
            f"the warehouse {layout.warehouse} holds sessions as they were recorded: a "
            "redacted warehouse needs a home of its own (--home DIR)"
        )
    if redaction is not None:
        salt_from_env(redaction.salt_env)  # set and not empty, before anything is done


def redact_logs(layout: Layout, redaction: Redaction, say: Callable[[str], None]) -> Path:
    """Bring the redacted copy of HOME/logs up to date; its root, for ingest to read."""
    salt = salt_from_env(redaction.salt_env)
    out_root = root(layout)
    private_dirs(out_root)
    wanted: set[Path] = set()
    if layout.logs.is_dir():
        for folder, dirs, names in os.walk(layout.logs):
            dirs.sort()
            if not any(n.endswith(".jsonl") for n in names):
                continue
            out = out_root / Path(folder).relative_to(layout.logs)
            report = redact_folder(
                folder,
                out,
                salt,
                keep_shared=redaction.keep_shared,
                hash_fields=redaction.hash_fields,
                lenient=True,
            )
            wanted.update(report.written)
            for note in report.left_out:
                say(f"{folder}: left out {note}")
    for folder, _, names in os.walk(out_root):
        for name in names:  # the copies of logs that are gone (moved away, deleted)
            path = Path(folder) / name
            if path not in wanted:
                path.unlink()
    text = json.dumps({"stretto_redaction": 1, **asdict(redaction)}, sort_keys=True) + "\n"
    if not marker(layout).is_file() or marker(layout).read_text() != text:
        write_atomic(marker(layout), lambda temp: _write_text(temp, text))
    return out_root


def _write_text(path: Path, text: str) -> None:
    path.write_text(text)
