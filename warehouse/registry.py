"""The registry: one Parquet file per committed ingest run, under warehouse/registry/.

A run writes its Parquet data files first (each whole, by rename), then commits by writing
its registry file (again whole, by rename). Readers build everything they show from the
committed registry files, so a run that crashed before its commit is invisible, and the next
run removes what it left (store.recover). Every path is stored relative to the home (or,
for a warehouse at an object-store URL, to that URL: warehouse/datastore.py).

Rows of a registry file (`kind`):
- `log`: a log file the run looked at: path, size, mtime, content hash, session id, and
  `status`: `ingested` (its rows were written), `quarantined` (unreadable as a whole: every
  line went to quarantine), `conflict` (the session id of another content: quarantined
  whole), `known` (content already in the warehouse, or an earlier version of it: nothing
  written); `note` says why.
- `data`: a Parquet file the run wrote: its table, path and row count.
- `dropped`: a Parquet file a retention run (`stretto ingest --retain-days`) took out of the
  warehouse: its table, path and row count; no reader reads it from that commit on, and the
  file is deleted once the commit is written.
- `retired`: a data file a compaction replaced (warehouse/upkeep/compact.py): no longer read.
- `derived`: an ingest run (its id in `note`) whose current sessions a steps run derived the
  `table_name` table for (warehouse.ingest.steps.derive_steps): the next steps run does not look at
  it again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from warehouse.datastore import committed
from warehouse.layout import Layout
from warehouse.sql import statements

SCHEMA = pa.schema(
    [
        ("commit_no", pa.int64()),
        ("ingest_id", pa.string()),
        ("committed_at", pa.timestamp("ms", tz="UTC")),
        ("kind", pa.string()),
        ("path", pa.string()),
        ("size_bytes", pa.int64()),
        ("mtime_ns", pa.int64()),
        ("content_hash", pa.string()),
        ("session", pa.string()),
        ("status", pa.string()),
        ("note", pa.string()),
        ("table_name", pa.string()),
        ("rows", pa.int64()),
    ]
)
COMMIT_NAME = re.compile(r"(\d{8})-(.+)\.parquet")


def commit_names(layout: Layout) -> list[str]:
    """The committed runs' registry files, in commit order."""
    return sorted(n for n in committed(layout).registry_names() if COMMIT_NAME.fullmatch(n))


def committed_ids(layout: Layout) -> set[str]:
    return {COMMIT_NAME.fullmatch(n).group(2) for n in commit_names(layout)}  # type: ignore[union-attr]


# The registry as this process last loaded it, and the tables it makes current
# (sql/registry.sql), per warehouse: reused while its committed files are the same ones (a
# load otherwise reads every registry file and computes the tables again).
_LOADED: dict[str, tuple[tuple, dict[str, pa.Table]]] = {}


def _is_view(sql: str) -> bool:
    """A statement of sql/registry.sql that makes a view (computed when read), not a table."""
    return "{temp} VIEW" in sql


def _views(temp: str) -> list[str]:
    """sql/registry.sql's views, as statements."""
    return [sql.replace("{temp}", temp) for _, sql in statements("registry") if _is_view(sql)]


def _attach(con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table]) -> None:
    """The registry's tables on `con`, registered by name (no copy), and its views over them."""
    for name, table in tables.items():
        con.register(name, table)
    for sql in _views("TEMP"):
        con.execute(sql)


def _current(layout: Layout) -> dict[str, pa.Table]:
    data = committed(layout)
    names = commit_names(layout)
    key = tuple((name, *data.registry_version(name)) for name in names)
    hit = _LOADED.get(data.where)
    if hit is not None and hit[0] == key:
        return hit[1]
    _LOADED.pop(data.where, None)  # not held while the new one is computed
    files = [data.read_registry(name, SCHEMA) for name in names]
    tables = {"registry": pa.concat_tables(files) if files else SCHEMA.empty_table()}
    del files
    con = duckdb.connect()
    try:
        _attach(con, tables)
        for name, sql in statements("registry"):
            if not _is_view(sql):  # computed once, as Arrow (not a copy inside DuckDB too)
                con.execute(sql.replace("{temp} TABLE", "TEMP VIEW"))
                tables[name] = con.sql(f"SELECT * FROM {name}").to_arrow_table()
                con.execute(f"DROP VIEW {name}")
                con.register(name, tables[name])
    finally:
        con.close()
    _LOADED[data.where] = (key, tables)
    return tables


def read(layout: Layout) -> pa.Table:
    return _current(layout)["registry"]


def load(con: duckdb.DuckDBPyConnection, layout: Layout, temp: bool = True) -> None:
    """The registry and what it says is current, as tables and views on `con`
    (sql/registry.sql): for a connection's own use (`temp`) the Arrow tables themselves,
    registered by name (no copy); in a database file (stretto.duckdb), views over the
    registry's files when they are local (the file stays small and quick to write), else
    copies."""
    if temp:
        _attach(con, _current(layout))
        return
    if not committed(layout).remote:
        con.execute(f"CREATE OR REPLACE VIEW registry AS {_files_select(con, layout)}")
        for _, sql in statements("registry"):
            con.execute(sql.replace("{temp} TABLE", "VIEW").replace("{temp} ", ""))
        return
    for name, table in _current(layout).items():
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")
    for sql in _views(""):
        con.execute(sql)


_TYPES = {"int64": "BIGINT", "string": "VARCHAR", "timestamp[ms, tz=UTC]": "TIMESTAMPTZ"}


