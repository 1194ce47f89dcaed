"""Session logs in, Parquet out: one batch of files at a time, the heavy lifting in DuckDB.

The SQL in warehouse/sql/ingest*.sql splits, checks and parses the logs; small passes in
Python fill in what SQL cannot say as well: the lines of a file that is not all valid UTF-8,
lone surrogate escapes DuckDB's JSON reader refuses, each call's LLM turn (stretto.logs.turns,
the same rule the episode reader uses) and each distinct tools/list answer
(stretto.logs.toollist).

Nothing a batch writes is visible until the run commits (warehouse/registry.py): the
batch's Parquet files are written under staging/, fsynced, and renamed into the table
folders; the registry file that lists them comes last.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import duckdb
import pyarrow as pa

from stretto.home import private_dirs
from stretto.logs.domain import DOMAIN_PATTERN, is_valid_domain
from stretto.logs.toollist import tools_from_result
from stretto.logs.turns import TurnTracker
from warehouse.datastore import committed, sql_text
from warehouse.files import fault, fsync_path
from warehouse.ingest.discover import LogFile
from warehouse.ingest.workers import WORKERS, worker_pool
from warehouse.layout import TABLES, Layout
from warehouse.sql import statements

BATCH_BYTES = 96 * 1024 * 1024  # log text one batch holds in memory at once (~1.3 GB peak)
BATCH_FILES = int(os.environ.get("STRETTO_INGEST_BATCH_FILES") or 4000)
OUTPUT_TABLES = ("sessions", "messages", "calls", "context", "tools", "quarantine")
# A JSON escape: a surrogate pair, a lone surrogate, or any other escape (consumed whole, so
# that `\\ud800` — a backslash, then text — is not taken for one).
_ESCAPE = re.compile(
    r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|\\u(d[89a-f][0-9a-f]{2})|\\.",
    re.IGNORECASE | re.DOTALL,
)


@dataclass
class IngestStats:
    files: int = 0
    bytes: int = 0
    lines_read: int = 0
    lines_ingested: int = 0
    lines_quarantined: int = 0
    lines_dropped: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTPUT_TABLES, 0))
    logs: list[dict] = field(default_factory=list)  # registry rows: the files read
    # from a worker: (position in its batch, session, status, note) of each file read, made
    # into `logs` by the parent (`_with_logs`) from its own LogFile objects
    outcomes: list[tuple[int, str | None, str, str | None]] = field(default_factory=list)
    data: list[dict] = field(default_factory=list)  # registry rows: the Parquet files written

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
        self.logs.extend(other.logs)
        self.data.extend(other.data)

    @property
    def balanced(self) -> bool:
        return self.lines_read == self.lines_ingested + self.lines_quarantined + self.lines_dropped


def batches(files: list[LogFile], workers: int = 1) -> Iterator[list[LogFile]]:
    """The files in batches of at most BATCH_BYTES and BATCH_FILES, in order. When there is
    more than one, as many as a multiple of `workers`, of even size (by bytes, or by files
    when those are what limits): no worker is left with the last batch alone while the others
    wait."""
    total = sum(f.size for f in files)
    by_bytes, by_files = -(-total // BATCH_BYTES), -(-len(files) // BATCH_FILES)
    count = max(by_bytes, by_files, 1)
    if count > 1:
        count = -(-count // workers) * workers
    batch: list[LogFile] = []
    size = seen = share = 0
    for i, log in enumerate(files):
        due = seen * count // total if by_bytes >= by_files and total else i * count // len(files)
        if batch and (due > share or size + log.size > BATCH_BYTES or len(batch) >= BATCH_FILES):
            yield batch
            batch, size, share = [], 0, due
        batch.append(log)
        size += log.size
        seen += log.size
    if batch:
        yield batch


def limit_memory(con: duckdb.DuckDBPyConnection, limit: str, spill: Path) -> None:
    """Hold the connection to `limit`, what does not fit spilled to `spill` (a folder under
    a run's staging folder, removed with it) rather than to DuckDB's default, `.tmp` in
    whatever folder the process started in."""
    private_dirs(spill)
    con.execute(f"SET memory_limit = '{limit}'")
    con.execute(f"SET temp_directory = {sql_text(str(spill))}")


def connect(spill: Path, memory_limit: str = "1500MB") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    limit_memory(con, memory_limit, spill)
    con.execute("SET threads = 1")  # parallel across batches instead (warehouse/ingest/workers.py)
    con.execute("SET preserve_insertion_order = false")
    return con


# This thread's DuckDB database for the batches of one run, with the folder it spills to. Each
# batch works on a cursor of it (its temp tables are the cursor's own), so the memory one batch
# touched serves the next: a database per batch mapped fresh pages for every batch (~3% of a
# batch's CPU: bench/ingest_batch.py). Per thread, so that two runs in one process (on two
# homes) never share one.
_batch_database = threading.local()


def batch_connection(spill: Path) -> duckdb.DuckDBPyConnection:
    """A connection for one batch: a cursor on this thread's database for the run that
    spills to `spill`, opened by the run's first batch here (a new run closes the last
    one's)."""
    held = getattr(_batch_database, "held", None)
    if held is None or held[0] != spill:
        close_batch_database()
        held = _batch_database.held = (spill, connect(spill))
    return held[1].cursor()


def close_batch_database() -> None:
    """Close this thread's batch database, if open (its memory goes back)."""
    held = getattr(_batch_database, "held", None)
    if held is not None:
        _batch_database.held = None
        held[1].close()


def repair_surrogates(text: str) -> str:
    """`text` with each lone surrogate escape (`\\ud800`, which DuckDB's JSON reader refuses
    though JSON allows it) replaced by `\\ufffd`: the same length, so offsets still hold."""

    def one(m: re.Match) -> str:
        return m.group(0) if m.group(3) is None else "\\ufffd"

    return _ESCAPE.sub(one, text)


def _undecodable_lines(con: duckdb.DuckDBPyConnection) -> None:
    """The lines of files that are not valid UTF-8 throughout, split here (DuckDB cannot
    decode them); `bad` marks the lines that are not valid UTF-8, kept with the bad bytes as
    \\xNN. Stores `undecodable(file, parts, complete, bad)`."""
    files = [f for (f,) in con.execute("SELECT file FROM file_text WHERE text IS NULL").fetchall()]
    out: dict[str, list] = {"file": [], "parts": [], "complete": [], "bad": []}
    for path in files:
        data = Path(path).read_bytes().removeprefix(b"\xef\xbb\xbf")
        parts, bad = [], []
        for piece in data.split(b"\n"):
            try:
                parts.append(piece.decode("utf-8"))
                bad.append(False)
            except UnicodeDecodeError:
                parts.append(piece.decode("utf-8", "backslashreplace"))
                bad.append(True)
        out["file"].append(path)
        out["parts"].append(parts)
        out["complete"].append(data.endswith(b"\n") or data == b"")
        out["bad"].append(bad)
    _store(con, "undecodable", out)


def _store(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, list]) -> None:
    types = {
        "file": pa.string(),
        "parts": pa.list_(pa.string()),
        "complete": pa.bool_(),
        "bad": pa.list_(pa.bool_()),
    }
    table = pa.table({k: pa.array(v, types[k]) for k, v in columns.items()})
    con.register(f"{name}_arrow", table)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")


