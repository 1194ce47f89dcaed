"""Sessions taken out of the warehouse, for good: every row of theirs in every table.

The walkthrough (scripts/walkthrough.py) starts afresh by taking its earlier sessions out,
whose logs it removes: ingest is append-only and never forgets a session whose log went away.
Each partition (table, domain, day) that holds a row of theirs has its current rows but theirs
rewritten into new files, and its old files retired, in one commit, as a compaction does
(warehouse/upkeep/compact.py): readers see the partition before or after, never both or neither.
The retired files are deleted by a later compaction, once no reader can still be reading them.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from warehouse import registry, store
from warehouse.ingest.batches import write_parquet
from warehouse.layout import TABLES, Layout
from warehouse.upkeep.compact import partition_files, partition_select


def forget_sessions(layout: Layout, sessions: Collection[str], run_id: str) -> dict[str, int]:
    """Take `sessions` (their ids) out of every table; call with the ingest lock held. What
    was done: sessions taken out, rows left in the partitions rewritten, files retired."""
    done = {"sessions": 0, "rows kept": 0, "files retired": 0}
    if not sessions or not registry.commit_names(layout):
        return done
    store.recover(layout)
    con = store.open_catalogue(layout)
    try:
        con.register("forgotten", pa.table({"session": sorted(set(sessions))}))
        con.execute("CREATE TEMP TABLE gone AS SELECT session FROM forgotten")
        con.unregister("forgotten")
        (found,) = con.execute(
            "SELECT count(*) FROM sessions SEMI JOIN gone USING (session)"
        ).fetchall()[0]
        done["sessions"] = int(found)
        files = partition_files(con)
        hit = sorted(
            (table, domain, str(day))
            for table in TABLES
            for domain, day in con.execute(
                f"SELECT DISTINCT domain, day FROM {table} SEMI JOIN gone USING (session)"
            ).fetchall()
        )
        written, retired = [], []
        store.begin_run(layout, run_id)
        for number, (table, domain, day) in enumerate(hit):
            query = (
                partition_select(table, domain, day)
                + " AND (session IS NULL OR session NOT IN (SELECT session FROM gone))"
            )
            rows, data = write_parquet(con, query, table, layout, run_id, f"{run_id}-{number}")
            written += data
            retired += [path for path, _ in files.get((table, domain, day), [])]
            done["rows kept"] += rows
    finally:
        con.close()
    store.close_run(layout, run_id, written, retired)
    done["files retired"] = len(retired)
    return done