def _files_select(con: duckdb.DuckDBPyConnection, layout: Layout) -> str:
    """A query over the committed registry files, in SCHEMA's columns (a column older files
    lack reads as NULL there)."""
    paths = [str(layout.registry / name) for name in commit_names(layout)]
    if not paths:
        columns = [f"CAST(NULL AS {_TYPES[str(f.type)]}) AS {f.name}" for f in SCHEMA]
        return "SELECT " + ", ".join(columns) + " WHERE false"
    listed = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
    source = f"read_parquet([{listed}], union_by_name = true)"
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    columns = [
        f"CAST({f.name} AS {_TYPES[str(f.type)]}) AS {f.name}"
        if f.name in present
        else f"CAST(NULL AS {_TYPES[str(f.type)]}) AS {f.name}"
        for f in SCHEMA
    ]
    return f"SELECT {', '.join(columns)} FROM {source}"


def commit(
    layout: Layout,
    ingest_id: str,
    logs: list[dict],
    data: list[dict],
    dropped: list[dict] | None = None,
    retired: Sequence[str] = (),
    derived: Sequence[str] = (),
) -> str:
    """Write the run's registry file: from now on its data files are part of the warehouse
    (and the `dropped` ones, files a retention run took out, and the `retired` ones, paths a
    compaction replaced, are not). Call with the ingest lock held (commit numbers are taken
    in turn). Its name."""
    names = commit_names(layout)
    number = int(COMMIT_NAME.fullmatch(names[-1]).group(1)) + 1 if names else 1  # type: ignore[union-attr]
    now = datetime.now(UTC)
    rows: list[tuple[str, Sequence[dict]]] = [("log", logs), ("data", data)]
    rows += [("dropped", dropped or [])]
    rows += [("retired", [{"path": path} for path in retired])]
    rows += [("derived", [{"table_name": "steps", "note": run} for run in derived])]
    count = sum(len(group) for _, group in rows)
    # column by column from the rows given (a copy of each row with its kind, for a first
    # ingest's million logs, held ~0.3 GB)
    columns = {
        name: [r.get(name) for _, group in rows for r in group]
        for name in SCHEMA.names
        if name not in ("commit_no", "ingest_id", "committed_at", "kind")
    }
    columns["kind"] = [kind for kind, group in rows for _ in group]
    columns["commit_no"] = [number] * count
    columns["ingest_id"] = [ingest_id] * count
    columns["committed_at"] = [now] * count
    table = pa.table(columns, schema=SCHEMA)
    name = f"{number:08d}-{ingest_id}.parquet"
    committed(layout).write_registry(name, table)
    return name


@dataclass
class State:
    """What discovery needs to know of the registry: its current tables, as loaded (Arrow,
    columnar), asked about the files at hand only. A million logs' rows as Python dicts held
    ~2.5 GB; looked up this way a nightly run holds answers for its new files alone."""

    tables: dict[str, pa.Table]
    commits: int  # how many runs had committed

    def _query(self, sql: str, given: pa.Table) -> list[tuple]:
        con = duckdb.connect()
        try:
            _attach(con, self.tables)
            con.register("given", given)
            return con.execute(sql).fetchall()
        finally:
            con.close()

    def unchanged(
        self, rels: list[str], sizes: list[int], mtimes: list[int], ctimes: list[int]
    ) -> set[int]:
        """Which of these files (by position) are as the registry last saw them: the same
        size and mtime at the same path, and an inode not changed since (its ctime, which no
        copy or unpacking can set back, before the commit that saw it)."""
        given = pa.table(
            {
                "i": pa.array(range(len(rels)), pa.int64()),
                "rel": pa.array(rels, pa.string()),
                "size": pa.array(sizes, pa.int64()),
                "mtime": pa.array(mtimes, pa.int64()),
                "ctime": pa.array(ctimes, pa.int64()),
            }
        )
        found = self._query(
            "SELECT g.i FROM given g JOIN path_latest p ON p.path = g.rel "
            "WHERE p.size_bytes = g.size AND p.mtime_ns = g.mtime "
            "AND g.ctime < epoch_ns(p.committed_at)",
            given,
        )
        return {i for (i,) in found}

    def contents(self, hashes: list[str]) -> dict[str, tuple[str, str | None]]:
        """Of these contents, those the warehouse holds: hash -> (status, where its log was
        last seen)."""
        found = self._query(
            "SELECT h.content_hash, h.status, p.path FROM content_holder h "
            "JOIN content_path p USING (content_hash) SEMI JOIN given g USING (content_hash)",
            pa.table({"content_hash": pa.array(hashes, pa.string())}),
        )
        return {digest: (status, path) for digest, status, path in found}

    def sessions(self, ids: list[str]) -> dict[str, tuple[str, int, str]]:
        """Of these session ids, those the warehouse holds: id -> (content hash, size, where
        its log was last seen) of the current content."""
        found = self._query(
            "SELECT c.session, c.content_hash, c.size_bytes, p.path FROM session_current c "
            "JOIN content_path p USING (content_hash) SEMI JOIN given g USING (session)",
            pa.table({"session": pa.array(ids, pa.string())}),
        )
        return {session: (digest, size, path) for session, digest, size, path in found}


def state(layout: Layout) -> State:
    commits = len(commit_names(layout))  # counted first: a commit landing now makes it stale
    return State(_current(layout), commits)
