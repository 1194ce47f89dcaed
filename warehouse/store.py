"""The warehouse's catalogue (views over the committed Parquet files), the lock that keeps
ingest runs one at a time, crash recovery, steps, and queries.

Readers never hold a file the writer needs: every stretto reader builds its views in an
in-memory DuckDB from the registry (`open_catalogue`), and `stretto.duckdb` — the same views
for DuckDB clients and notebooks — is rebuilt by each run under a temporary name and renamed
into place, so a client that has it open keeps reading the version it opened.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from stretto.home import make_private, private_dirs, private_tree
from warehouse import registry
from warehouse.discover import Plan, discover
from warehouse.files import fault, fsync_path, remove_stale_temps, temp_beside
from warehouse.ingest import IngestStats, ingest_files, write_parquet
from warehouse.layout import PARTITION_KEYS, PERSONAL_COMMENT, PERSONAL_DATA, TABLES, Layout
from warehouse.sql import statements
from warehouse.storage import committed, sql_text

# Statements a query may be: everything else could write (COPY, EXPORT, ATTACH, SET, ...).
READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN"}


class WarehouseBusy(RuntimeError):
    pass


class NoWarehouse(RuntimeError):
    pass


class QueryRefused(duckdb.PermissionException):
    """A query that would write, or read outside the warehouse."""


def _holder(fd: int) -> str:
    return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"


@contextmanager
def ingest_lock(layout: Layout, wait_s: float, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the warehouse's ingest lock; wait up to `wait_s` for another run to finish. The
    lock file names its holder (pid and since when) for the message another run gives."""
    private_dirs(layout.warehouse)
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        make_private(layout.lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if wait_s <= 0:
                raise WarehouseBusy(
                    f"another ingest run ({holder}) is writing the warehouse {layout.warehouse}; "
                    "try again when it has finished"
                ) from None
            say(f"waiting for the ingest run ({holder}) to finish")
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise WarehouseBusy(
                            f"gave up after {wait_s:.0f} s waiting for the ingest run "
                            f"({holder}) writing the warehouse {layout.warehouse}"
                        ) from None
                    time.sleep(0.2)
        since = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {since}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def recover(layout: Layout) -> list[str]:
    """Undo what runs that crashed before their commit left (call with the lock held): their
    staged and moved-in Parquet files, temporary files. The ingest ids it cleaned up."""
    remove_stale_temps(layout.registry)
    remove_stale_temps(layout.warehouse)
    if layout.warehouse.is_dir() and not registry.commit_names(layout):
        private_tree(layout.warehouse)  # a new warehouse, or one from before the registry
    if not layout.staging.is_dir():
        return []
    done = registry.committed_ids(layout)
    cleaned = []
    for run in sorted(layout.staging.iterdir()):
        if run.name not in done:
            committed(layout).delete_named(f"part-{run.name}-")
            cleaned.append(run.name)
        shutil.rmtree(run, ignore_errors=True)
    return cleaned


def delete_dropped(layout: Layout) -> int:
    """Delete the data files a committed retention run dropped that are still there (its
    own, or those of a run that crashed after its commit); how many."""
    table = registry.read(layout)
    kinds, paths = table.column("kind").to_pylist(), table.column("path").to_pylist()
    data = committed(layout)
    deleted = 0
    for kind, path in zip(kinds, paths, strict=True):
        if kind == "dropped" and data.exists(path):
            data.delete(path)
            deleted += 1
    return deleted


def begin_run(layout: Layout, ingest_id: str) -> None:
    """Mark a run as started (its staging folder): until it commits, a crash is undone by
    `recover`."""
    private_dirs(layout.staging / ingest_id)
    fsync_path(layout.staging)


def commit_run(
    layout: Layout,
    ingest_id: str,
    logs: list[dict],
    data: list[dict],
    dropped: list[dict] | None = None,
    retired: Sequence[str] = (),
) -> None:
    """Commit a run (its registry file), then rebuild stretto.duckdb for DuckDB clients."""
    fault("before-commit")
    registry.commit(layout, ingest_id, logs, data, dropped, list(retired))
    fault("after-commit")
    shutil.rmtree(layout.staging / ingest_id, ignore_errors=True)
    write_catalogue(layout)


def abandon_run(layout: Layout, ingest_id: str) -> None:
    """A run that found nothing to commit: drop its mark, keep the catalogue current (a
    moved home gets its views' paths right)."""
    shutil.rmtree(layout.staging / ingest_id, ignore_errors=True)
    write_catalogue(layout)


def ingest_run(
    layout: Layout,
    plan: Plan,
    ingest_id: str,
    on_batch: Callable[[IngestStats], None] | None = None,
    say: Callable[[str], None] = lambda message: None,
) -> tuple[Plan, IngestStats]:
    """One ingest run, with the lock held: undo what a crashed run left, read the planned
    files (planned again if another run committed since), commit. The plan it followed and
    what it read."""
    for crashed in recover(layout):
        say(f"removed the uncommitted files of the crashed run {crashed}")
    delete_dropped(layout)
    state = known_state(layout)
    if state.commits != plan.commits:
        plan = discover(layout, state, logs=plan.logs)
    begin_run(layout, ingest_id)
    stats = ingest_files(plan.read, ingest_id, layout, on_batch=on_batch)
    if stats.logs or plan.known:
        commit_run(layout, ingest_id, stats.logs + plan.known, stats.data)
    else:
        abandon_run(layout, ingest_id)
    return plan, stats


def _empty_select(table: str) -> str:
    columns = [*TABLES[table], *PARTITION_KEYS]
    return (
        "SELECT " + ", ".join(f"NULL::{kind} AS {name}" for name, kind in columns) + " WHERE false"
    )


def table_select(con, layout: Layout, table: str) -> str:
    files = con.execute(
        "SELECT path, size_bytes FROM data_files WHERE table_name = ? ORDER BY commit_no, path",
        [table],
    ).fetchall()
    if not files:
        return _empty_select(table)
    # Files written before a column was added lack it (it reads as NULL there).
    source, present = committed(layout).scan(con, table, files)
    columns = [
        f"t.{name}" if name in present else f"CAST(NULL AS {kind}) AS {name}"
        for name, kind in [*TABLES[table], *PARTITION_KEYS]
    ]
    if table == "sessions":  # where the log is now (it may have moved since)
        columns[[n for n, _ in TABLES[table]].index("file")] = "coalesce(p.path, t.file) AS file"
        return (
            f"SELECT {', '.join(columns)} FROM {source} t "
            "SEMI JOIN session_current c USING (session, ingest_id) "
            "LEFT JOIN content_path p USING (content_hash)"
        )
    if table == "quarantine":
        columns[[n for n, _ in TABLES[table]].index("file")] = "coalesce(p.path, t.file) AS file"
        return (
            f"SELECT {', '.join(columns)} FROM {source} t "
            "SEMI JOIN live_quarantine q USING (content_hash, ingest_id) "
            "LEFT JOIN content_path p USING (content_hash)"
        )
    return (
        f"SELECT {', '.join(columns)} FROM {source} t "
        "SEMI JOIN session_current c USING (session, ingest_id)"
    )


def build_catalogue(con, layout: Layout, temp: bool = True) -> None:
    """The registry's tables and one view per table on `con`. A persistent catalogue of a
    warehouse on an object store holds the registry's tables only (its views read through
    pyarrow datasets that live on one connection)."""
    registry.load(con, layout, temp=temp)
    if not temp and committed(layout).remote:
        return
    kind = "TEMP VIEW" if temp else "VIEW"
    for table in TABLES:
        con.execute(f"CREATE OR REPLACE {kind} {table} AS {table_select(con, layout, table)}")
        for column in PERSONAL_DATA.get(table, ()):  # the tag: duckdb_columns().comment
            con.execute(f"COMMENT ON COLUMN {table}.{column} IS {sql_text(PERSONAL_COMMENT)}")


def open_catalogue(layout: Layout) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the warehouse's views: what every stretto reader uses."""
    if not has_warehouse(layout):
        where = committed(layout).where
        raise NoWarehouse(f"no warehouse at {where} yet: run `stretto ingest` first")
    con = duckdb.connect()
    try:
        build_catalogue(con, layout)
    except BaseException:
        con.close()
        raise
    return con


def has_warehouse(layout: Layout) -> bool:
    """Whether there is a warehouse to read: the folder under the home, or, on an object
    store, a committed run."""
    if committed(layout).remote:
        return bool(registry.commit_names(layout))
    return layout.warehouse.is_dir()


def write_catalogue(layout: Layout) -> None:
    """Rebuild stretto.duckdb (for DuckDB clients: open it read-only) and swap it in."""
    temp = temp_beside(layout.database)
    temp.unlink(missing_ok=True)
    con = duckdb.connect(str(temp))
    try:
        build_catalogue(con, layout, temp=False)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    fsync_path(temp)
    make_private(temp)
    # a WAL left by a client that opened the old file read-write belongs to the old file
    layout.database.with_name(layout.database.name + ".wal").unlink(missing_ok=True)
    os.replace(temp, layout.database)
    fsync_path(layout.warehouse)


def known_state(layout: Layout) -> registry.State:
    return registry.state(layout)


def derive_steps(layout: Layout, steps_id: str) -> int:
    """Write and commit the steps of every current session that has none yet; how many
    rows. Call with the ingest lock held."""
    recover(layout)
    con = open_catalogue(layout)
    try:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE pending_steps AS "
            "SELECT s.session, s.ingest_id FROM session_current s "
            "SEMI JOIN sessions v USING (session, ingest_id) "  # not those retention dropped
            "WHERE NOT EXISTS (SELECT 1 FROM steps t WHERE t.session = s.session "
            "AND t.ingest_id = s.ingest_id)"
        )
        pending = con.execute("SELECT count(*) FROM pending_steps").fetchall()[0][0]
        if not pending:
            return 0
        begin_run(layout, steps_id)
        (query,) = [sql for name, sql in statements("steps") if name == "steps"]
        written, data = write_parquet(con, query, "steps", layout, steps_id, f"{steps_id}-steps")
    finally:
        con.close()
    commit_run(layout, steps_id, [], data)
    return written


