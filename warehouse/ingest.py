"""Session logs in, Parquet out: one batch of files at a time, the heavy lifting in DuckDB.

The SQL in warehouse/sql/ingest*.sql splits, checks and parses the logs; two small passes in
Python fill in what SQL cannot say as well: each call's LLM turn (stretto.logs.turns, the same
rule the episode reader uses) and each distinct tools/list answer (stretto.logs.toollist).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
import pyarrow as pa

from stretto.logs.sessionlog import is_session_log
from stretto.logs.toollist import tools_from_result
from stretto.logs.turns import TurnTracker
from warehouse.layout import TABLES, Layout

SQL_DIR = Path(__file__).parent / "sql"
BATCH_BYTES = 96 * 1024 * 1024  # log text one batch holds in memory at once (~1.3 GB peak)
BATCH_FILES = 4000
# DuckDB runs these statements on one core (one small table, one row group), so batches go
# to worker processes, one per core; STRETTO_INGEST_WORKERS overrides.
WORKERS = int(os.environ.get("STRETTO_INGEST_WORKERS") or min(4, os.cpu_count() or 1))
OUTPUT_TABLES = ("sessions", "messages", "calls", "context", "tools", "quarantine")


def sql_statements(name: str) -> list[tuple[str, str]]:
    """The `-- name: x` sections of warehouse/sql/<name>.sql, in order."""
    text = (SQL_DIR / f"{name}.sql").read_text()
    parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1].strip().rstrip(";")) for i in range(1, len(parts), 2)]


@dataclass(frozen=True)
class LogFile:
    path: str  # absolute
    size: int
    mtime_ns: int
    content_hash: str | None  # None: not hashed yet (a new file; its worker hashes it)
    domain_hint: str  # the folder under logs/, for a file whose header cannot be read


@dataclass
class IngestStats:
    files: int = 0
    bytes: int = 0
    lines_read: int = 0
    lines_ingested: int = 0
    lines_quarantined: int = 0
    lines_dropped: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTPUT_TABLES, 0))
    registry: list[tuple] = field(default_factory=list)  # rows for the file registry

    def add(self, other: IngestStats) -> None:
        for name in (
            "files",
            "bytes",
            "lines_read",
            "lines_ingested",
            "lines_quarantined",
            "lines_dropped",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for table, count in other.rows.items():
            self.rows[table] = self.rows.get(table, 0) + count
        self.registry.extend(other.registry)

    @property
    def balanced(self) -> bool:
        return self.lines_read == self.lines_ingested + self.lines_quarantined + self.lines_dropped


def file_hash(path: str) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def discover(layout: Layout, known: dict[str, tuple[int, int, str]]) -> tuple[list[LogFile], int]:
    """Log files under logs/ that are new or changed since they were ingested, and how many
    are unchanged. `known` maps a path to (size, mtime_ns, content hash) of its last ingest; a
    file whose size and mtime match is not read at all, one whose content hash matches is not
    ingested again."""
    found: list[LogFile] = []
    unchanged = 0
    if not layout.logs.is_dir():
        return found, 0
    for folder, _, names in os.walk(layout.logs):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if not is_session_log(Path(path)):
                continue
            stat = os.stat(path)
            previous = known.get(path)
            if previous and previous[0] == stat.st_size and previous[1] == stat.st_mtime_ns:
                unchanged += 1
                continue
            digest = None
            if previous:  # known file, new size or mtime: ingest it only if its bytes changed
                digest = file_hash(path)
                if previous[2] == digest:
                    unchanged += 1
                    continue
            hint = Path(folder).relative_to(layout.logs).parts
            found.append(
                LogFile(path, stat.st_size, stat.st_mtime_ns, digest, hint[0] if hint else "mcp")
            )
    found.sort(key=lambda f: f.path)
    return found, unchanged


def batches(files: list[LogFile]) -> Iterator[list[LogFile]]:
    batch: list[LogFile] = []
    size = 0
    for log in files:
        if batch and (size + log.size > BATCH_BYTES or len(batch) >= BATCH_FILES):
            yield batch
            batch, size = [], 0
        batch.append(log)
        size += log.size
    if batch:
        yield batch


def connect(memory_limit: str = "1500MB") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET threads = 1")  # parallel across batches instead (WORKERS)
    con.execute("SET preserve_insertion_order = false")
    return con


def _assign_turns(con: duckdb.DuckDBPyConnection) -> None:
    """Run stretto.logs.turns over the batch's turn events; store `turns` and `cancelled_calls`."""
    events = con.sql("SELECT * FROM turn_events").to_arrow_table()
    cols = {name: events.column(name).to_pylist() for name in events.column_names}
    out_session, out_seq, out_sub, out_turn, out_after = [], [], [], [], []
    cancelled: list[tuple[str, int, int]] = []
    tracker = TurnTracker()
    live: dict[str, tuple[int, int]] = {}
    current = None
    for i in range(events.num_rows):
        session = cols["session"][i]
        if session != current:
            current, tracker, live = session, TurnTracker(), {}
        event, call_id, seq, sub = (
            cols["event"][i],
            cols["call_id"][i],
            cols["seq"][i],
            cols["sub"][i],
        )
        if event == "call":
            turn = tracker.call(
                seq, cols["t_ms"][i], call_id, cols["by_proxy"][i], cols["source"][i]
            )
            out_session.append(session)
            out_seq.append(seq)
            out_sub.append(sub)
            out_turn.append(turn)
            out_after.append(tracker.sent_after[call_id])
            live[call_id] = (seq, sub)
        elif event == "result":
            tracker.result(cols["t_ms"][i], call_id)
            live.pop(call_id, None)
        elif event == "cancel":
            if call_id in live and tracker.cancel(call_id):
                cancelled.append((session, *live[call_id]))
        else:
            tracker.said(cols["role"][i])
    turns = pa.table(
        {
            "session": out_session,
            "seq": out_seq,
            "sub": out_sub,
            "turn": out_turn,
            "sent_after": out_after,
        }
    )
    cancelled_calls = pa.table(
        {
            "session": [c[0] for c in cancelled],
            "seq": [c[1] for c in cancelled],
            "sub": [c[2] for c in cancelled],
        },
        schema=pa.schema([("session", pa.string()), ("seq", pa.int32()), ("sub", pa.int32())]),
    )
    con.register("turns_arrow", turns)
    con.register("cancelled_arrow", cancelled_calls)
    con.execute("CREATE OR REPLACE TEMP TABLE turns AS SELECT * FROM turns_arrow")
    con.execute("CREATE OR REPLACE TEMP TABLE cancelled_calls AS SELECT * FROM cancelled_arrow")


