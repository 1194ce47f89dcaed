"""`stretto ingest --retain-days DAYS`: take the warehouse's data older than DAYS out, in one
commit.

Every table is partitioned by the day its session started (`day=YYYY-MM-DD`), so the files of
the days before the cutoff hold exactly the sessions that started then. One registry commit
lists them as `dropped` (warehouse/registry.py): readers see all of them gone at once or none,
a crash before the commit changes nothing, and one after it leaves files no reader reads,
deleted by this run or the next (`store.recover`). The logs themselves are not touched
(`stretto-proxy --retain-days` deletes those), and a log already ingested is not ingested again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import duckdb

from warehouse import registry, store
from warehouse.layout import Layout

_DAY = re.compile(r"(?:^|/)day=(\d{4}-\d{2}-\d{2})(?:/|$)")


@dataclass
class Dropped:
    before: date  # data of sessions that started before this day (UTC) was dropped
    files: int = 0
    rows: int = 0
    sessions: int = 0

    def said(self, days: int) -> str:
        return (
            f"--retain-days {days}: dropped {self.sessions} session(s) that started before "
            f"{self.before.isoformat()} ({self.rows} rows in {self.files} Parquet file(s))"
        )


def cutoff(days: int, today: date | None = None) -> date:
    return (today or datetime.now(UTC).date()) - timedelta(days=days)


def old_files(layout: Layout, before: date) -> list[dict]:
    """The warehouse's data files of the days before `before`: registry rows to drop."""
    con = duckdb.connect()
    try:
        registry.load(con, layout)
        rows = con.execute("SELECT table_name, path, rows FROM data_files").fetchall()
    finally:
        con.close()
    old = []
    for table, path, count in rows:
        found = _DAY.search(path)
        if found and date.fromisoformat(found.group(1)) < before:
            old.append({"table_name": table, "path": path, "rows": count})
    return old


def drop_older(layout: Layout, days: int, run_id: str, today: date | None = None) -> Dropped:
    """Drop the data older than `days` days in one commit; what went. Call with the ingest
    lock held."""
    store.recover(layout)
    dropped = Dropped(cutoff(days, today))
    old = old_files(layout, dropped.before)
    if not old:
        return dropped
    store.begin_run(layout, run_id)
    store.commit_run(layout, run_id, [], [], dropped=old)
    store.delete_dropped(layout)
    dropped.files = len(old)
    dropped.rows = sum(r["rows"] or 0 for r in old)
    dropped.sessions = sum(r["rows"] or 0 for r in old if r["table_name"] == "sessions")
    return dropped
