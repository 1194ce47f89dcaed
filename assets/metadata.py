"""Metadata a person can read in the Dagster UI: column schemas with descriptions, a preview
of a table's first rows, tables, plots as images, paths as links, timings."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from warehouse.columns import columns
from warehouse.layout import PERSONAL_DATA

PREVIEW_ROWS = 5
PREVIEW_CELL = 60  # characters shown of a long cell


def column_schema(table: str) -> dg.TableSchema:
    """The table's columns with what they mean; those that can hold personal data tagged
    `personal_data` (warehouse.layout.PERSONAL_DATA)."""
    personal = PERSONAL_DATA.get(table, ())
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name,
                kind,
                description=description,
                tags={"personal_data": ""} if name in personal else None,
            )
            for name, kind, description in columns(table)
        ]
    )


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    text = text.replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= PREVIEW_CELL else text[: PREVIEW_CELL - 1] + "…"


def preview(rows: Sequence[dict], names: Sequence[str]) -> dg.MetadataValue:
    """The rows as a Markdown table (long cells cut)."""
    if not rows:
        return dg.MetadataValue.md("_no rows_")
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(_cell(row.get(n)) for n in names) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))


def table(rows: Sequence[dict], kinds: dict[str, str]) -> dg.MetadataValue:
    """Rows as a Dagster table: `kinds` maps each column to string, int, float or bool."""
    return dg.MetadataValue.table(
        records=[dg.TableRecord({k: v for k, v in r.items() if v is not None}) for r in rows],
        schema=dg.TableSchema(columns=[dg.TableColumn(n, k) for n, k in kinds.items()]),
    )


def image(path: Path, title: str) -> dg.MetadataValue:
    """A PNG shown in the UI (Markdown with the image inline)."""
    data = base64.b64encode(path.read_bytes()).decode()
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{data})")


# A run tag: the caller reads every asset's metadata, so each asset materializes even when
# it had nothing new (see assets.ingest.materializes_every_asset).
EVERY_ASSET = "stretto/every_asset"


def skipped(context, reason: str, key: str | None = None) -> dg.MaterializeResult:
    """An asset with nothing to work on (a home that lacks its input): said in the run log and
    materialized with the reason as its only metadata (a backfill counts an asset that does not
    materialize as failed)."""
    context.log.info(f"skipped: {reason}")
    return dg.MaterializeResult(asset_key=key, metadata={"skipped": dg.MetadataValue.text(reason)})


def link(path: Path) -> dg.MetadataValue:
    return dg.MetadataValue.path(str(path))


class Timings:
    """Seconds per phase of an asset, for its metadata; each phase over a few seconds is said
    in the run log as it ends."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        took = time.monotonic() - start
        self.seconds[name] = round(took, 3)
        if took > 2:
            self.say(f"{name}: {took:.1f} s")

    def metadata(self) -> dict[str, dg.MetadataValue]:
        return {f"seconds: {name}": dg.MetadataValue.float(s) for name, s in self.seconds.items()}


class LogProgress:
    """A progress object (advance/close, as stretto.progress.Progress) that says how far it
    got in the run log every `every` seconds."""

    def __init__(self, say: Callable[[str], None], total: int | None, what: str, every=5.0):
        self.say, self.total, self.what, self.every = say, total, what, every
        self.done = 0
        self.start = self.last = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            of = f" of {self.total}" if self.total else ""
            self.say(f"{self.what}: {self.done}{of} after {now - self.start:.0f} s")

    def close(self) -> None:
        if time.monotonic() - self.start >= self.every:
            self.say(f"{self.what}: {self.done} in {time.monotonic() - self.start:.0f} s")
