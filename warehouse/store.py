"""The warehouse's catalogue (views over the committed Parquet files), the lock that keeps
ingest runs one at a time, the runs' commits, crash recovery, and queries.

Readers never hold a file the writer needs: every stretto reader builds its views in an
in-memory DuckDB from the registry (`open_catalogue`), and `stretto.duckdb` — the same views
for DuckDB clients and notebooks — is rebuilt by each run under a temporary name and renamed
into place, so a client that has it open keeps reading the version it opened.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from stretto.home import make_private, private_dirs, private_tree
from warehouse import registry
from warehouse.datastore import committed, sql_text
from warehouse.files import fault, fsync_path, remove_stale_temps, temp_beside
from warehouse.layout import PARTITION_KEYS, PERSONAL_COMMENT, PERSONAL_DATA, TABLES, Layout

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
    dropped = table.filter(pc.equal(table.column("kind"), "dropped")).column("path")
    data = committed(layout)
    deleted = 0
    for path in dropped.to_pylist():
        if data.exists(path):
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
    derived: Sequence[str] = (),
) -> None:
    """Commit a run (its registry file), then rebuild stretto.duckdb for DuckDB clients."""
    fault("before-commit")
    registry.commit(layout, ingest_id, logs, data, dropped, list(retired), list(derived))
    fault("after-commit")
    shutil.rmtree(layout.staging / ingest_id, ignore_errors=True)
    write_catalogue(layout)


def abandon_run(layout: Layout, ingest_id: str) -> None:
    """A run that found nothing to commit: drop its mark, keep the catalogue current (a
    moved home gets its views' paths right)."""
    shutil.rmtree(layout.staging / ingest_id, ignore_errors=True)
    write_catalogue(layout)


def close_run(layout: Layout, run_id: str, written: list[dict], retired: list[str]) -> None:
    """End a run that rewrites partitions (compaction, forgetting sessions): commit the files
    it wrote in place of those it retires, or abandon it when it retires nothing."""
    if retired:
        commit_run(layout, run_id, [], written, retired=retired)
    else:
        abandon_run(layout, run_id)


def _empty_select(table: str) -> str:
    columns = [*TABLES[table], *PARTITION_KEYS]
    return (
        "SELECT " + ", ".join(f"NULL::{kind} AS {name}" for name, kind in columns) + " WHERE false"
    )


def view_name(table: str, since: int = 0, days_from: str = "") -> str:
    """The name of `table`'s view over the files `table_select` picks."""
    return f"{table}_{since}_{days_from.replace('-', '')}" if since or days_from else table


def table_select(
    con, layout: Layout, table: str, since: int = 0, days_from: str = "", confined: bool = False
) -> str:
    """The view of `table` over its data files: those committed from commit `since` on (they
    hold every row of the ingest runs committed since then) in the days from `days_from` on
    (YYYY-MM-DD; a file's day is its partition's). `confined`: read through pyarrow, so the
    connection needs to open no file itself (`reading`)."""
    files = con.execute(
        "SELECT path, size_bytes FROM data_files WHERE table_name = ? AND commit_no >= ? "
        "AND coalesce(regexp_extract(path, '/day=([^/]*)/', 1), '') >= ? "
        "ORDER BY commit_no, path",
        [table, since, days_from],
    ).fetchall()
    if not files:
        return _empty_select(table)
    # Files written before a column was added lack it (it reads as NULL there).
    name = view_name(table, since, days_from)
    source, present = committed(layout).scan(con, name, table, files, confined)
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


def build_catalogue(
    con,
    layout: Layout,
    temp: bool = True,
    tables: Collection[str] = tuple(TABLES),
    confined: bool = False,
) -> None:
    """The registry's tables and one view per table (of `tables`) on `con` (`confined`: see
    `table_select`). A persistent catalogue of a warehouse on an object store holds the
    registry's tables only (its views read through pyarrow datasets that live on one
    connection)."""
    registry.load(con, layout, temp=temp)
    if not temp and committed(layout).remote:
        return
    kind = "TEMP VIEW" if temp else "VIEW"
    for table in [t for t in TABLES if t in tables]:
        select = table_select(con, layout, table, confined=confined)
        con.execute(f"CREATE OR REPLACE {kind} {table} AS {select}")
        for column in PERSONAL_DATA.get(table, ()):  # the tag: duckdb_columns().comment
            con.execute(f"COMMENT ON COLUMN {table}.{column} IS {sql_text(PERSONAL_COMMENT)}")


def open_catalogue(
    layout: Layout, tables: Collection[str] = tuple(TABLES), confined: bool = False
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the warehouse's views (those of `tables`): what every stretto
    reader uses (`confined`: see `table_select`)."""
    if not has_warehouse(layout):
        where = committed(layout).where
        raise NoWarehouse(f"no warehouse at {where} yet: run `stretto ingest` first")
    con = duckdb.connect()
    try:
        build_catalogue(con, layout, tables=tables, confined=confined)
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


class Reader:
    """Read-only queries on one connection (`reading`): `reader(sql)` -> pyarrow Table, each
    query held to what `query` allows. Building a catalogue costs more than a small query, so
    a caller with several (an asset's metadata) opens one."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, layout: Layout, confined: bool = False
    ) -> None:
        self.con, self.layout, self.confined = con, layout, confined

    def __call__(self, sql: str) -> pa.Table:
        _check_read_only(sql)
        result = self.con.sql(sql)
        if result is None:
            raise QueryRefused("`stretto sql`: the query returned no rows to show")
        return result.to_arrow_table()

    def view(self, table: str, since: int = 0, days_from: str = "") -> str:
        """A view of `table` over the data files committed from commit `since` on, of the days
        from `days_from` on (`table_select`): its name."""
        name = view_name(table, since, days_from)
        select = table_select(self.con, self.layout, table, since, days_from, self.confined)
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {select}")
        return name

    def commit_of(self, run_id: str) -> int:
        """The commit number of a committed run."""
        found = self.con.execute(
            "SELECT min(commit_no) FROM registry WHERE ingest_id = ?", [run_id]
        ).fetchall()
        if found[0][0] is None:
            raise KeyError(f"no committed run {run_id}")
        return int(found[0][0])

    def rows(self, tables: Sequence[str] = tuple(TABLES)) -> dict[str, int]:
        """How many rows each table's view holds, from the registry's row counts where they
        say it: the data files committed before the first ingest run with a session that is no
        longer current (a log that grew or was rewritten since) hold current rows only, so
        their counts add up; the files since then (and the quarantine, shown by content) are
        counted through their views."""
        (since,) = self.con.execute(
            "SELECT min(l.commit_no) FROM log_entries l WHERE l.status = 'ingested' "
            "AND NOT EXISTS (SELECT 1 FROM session_current c "
            "WHERE c.session = l.session AND c.ingest_id = l.ingest_id)"
        ).fetchall()[0]
        counted = {
            table: int(n)
            for table, n in self.con.execute(
                "SELECT table_name, sum(rows) FROM data_files WHERE commit_no < ? "
                "GROUP BY table_name",
                [since if since is not None else 1 << 62],
            ).fetchall()
        }
        out = {}
        for table in tables:
            if table == "quarantine":
                out[table] = self.count(self.view(table))
            elif since is None:
                out[table] = counted.get(table, 0)
            else:
                out[table] = counted.get(table, 0) + self.count(self.view(table, since))
        return out

    def count(self, view: str) -> int:
        return int(self(f"SELECT count(*) AS n FROM {view}").column("n")[0].as_py())


@contextmanager
def reading(
    layout: Layout, views: Collection[str] | bool = True, confined: bool = False
) -> Iterator[Reader]:
    """One connection for several read-only queries: yields a `Reader` with the registry's
    tables and the views of `views` (True: every table's; False: none, and a caller makes the
    ones it needs with `Reader.view`, over only the data files it needs).

    DuckDB's external access is off and its configuration locked. Stretto's own queries may
    read the warehouse's data folder with DuckDB's Parquet reader. A `confined` connection —
    for SQL a person wrote — may open no file at all, to read or to write: its views read the
    warehouse through pyarrow, no directory is allowed, nothing spills to a temp directory
    (DuckDB would allow that one), no extension is installed or loaded, and no Python
    variable is scanned. So whatever the statement (EXPLAIN ANALYZE runs what it wraps), it
    can neither write a file nor read one outside the views."""
    tables = TABLES if views is True else () if views is False else views
    con = open_catalogue(layout, tables, confined)
    try:
        allowed = [] if confined else [str(layout.parquet) + os.sep]
        lock_down(con, allowed)
        yield Reader(con, layout, confined)
    finally:
        con.close()


def lock_down(con: duckdb.DuckDBPyConnection, allowed: Sequence[str]) -> None:
    """Close `con` to every file but those under `allowed` (folders), for good: no temp
    directory, no extension loading, no scan of Python variables, the configuration locked."""
    for setting in (
        "temp_directory = ''",
        "autoinstall_known_extensions = false",
        "autoload_known_extensions = false",
        "python_enable_replacements = false",
        f"allowed_directories = [{', '.join(sql_text(a) for a in allowed)}]",
        "enable_external_access = false",
        "lock_configuration = true",
    ):
        con.execute(f"SET {setting}")


def query(layout: Layout, sql: str) -> pa.Table:
    """Run a read-only query against the warehouse's views; a pyarrow Table. The query may
    read the views and nothing else (`reading`, confined): no file, no writes, no settings."""
    _check_read_only(sql)  # before the catalogue is built
    with reading(layout, views_named(sql), confined=True) as run:
        return run(sql)


# Words that make a query look at the catalogue itself (which views exist, their columns).
_CATALOGUE_WORDS = re.compile(
    r"duckdb_|information_schema|pragma|\bshow\b|describe|summarize", re.IGNORECASE
)


def views_named(sql: str) -> Collection[str]:
    """The views a query needs (building a view costs a look at each of its files): the
    tables it names, or every one when it names none or looks at the catalogue itself."""
    if _CATALOGUE_WORDS.search(sql):
        return tuple(TABLES)
    named = [t for t in TABLES if re.search(rf"\b{t}\b", sql, re.IGNORECASE)]
    return named or tuple(TABLES)