def _describe_tools(con: duckdb.DuckDBPyConnection) -> None:
    """Read each distinct tools/list answer once; store `tool_defs`."""
    lists = con.execute("SELECT DISTINCT snapshot, result FROM tool_lists").fetchall()
    rows: dict[str, list] = {
        k: []
        for k in ("snapshot", "tool", "kind", "contract", "summary", "arg_docs", "input_schema")
    }
    for snapshot, result in lists:
        for info in tools_from_result(json.loads(result)):
            rows["snapshot"].append(snapshot)
            rows["tool"].append(info.name)
            rows["kind"].append(info.kind)
            rows["contract"].append(info.contract)
            rows["summary"].append(info.summary)
            rows["arg_docs"].append(json.dumps(info.args, ensure_ascii=False))
            schema = info.input_schema
            rows["input_schema"].append(None if schema is None else json.dumps(schema))
    table = pa.table({k: pa.array(v, pa.string()) for k, v in rows.items()})
    con.register("tool_defs_arrow", table)
    con.execute("CREATE OR REPLACE TEMP TABLE tool_defs AS SELECT * FROM tool_defs_arrow")


def append_parquet(con, query: str, table: str, layout: Layout, tag: str) -> int:
    """Append the query's rows to a table's Parquet files, partitioned; how many rows."""
    # the declared types, whatever the query's arithmetic made of them
    columns = ", ".join(f"CAST({name} AS {kind}) AS {name}" for name, kind in TABLES[table])
    target = layout.table_dir(table)
    target.mkdir(parents=True, exist_ok=True)
    result = con.execute(
        f"COPY (SELECT {columns}, domain, day FROM ({query})) TO '{target}' "
        f"(FORMAT parquet, PARTITION_BY (domain, day), FILENAME_PATTERN 'part-{tag}-{{uuid}}', "
        "APPEND)"
    ).fetchall()
    return int(result[0][0]) if result else 0


def ingest_batch(files: list[LogFile], ingest_id: str, layout: Layout, tag: str) -> IngestStats:
    """Read one batch of log files and append their rows to the Parquet tables."""
    files = [f if f.content_hash else replace(f, content_hash=file_hash(f.path)) for f in files]
    con = connect()
    try:
        batch = pa.table(
            {
                "file": [f.path for f in files],
                "content_hash": [f.content_hash for f in files],
                "size_bytes": pa.array([f.size for f in files], pa.int64()),
                "domain_hint": [f.domain_hint for f in files],
                "ingest_id": [ingest_id] * len(files),
            }
        )
        con.register("batch_arrow", batch)
        con.execute("CREATE TEMP TABLE batch AS SELECT * FROM batch_arrow")
        for name, sql in sql_statements("ingest"):
            if name == "lines":
                con.execute(sql, {"files": [f.path for f in files]})
            else:
                con.execute(sql)
        _assign_turns(con)
        _describe_tools(con)
        stats = IngestStats(files=len(files), bytes=sum(f.size for f in files))
        queries = dict(sql_statements("ingest_tables"))
        con.execute(queries.pop("file_meta"))
        for table in OUTPUT_TABLES:
            stats.rows[table] = append_parquet(con, queries[table], table, layout, tag)
        totals = con.execute(
            "SELECT sum(lines_read), sum(lines_ingested), sum(lines_quarantined), "
            "sum(lines_dropped) FROM line_counts"
        ).fetchall()[0]
        (stats.lines_read, stats.lines_ingested, stats.lines_quarantined, stats.lines_dropped) = (
            int(x or 0) for x in totals
        )
        by_file = {f.path: f for f in files}
        for path, session in con.execute("SELECT file, session FROM file_meta").fetchall():
            log = by_file[path]
            stats.registry.append(
                (path, log.size, log.mtime_ns, log.content_hash, session, ingest_id)
            )
        return stats
    finally:
        con.close()


def ingest_files(
    files: list[LogFile],
    ingest_id: str,
    layout: Layout,
    on_batch: Callable[[IngestStats], None] | None = None,
    workers: int | None = None,
) -> IngestStats:
    """Ingest files batch by batch, batches in parallel worker processes; `on_batch` hears
    about each one as it finishes (for progress)."""
    total = IngestStats()
    jobs = [(b, ingest_id, layout, f"{ingest_id}-{i}") for i, b in enumerate(batches(files))]
    workers = min(workers or WORKERS, len(jobs))
    if workers <= 1:
        for job in jobs:
            stats = ingest_batch(*job)
            total.add(stats)
            if on_batch:
                on_batch(stats)
        return total
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn, not fork: the caller may hold threads (Dagster) or a DuckDB connection.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for future in as_completed([pool.submit(ingest_batch, *job) for job in jobs]):
            stats = future.result()
            total.add(stats)
            if on_batch:
                on_batch(stats)
    total.registry.sort()
    return total
