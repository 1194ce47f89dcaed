"""The steps run: the abstract steps (warehouse/sql/steps.sql) of the current sessions that
have none yet, derived from the data files committed since the first ingest run no steps run
has done, written and committed as a run of its own (call with the ingest lock held)."""

from __future__ import annotations

from warehouse.ingest.batches import limit_memory, write_parquet
from warehouse.layout import Layout
from warehouse.sql import statements
from warehouse.store import begin_run, commit_run, open_catalogue, recover, table_select

STEPS_MEMORY = "1500MB"  # DuckDB's share when deriving steps (the process adds ~0.5 GB)


def derive_steps(layout: Layout, steps_id: str) -> int:
    """Write and commit the steps of every current session that has none yet; how many
    rows. Call with the ingest lock held."""
    recover(layout)
    done = write_steps(layout, steps_id)
    if done is None:
        return 0
    written, data, runs = done
    commit_run(layout, steps_id, [], data, derived=runs)
    return written


def write_steps(layout: Layout, steps_id: str) -> tuple[int, list[dict], list[str]] | None:
    """The steps run before its commit: the steps of the current sessions of the ingest runs
    no steps run has done, read from the data files committed since the first of them
    (warehouse/sql/steps.sql) and written (not committed). How many rows, the registry rows
    of the files, the ingest runs done; None when there is nothing to do."""
    sql = dict(statements("steps"))
    con = open_catalogue(layout, tables=())  # the registry's tables; the views come below
    try:
        con.execute(sql["steps_runs"])
        runs = con.execute("SELECT ingest_id, commit_no FROM steps_runs").fetchall()
        if not runs:
            return None
        since = min(commit for _, commit in runs)
        for table in ("sessions", "context", "calls", "steps"):
            con.execute(f"CREATE TEMP VIEW {table} AS {table_select(con, layout, table, since)}")
        con.execute(sql["pending_steps"])
        pending = con.execute("SELECT count(*) FROM pending_steps").fetchall()[0][0]
        begin_run(layout, steps_id)
        # every pending session's calls at once: unbounded, the windows held 11 GB at 1M
        # sessions (docs/scaling.md); DuckDB spills past the limit instead
        limit_memory(con, STEPS_MEMORY, layout.staging / steps_id / "spill")
        written, data = 0, list[dict]()
        if pending:
            tag = f"{steps_id}-steps"
            written, data = write_parquet(con, sql["steps"], "steps", layout, steps_id, tag)
    finally:
        con.close()
    return written, data, sorted(run for run, _ in runs)
