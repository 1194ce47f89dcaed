"""The registry: one Parquet file per committed ingest run, under warehouse/registry/.

A run writes its Parquet data files first (each whole, by rename), then commits by writing
its registry file (again whole, by rename). Readers build everything they show from the
committed registry files, so a run that crashed before its commit is invisible, and the next
run removes what it left (store.recover). Every path is stored relative to the home (or,
for a warehouse at an object-store URL, to that URL: warehouse/storage.py).

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
- `retired`: a data file a compaction replaced (warehouse/compact.py): no longer read.
- `derived`: an ingest run (its id in `note`) whose current sessions a steps run derived the
  `table_name` table for (store.derive_steps): the next steps run does not look at it again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from warehouse.layout import Layout
from warehouse.sql import statements
from warehouse.storage import committed

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


def _current(layout: Layout) -> dict[str, pa.Table]:
    data = committed(layout)
    names = commit_names(layout)
    key = tuple((name, *data.registry_version(name)) for name in names)
    hit = _LOADED.get(data.where)
    if hit is not None and hit[0] == key:
        return hit[1]
    files = [data.read_registry(name, SCHEMA) for name in names]
    table = pa.concat_tables(files) if files else SCHEMA.empty_table()
    con = duckdb.connect()
    try:
        con.register("registry_arrow", table)
        con.execute("CREATE TEMP TABLE registry AS SELECT * FROM registry_arrow")
        con.unregister("registry_arrow")
        tables = {"registry": table}
        for name, sql in statements("registry"):
            con.execute(sql.replace("{temp}", "TEMP"))
            tables[name] = con.sql(f"SELECT * FROM {name}").to_arrow_table()
    finally:
        con.close()
    _LOADED[data.where] = (key, tables)
    return tables


def read(layout: Layout) -> pa.Table:
    return _current(layout)["registry"]


def load(con: duckdb.DuckDBPyConnection, layout: Layout, temp: bool = True) -> None:
    """The registry and what it says is current, as tables on `con` (sql/registry.sql): for
    a connection's own use (`temp`) the Arrow tables themselves, registered by name (no copy);
    in a database file (stretto.duckdb), views over the registry's files when they are local
    (the file stays small and quick to write), else copies."""
    if not temp and not committed(layout).remote:
        con.execute(f"CREATE OR REPLACE VIEW registry AS {_files_select(con, layout)}")
        for _, sql in statements("registry"):
            con.execute(sql.replace("{temp} TABLE", "VIEW"))
        return
    for name, table in _current(layout).items():
        if temp:
            con.register(name, table)
            continue
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")


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
    rows = [{"kind": "log", **r} for r in logs] + [{"kind": "data", **r} for r in data]
    rows += [{"kind": "dropped", **r} for r in dropped or []]
    rows += [{"kind": "retired", "path": path} for path in retired]
    rows += [{"kind": "derived", "table_name": "steps", "note": run} for run in derived]
    columns = {name: [r.get(name) for r in rows] for name in SCHEMA.names}
    columns["commit_no"] = [number] * len(rows)
    columns["ingest_id"] = [ingest_id] * len(rows)
    columns["committed_at"] = [now] * len(rows)
    table = pa.table(columns, schema=SCHEMA)
    name = f"{number:08d}-{ingest_id}.parquet"
    committed(layout).write_registry(name, table)
    return name


@dataclass
class State:
    """What discovery needs to know of the registry."""

    paths: dict[str, tuple[int, int, str, int]]  # path -> size, mtime_ns, hash, seen at (ns)
    contents: dict[str, tuple[str, str | None]]  # content hash -> status, path of its rows
    sessions: dict[str, tuple[str, int, str]]  # session -> content hash, size, its path
    commits: int  # how many runs had committed


def state(layout: Layout) -> State:
    con = duckdb.connect()
    try:
        commits = len(commit_names(layout))
        load(con, layout)
        paths = {
            p: (size, mtime, digest, seen)
            for p, size, mtime, digest, seen in con.execute(
                "SELECT path, size_bytes, mtime_ns, content_hash, "
                "epoch_ns(committed_at) FROM path_latest"
            ).fetchall()
        }
        contents = {
            digest: (status, path)
            for digest, status, path in con.execute(
                "SELECT h.content_hash, h.status, p.path FROM content_holder h "
                "JOIN content_path p USING (content_hash)"
            ).fetchall()
        }
        sessions = {
            session: (digest, size, path)
            for session, digest, size, path in con.execute(
                "SELECT c.session, c.content_hash, c.size_bytes, p.path FROM session_current c "
                "JOIN content_path p USING (content_hash)"
            ).fetchall()
        }
    finally:
        con.close()
    return State(paths, contents, sessions, commits)