def _read_lines(con: duckdb.DuckDBPyConnection, sql: dict[str, str]) -> None:
    """The batch's `lines`: straight from the files' text, or, when a file is not all valid
    UTF-8 (rare), from their bytes, that file split here."""
    con.execute(sql["file_text"])
    try:
        con.execute(sql["lines"])
        con.execute("DROP VIEW file_text")
    except duckdb.InvalidInputException as exc:
        if "UTF-8" not in str(exc):
            raise
        con.execute("DROP VIEW file_text")
        con.execute(sql["file_bytes"])
        con.execute(sql["lines"])
        _undecodable_lines(con)
        con.execute(sql["undecodable_lines"])
        con.execute("DROP TABLE file_text")  # the lines hold the text now


def _repair_lines(con: duckdb.DuckDBPyConnection) -> bool:
    """Fill `lines.repaired` for the lines that read as not JSON only because of a lone
    surrogate escape (rare: looked for among the lines found not JSON). Whether any was."""
    rows = con.execute(
        "SELECT file, seq, line FROM wire WHERE problem = 'quarantined: not JSON' "
        "AND (contains(line, '\\ud') OR contains(line, '\\uD')) "
        "UNION ALL SELECT file, header_no, header FROM headers "
        "WHERE file_error LIKE '%: not JSON' "
        "AND (contains(header, '\\ud') OR contains(header, '\\uD'))"
    ).fetchall()
    fixed = [(f, n, text) for f, n, line in rows if (text := repair_surrogates(line)) != line]
    if not fixed:
        return False
    table = pa.table(
        {
            "file": pa.array([r[0] for r in fixed], pa.string()),
            "line_no": pa.array([r[1] for r in fixed], pa.int32()),
            "text": pa.array([r[2] for r in fixed], pa.string()),
        }
    )
    con.register("repaired_arrow", table)
    con.execute(
        "UPDATE lines SET repaired = r.text FROM repaired_arrow r "
        "WHERE lines.file = r.file AND lines.line_no = r.line_no"
    )
    con.unregister("repaired_arrow")
    return True


