"""Compaction: each partition's current rows of a table rewritten into one file.

Many small ingest runs leave many small Parquet files per partition, and rows a newer version
of a session replaced stay on disk, hidden by the views. A compaction run rewrites the current
rows of each (table, domain, day) that has more than one file, or rows no view shows, into one
file, and commits it as any run does: the new file and the old files it replaces (`retired`)
in one registry file. Readers see the old files or the new one, never both and never neither:
the commit is one rename. A reader that built its views before the commit may still be reading
the old files, so those are deleted only once their retirement is GRACE_SECONDS old (by a
later compaction run).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from warehouse import datastore, registry, store
from warehouse.ingest.batches import write_parquet
from warehouse.layout import TABLES, Layout

GRACE_SECONDS = 3600


def partition_of(path: str) -> tuple[str, str] | None:
    """(domain, day) of a data file's path (…/domain=<d>/day=<day>/<file>)."""
    parts = dict(p.split("=", 1) for p in path.split("/") if "=" in p)
    if "domain" in parts and "day" in parts:
        return parts["domain"], parts["day"]
    return None


def partition_files(con) -> dict[tuple[str, str, str], list[tuple[str, int]]]:
    """The committed data files of each partition (table, domain, day), with their rows, on
    a catalogue connection (store.open_catalogue)."""
    files: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
    for table_name, path, rows in con.execute(
        "SELECT table_name, path, rows FROM data_files ORDER BY path"
    ).fetchall():
        where = partition_of(path)
        if table_name in TABLES and where:
            files.setdefault((table_name, *where), []).append((path, int(rows)))
    return files


def partition_select(table: str, domain: str, day: str) -> str:
    """The query of one partition's current rows, the ones a rewrite of it writes."""
    return (
        f"SELECT * FROM {table} WHERE domain = '{domain.replace(chr(39), '')}' "
        f"AND day = DATE '{day}'"
    )


def remove_retired(layout: Layout, grace_seconds: float = GRACE_SECONDS) -> int:
    """Delete the files retired by commits older than the grace period; how many."""
    table = registry.read(layout).to_pylist()
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_seconds)
    data = datastore.committed(layout)
    removed = 0
    for row in table:
        if row["kind"] == "retired" and row["committed_at"] <= cutoff:
            if data.exists(row["path"]):
                data.delete(row["path"])
                removed += 1
    return removed


def compact(
    layout: Layout,
    compact_id: str,
    grace_seconds: float = GRACE_SECONDS,
    say: Callable[[str], None] = lambda message: None,
) -> dict[str, int]:
    """Compact every partition that needs it; call with the ingest lock held. What was done:
    partitions rewritten, files retired, rows written, files deleted (retired long enough)."""
    store.recover(layout)
    done = {"partitions": 0, "files retired": 0, "rows written": 0}
    done["files deleted"] = remove_retired(layout, grace_seconds)
    con = store.open_catalogue(layout)
    try:
        files = partition_files(con)
        current = {
            (t, d, str(day)): n
            for t in TABLES
            for d, day, n in con.execute(
                f"SELECT domain, day, count(*) FROM {t} GROUP BY ALL"
            ).fetchall()
        }
        written, retired = [], []
        store.begin_run(layout, compact_id)
        for number, ((table, domain, day), held) in enumerate(sorted(files.items())):
            stored = sum(n for _, n in held)
            if len(held) < 2 and current.get((table, domain, day), 0) == stored:
                continue
            query = partition_select(table, domain, day)
            rows, data = write_parquet(
                con, query, table, layout, compact_id, f"{compact_id}-{number}"
            )
            written += data
            retired += [path for path, _ in held]
            done["partitions"] += 1
            done["rows written"] += rows
            say(f"compacted {table} {domain} {day}: {len(held)} file(s) -> {len(data)}")
    finally:
        con.close()
    store.close_run(layout, compact_id, written, retired)
    done["files retired"] = len(retired)
    return done