def _check_read_only(sql: str) -> None:
    try:
        found = duckdb.extract_statements(sql)
    except duckdb.Error:
        return  # a syntax error: DuckDB says where when the query runs
    for statement in found:
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise QueryRefused(
                f"`stretto sql` runs read-only queries (SELECT, EXPLAIN); refused: {kind} statement"
            )


Read = Callable[[str], pa.Table]  # a read-only query on an open catalogue (`reading`)


@contextmanager
def reading(layout: Layout) -> Iterator[Read]:
    """One catalogue for several read-only queries: yields `run(sql) -> pyarrow Table`, each
    query held to what `query` allows. Building the catalogue costs more than a small query, so
    a caller with several (an asset's metadata) opens it once."""
    con = open_catalogue(layout)
    try:
        con.execute(f"SET allowed_directories = [{sql_text(str(layout.parquet) + os.sep)}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")

        def run(sql: str) -> pa.Table:
            _check_read_only(sql)
            result = con.sql(sql)
            if result is None:
                raise QueryRefused("`stretto sql`: the query returned no rows to show")
            return result.to_arrow_table()

        yield run
    finally:
        con.close()


def query(layout: Layout, sql: str) -> pa.Table:
    """Run a read-only query against the warehouse's views; a pyarrow Table. The query may
    read the warehouse's Parquet files and nothing else: no other file, no writes, no
    settings (DuckDB's external access is off and its configuration locked)."""
    _check_read_only(sql)  # before the catalogue is built
    with reading(layout) as run:
        return run(sql)