def _assign_turns(con: duckdb.DuckDBPyConnection) -> None:
    """Run stretto.logs.turns over the batch's turn events; store `turns` and `cancelled_calls`."""
    events = con.sql(
        "SELECT session, event, call_id, seq, sub, t_ms, by_proxy, source, role FROM turn_events"
    ).to_arrow_table()
    out_session, out_seq, out_sub, out_turn, out_after = [], [], [], [], []
    cancelled: list[tuple[str, int, int]] = []
    tracker = TurnTracker()
    live: dict[str, tuple[int, int]] = {}
    current = None
    # one pass over the columns side by side (indexing each column per row cost more than
    # the tracker itself)
    rows = zip(*(column.to_pylist() for column in events.columns), strict=True)
    for session, event, call_id, seq, sub, t_ms, by_proxy, source, role in rows:
        if session != current:
            current, tracker, live = session, TurnTracker(), {}
        if event == "call":
            turn = tracker.call(seq, t_ms, call_id, by_proxy, source)
            out_session.append(session)
            out_seq.append(seq)
            out_sub.append(sub)
            out_turn.append(turn)
            out_after.append(tracker.sent_after[call_id])
            live[call_id] = (seq, sub)
        elif event == "result":
            tracker.result(t_ms, call_id)
            live.pop(call_id, None)
        elif event == "cancel":
            if call_id in live and tracker.cancel(call_id):
                cancelled.append((session, *live[call_id]))
        else:
            tracker.said(role)
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


