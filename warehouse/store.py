"""The warehouse's DuckDB file: the registry of ingested files, the views over the Parquet
tables, the steps derived from them, the lock that keeps ingest runs one at a time, and
queries."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from warehouse.ingest import append_parquet, sql_statements
from warehouse.layout import PARTITION_KEYS, TABLES, Layout

REGISTRY_DDL = """
CREATE TABLE IF NOT EXISTS ingested_files (
    path VARCHAR, size_bytes BIGINT, mtime_ns BIGINT, content_hash VARCHAR,
    session VARCHAR, ingest_id VARCHAR, ingested_at TIMESTAMP DEFAULT current_timestamp
)"""
# The latest ingest of each file: its rows are the ones the views show.
CURRENT_DDL = """
CREATE OR REPLACE VIEW current_files AS
SELECT * FROM ingested_files
QUALIFY row_number() OVER (PARTITION BY path ORDER BY ingested_at DESC, ingest_id DESC) = 1"""


class WarehouseBusy(RuntimeError):
    pass


class NoWarehouse(RuntimeError):
    pass


@contextmanager
def ingest_lock(layout: Layout, wait_s: float, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the warehouse's ingest lock; wait up to `wait_s` for another run to finish."""
    layout.warehouse.mkdir(parents=True, exist_ok=True)
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            if wait_s <= 0:
                raise WarehouseBusy(
                    f"another ingest run ({holder}) is writing the warehouse {layout.warehouse}; "
                    "try again when it has finished"
                ) from None
            say(f"waiting for the ingest run of {holder} to finish")
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise WarehouseBusy(
                            f"gave up after {wait_s:.0f} s waiting for the ingest run of {holder}"
                        ) from None
                    time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def connect(layout: Layout, read_only: bool = False, attempts: int = 50):
    """Open the DuckDB file; retry briefly while another process holds it."""
    if read_only and not layout.database.exists():
        raise NoWarehouse(f"no warehouse at {layout.warehouse} yet: run `stretto ingest` first")
    layout.warehouse.mkdir(parents=True, exist_ok=True)
    for attempt in range(attempts):
        try:
            return duckdb.connect(str(layout.database), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or attempt == attempts - 1:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def known_files(layout: Layout) -> dict[str, tuple[int, int, str]]:
    """path -> (size, mtime_ns, content hash) of each file's latest ingest."""
    if not layout.database.exists():
        return {}
    con = connect(layout)
    try:
        con.execute(REGISTRY_DDL)
        con.execute(CURRENT_DDL)
        rows = con.execute(
            "SELECT path, size_bytes, mtime_ns, content_hash FROM current_files"
        ).fetchall()
        return {path: (size, mtime, digest) for path, size, mtime, digest in rows}
    finally:
        con.close()


def _empty_select(table: str) -> str:
    columns = [*TABLES[table], *PARTITION_KEYS]
    return (
        "SELECT " + ", ".join(f"NULL::{kind} AS {name}" for name, kind in columns) + " WHERE false"
    )


def _parquet_select(con, layout: Layout, table: str) -> str:
    directory = layout.table_dir(table)
    if not directory.is_dir() or not any(directory.rglob("*.parquet")):
        return _empty_select(table)
    key = "file" if table == "quarantine" else "session"
    files = (
        f"read_parquet('{directory}/**/*.parquet', hive_partitioning = true, union_by_name = true)"
    )
    # Files written before a column was added lack it: it reads as NULL there.
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {files}").fetchall()}
    columns = ", ".join(
        f"t.{name}" if name in present else f"CAST(NULL AS {kind}) AS {name}"
        for name, kind in [*TABLES[table], *PARTITION_KEYS]
    )
    return (
        f"SELECT {columns} FROM {files} t "
        f"SEMI JOIN current_files c "
        f"ON c.{'path' if key == 'file' else 'session'} = t.{key} AND c.ingest_id = t.ingest_id"
    )


def refresh_views(con, layout: Layout) -> None:
    con.execute(REGISTRY_DDL)
    con.execute(CURRENT_DDL)
    for table in TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {_parquet_select(con, layout, table)}")


def record_ingest(layout: Layout, registry_rows: list[tuple]) -> None:
    """Add the files of an ingest run to the registry and point the views at their rows."""
    con = connect(layout)
    try:
        con.execute(REGISTRY_DDL)
        if registry_rows:
            names = ["path", "size_bytes", "mtime_ns", "content_hash", "session", "ingest_id"]
            rows = pa.table({n: [r[i] for r in registry_rows] for i, n in enumerate(names)})
            con.register("new_files", rows)
            con.execute(
                f"INSERT INTO ingested_files ({', '.join(names)}) "
                f"SELECT {', '.join(names)} FROM new_files"
            )
            con.unregister("new_files")
        refresh_views(con, layout)
    finally:
        con.close()


def derive_steps(layout: Layout, tag: str) -> int:
    """Write the steps of every current session that has none yet; how many rows."""
    con = connect(layout)
    try:
        refresh_views(con, layout)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE pending_steps AS "
            "SELECT DISTINCT s.session, s.ingest_id FROM sessions s "
            "WHERE NOT EXISTS (SELECT 1 FROM steps t WHERE t.session = s.session "
            "AND t.ingest_id = s.ingest_id)"
        )
        (query,) = [sql for name, sql in sql_statements("steps") if name == "steps"]
        written = append_parquet(con, query, "steps", layout, tag)
        refresh_views(con, layout)
        return written
    finally:
        con.close()


def query(layout: Layout, sql: str):
    """Run one query against the warehouse; a pyarrow Table."""
    con = connect(layout, read_only=True)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