def write_parquet(
    con,
    query: str,
    table: str,
    layout: Layout,
    ingest_id: str,
    tag: str,
    partitions: list[tuple] | None = None,
) -> tuple[int, list[dict]]:
    """Write the query's rows as new Parquet files of `table`, partitioned by domain and day:
    first under staging/, then each file fsynced and renamed into the table's folder (or
    uploaded: warehouse/datastore.py). How many rows, and a registry row per file. The files
    are not part of the warehouse until the run commits. `partitions`: the (domain, day)
    pairs the rows can fall in, when the caller knows them (else found by running the query
    once more: for an ingest batch's tables ~7% of its CPU)."""
    # the declared types, whatever the query's arithmetic made of them
    columns = ", ".join(f"CAST({name} AS {kind}) AS {name}" for name, kind in TABLES[table])
    staging = private_dirs(layout.staging / ingest_id / tag / table)
    if partitions is None:
        partitions = con.execute(f"SELECT DISTINCT domain, day FROM ({query})").fetchall()
    if len(partitions) == 1 and is_valid_domain(partitions[0][0]) and partitions[0][1]:
        # a batch's files are in path order, so most batches fill one partition: written as
        # one file, as DuckDB's PARTITION_BY would, without its buffering (~40% of a write)
        domain, day = partitions[0]
        folder = private_dirs(staging / f"domain={domain}" / f"day={day.isoformat()}")
        target = folder / f"part-{tag}-{uuid.uuid4()}.parquet"
        result = con.execute(
            f"COPY (SELECT {columns} FROM ({query})) TO {sql_text(str(target))} "
            "(FORMAT parquet, RETURN_STATS)"
        ).fetchall()
    elif partitions:
        result = con.execute(
            f"COPY (SELECT {columns}, domain, day FROM ({query})) TO {sql_text(str(staging))} "
            f"(FORMAT parquet, PARTITION_BY (domain, day), FILENAME_PATTERN 'part-{tag}-{{uuid}}', "
            "RETURN_STATS)"
        ).fetchall()
    else:
        return 0, []
    fault("parquet-written")
    store = committed(layout)
    moves, data, total = [], [], 0
    for written, count, *_ in result:
        source = Path(written)
        if not count:  # a partition given that no row fell in (the one-file COPY writes it)
            source.unlink()
            continue
        fsync_path(source)
        os.chmod(source, 0o600)
        stored = store.stored(table, source.relative_to(staging).as_posix())
        moves.append((source, stored))
        size = source.stat().st_size
        data.append({"table_name": table, "path": stored, "rows": int(count), "size_bytes": size})
        total += int(count)
    store.put(moves)  # moved into the table's folder, or uploaded to the object store
    return total, data


def _batch_table(files: list[LogFile], ingest_id: str) -> pa.Table:
    return pa.table(
        {
            "file": pa.array([f.path for f in files], pa.string()),
            "rel": pa.array([f.rel for f in files], pa.string()),
            "content_hash": pa.array([f.content_hash for f in files], pa.string()),
            "size_bytes": pa.array([f.size for f in files], pa.int64()),
            "domain_hint": pa.array([f.domain_hint for f in files], pa.string()),
            "ingest_id": pa.array([ingest_id] * len(files), pa.string()),
            "forced_error": pa.array([f.conflict for f in files], pa.string()),
        }
    )


def _with_domain_rule(sql: str) -> str:
    return sql.replace("{domain_pattern}", DOMAIN_PATTERN)


def _run_step(name: str, step: Callable[[], object]) -> None:
    step()


def _repair(con: duckdb.DuckDBPyConnection, sql: dict[str, str]) -> None:
    if _repair_lines(con):  # read those lines again, repaired
        con.execute(sql["headers"])
        con.execute(sql["wire"])


def ingest_batch(
    files: list[LogFile],
    ingest_id: str,
    layout: Layout,
    tag: str,
    run_step: Callable[[str, Callable[[], object]], None] = _run_step,
) -> IngestStats:
    """Read one batch of log files and write their rows as Parquet files (not yet committed).
    Each step goes through `run_step(name, step)` (bench/ingest_batch.py times them)."""
    con = batch_connection(layout.staging / ingest_id / f"spill-{os.getpid()}")
    try:
        con.register("batch_arrow", _batch_table(files, ingest_id))
        con.execute("CREATE TEMP TABLE batch AS SELECT * FROM batch_arrow")
        listed = "[" + ", ".join(sql_text(f.path) for f in files) + "]"
        sql = {k: _with_domain_rule(v).replace("{files}", listed) for k, v in statements("ingest")}
        for name, text in sql.items():
            if name == "lines":
                run_step("lines", lambda: _read_lines(con, sql))
            elif name not in ("file_text", "file_bytes", "undecodable_lines"):
                run_step(name, partial(con.execute, text))
            if name == "wire":
                run_step("surrogate repair", lambda: _repair(con, sql))
        run_step("turns (Python)", lambda: _assign_turns(con))
        run_step("tool lists (Python)", lambda: _describe_tools(con))
        stats = IngestStats(files=len(files), bytes=sum(f.size for f in files))
        queries = {k: _with_domain_rule(v) for k, v in statements("ingest_tables")}
        run_step("file_meta", lambda: con.execute(queries.pop("file_meta")))

        # every table's rows but the quarantine's fall in the partitions of the files read
        # (a quarantined file's lie elsewhere: that table's are found by its query)
        read_in = con.execute(
            "SELECT DISTINCT domain, day FROM file_meta WHERE file_error IS NULL"
        ).fetchall()

        def write(table: str) -> None:
            stats.rows[table], data = write_parquet(
                con,
                queries[table],
                table,
                layout,
                ingest_id,
                tag,
                partitions=None if table == "quarantine" else read_in,
            )
            stats.data.extend(data)

        for table in OUTPUT_TABLES:
            run_step(f"write {table}", partial(write, table))
        totals = con.execute(
            "SELECT sum(lines_read), sum(lines_ingested), sum(lines_quarantined), "
            "sum(lines_dropped) FROM line_counts"
        ).fetchall()[0]
        (stats.lines_read, stats.lines_ingested, stats.lines_quarantined, stats.lines_dropped) = (
            int(x or 0) for x in totals
        )
        position = {f.path: i for i, f in enumerate(files)}
        for path, session, error in con.execute(
            "SELECT file, session, file_error FROM file_meta"
        ).fetchall():
            i = position[path]
            status = (
                "ingested" if error is None else "conflict" if files[i].conflict else "quarantined"
            )
            stats.outcomes.append((i, session, status, error))
        fault("batch-written")
        return stats
    finally:
        con.close()
        shutil.rmtree(layout.staging / ingest_id / tag, ignore_errors=True)


def _with_logs(stats: IngestStats, files: list[LogFile]) -> IngestStats:
    """The batch's registry rows, from the caller's own LogFile objects: they share its
    strings (a worker's copies of a million files' paths and hashes held ~0.7 GB)."""
    for i, session, status, note in stats.outcomes:
        log = files[i]
        stats.logs.append(
            {
                "path": log.rel,
                "size_bytes": log.size,
                "mtime_ns": log.mtime_ns,
                "content_hash": log.content_hash,
                "session": log.session if session == log.session else session,
                "status": status,
                "note": note,
            }
        )
    stats.outcomes = []
    return stats


def ingest_files(
    files: list[LogFile],
    ingest_id: str,
    layout: Layout,
    on_batch: Callable[[IngestStats], None] | None = None,
    pool: Executor | None = None,
    workers: int | None = None,
) -> IngestStats:
    """Ingest files batch by batch, more than one batch in parallel on `pool` (the run's
    worker_pool, of `workers` processes; without one, a pool of its own); `on_batch` hears
    about each one as it finishes (for progress). Nothing is committed here."""
    workers = workers or WORKERS
    jobs = [
        (b, ingest_id, layout, f"{ingest_id}-{i}") for i, b in enumerate(batches(files, workers))
    ]
    if len(jobs) <= 1 or (pool is None and workers <= 1):
        total = IngestStats()
        try:
            for job in jobs:
                stats = _with_logs(ingest_batch(*job), job[0])
                total.add(stats)
                if on_batch:
                    on_batch(stats)
        finally:
            close_batch_database()  # (a worker's ends with its process, after the run)
        return total
    if pool is None:
        with worker_pool(min(workers, len(jobs))) as own:  # two or more: a pool
            assert own is not None
            return _on_pool(own, jobs, on_batch)
    return _on_pool(pool, jobs, on_batch)


def _on_pool(pool: Executor, jobs: list[tuple], on_batch) -> IngestStats:
    total = IngestStats()
    batch_of = {pool.submit(ingest_batch, *job): job[0] for job in jobs}
    for future in as_completed(batch_of):
        stats = _with_logs(future.result(), batch_of[future])
        total.add(stats)
        if on_batch:
            on_batch(stats)
    total.logs.sort(key=lambda r: r["path"])
    return total
