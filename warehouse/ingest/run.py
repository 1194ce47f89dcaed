"""One ingest run from start to end, as the `session_tables` asset (and so `stretto ingest`)
runs it: find the logs whose content is not in the warehouse yet (or their redacted copy
brought up to date), hold the ingest lock, ingest them on one pool of worker processes,
commit; then report what a person wants to see of the run (counts, each table's first rows,
the tools whose contract changed). `derive_steps` does the same for the steps of the
committed sessions.

The batches' work is warehouse/ingest/batches.py's, the lock's and the commit's
warehouse/store.py's; this module only puts them in order (it imports both, so it is neither of
them).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stretto.logs.pseudonyms import RedactError
from stretto.logs.sessionlog import LogError
from warehouse import registry, store
from warehouse.datastore import StorageError
from warehouse.ingest import discover, redacted, steps, workers
from warehouse.ingest.batches import OUTPUT_TABLES, IngestStats, ingest_files
from warehouse.layout import Layout

# Where the contract drift check first looks for each tool's earlier contract: the days from
# this many before the run's first day on (a tool listed then needs no older file read).
DRIFT_WINDOW_DAYS = 7
# One pass, grouped by (domain, tool): whether an earlier run listed it, the contract of the
# latest started earlier session, and the run's own contracts (hashed: only compared). A
# window over every listing, or a CTE read twice (materialized), held ~0.6 GB at 200k sessions.
DRIFT = (
    "WITH per AS (SELECT s.domain, t.tool, bool_or(t.ingest_id <> '{run}') AS seen, "
    "arg_max(hash(t.contract), s.started_unix_ms) FILTER (WHERE t.ingest_id <> '{run}') AS last, "
    "list(DISTINCT hash(t.contract)) FILTER (WHERE t.ingest_id = '{run}') AS now "
    "FROM {tools} t JOIN {sessions} s USING (session) GROUP BY ALL) "
    "SELECT domain, tool, seen, seen AND now <> [last] AS changed FROM per "
    "WHERE len(now) > 0 ORDER BY 1, 2"
)
PREVIEW_ROWS = 5


class IngestRefused(RuntimeError):
    """An expected failure, said in one line: another run holds the lock, the logs cannot be
    read or redacted, the object store cannot be used."""


class Tally(Protocol):
    """How far the run got, in files (stretto.progress.Progress is one)."""

    def advance(self, n: int) -> None: ...

    def close(self) -> None: ...


def _ignore(message: str) -> None:
    pass


def _untimed(name: str) -> AbstractContextManager[None]:
    return nullcontext()


def new_ingest_id() -> str:
    """A run's id: its UTC start time, then 8 random hex digits."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def pending(layout: Layout, logs: Path | None = None, pool=None) -> discover.Plan:
    """The logs under logs/ (or the folder `logs`: the redacted copy) whose content is not in
    the warehouse yet, by the registry's rule: a path is looked at again unless its size, mtime
    and ctime say it was not touched since it was last seen, then known by its content hash
    (warehouse/ingest/discover.py); hashed on `pool` (warehouse/ingest/workers.py), if given."""
    return discover.discover(layout, store.known_state(layout), logs=logs, pool=pool)


def plan_digest(plan: discover.Plan) -> str:
    """A short digest of what a plan would read: it changes when a new log's content does."""
    text = "\n".join(f"{f.rel} {f.size} {f.content_hash}" for f in plan.read)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def to_read(
    layout: Layout, redaction: redacted.Redaction | None, warn: Callable[[str], None], pool=None
) -> discover.Plan:
    """What this run reads: the logs, or with a `redaction` their pseudonymised copy brought
    up to date; refused (RedactError) when it would mix redacted and original sessions."""
    if redaction is None:
        redacted.check(layout, None)
        return pending(layout, pool=pool)
    redacted.check(layout, redaction)
    return pending(layout, redacted.redact_logs(layout, redaction, warn), pool)


def nothing_to_read(layout: Layout) -> str | None:
    """Why a run has nothing to do (no logs and no warehouse yet), else None."""
    if not layout.logs.is_dir() and not store.has_warehouse(layout):
        return f"no session logs under {layout.logs} yet"
    return None


@dataclass
class IngestReport:
    """What an ingest run did, for its metadata and checks: `stats` are its counts (their
    registry rows let go once committed), `unchanged` and `known` the files it did not read
    (untouched since last seen; touched but with content already in), `totals` each table's
    rows after it, `previews` each table's first rows (the run's own when it wrote some),
    `drift` the tools of its sessions whose contract changed (`domain: tool`)."""

    ingest_id: str
    stats: IngestStats
    unchanged: int
    known: int
    totals: dict[str, int]
    previews: dict[str, list[dict]]
    drift: list[str]

    @property
    def quarantine_share(self) -> float:
        """The share of the lines read that were quarantined."""
        read = self.stats.lines_read
        return self.stats.lines_quarantined / read if read else 0.0


def ingest_plan(
    layout: Layout,
    plan: discover.Plan,
    ingest_id: str,
    on_batch: Callable[[IngestStats], None] | None = None,
    say: Callable[[str], None] = lambda message: None,
    pool: Executor | None = None,
) -> tuple[discover.Plan, IngestStats]:
    """One ingest run, with the lock held: undo what a crashed run left, read the planned
    files (planned again if another run committed since), commit; on `pool`, the run's
    worker processes (warehouse/ingest/workers.py), if given. The plan it followed and what it
    read."""
    for crashed in store.recover(layout):
        say(f"removed the uncommitted files of the crashed run {crashed}")
    store.delete_dropped(layout)
    if len(registry.commit_names(layout)) != plan.commits:  # another run committed since
        plan = discover.discover(layout, store.known_state(layout), logs=plan.logs, pool=pool)
    store.begin_run(layout, ingest_id)
    stats = ingest_files(plan.read, ingest_id, layout, on_batch=on_batch, pool=pool)
    if stats.logs or plan.known:
        store.commit_run(layout, ingest_id, stats.logs + plan.known, stats.data)
    else:
        store.abandon_run(layout, ingest_id)
    return plan, stats


def run(
    layout: Layout,
    redaction: redacted.Redaction | None = None,
    progress: Callable[[int], Tally] | None = None,
    *,
    wait_seconds: float = 0.0,
    say: Callable[[str], None] = _ignore,
    warn: Callable[[str], None] = _ignore,
    phase: Callable[[str], AbstractContextManager[None]] = _untimed,
    tables_when_idle: bool = True,
) -> IngestReport:
    """Ingest the new and changed logs into the tables (with `redaction`, their redacted copy)
    and report on it. One pool of worker processes hashes the new logs, then ingests them;
    the lock is awaited up to `wait_seconds`. `progress(files)` gives what each batch's files
    advance, while the lock is held; `say` hears the wait, `warn` what was cleaned up or
    redacted; `phase(name)` times each phase. With `tables_when_idle` False, a run that read
    nothing skips the report's queries of the tables (its totals and previews stay empty).
    IngestRefused for an expected failure."""
    with workers.worker_pool() as pool:
        with phase("finding new logs"):
            try:
                plan = to_read(layout, redaction, warn, pool)
            except (RedactError, LogError, StorageError) as exc:
                raise IngestRefused(str(exc)) from None
        try:
            with store.ingest_lock(layout, wait_seconds, say):
                ingest_id = new_ingest_id()
                tally = progress(len(plan.read)) if progress else None
                with phase("ingesting"):
                    plan, stats = ingest_plan(
                        layout,
                        plan,
                        ingest_id,
                        on_batch=(lambda batch: tally.advance(batch.files)) if tally else None,
                        say=warn,
                        pool=pool,
                    )
                if tally:
                    tally.close()
        except (store.WarehouseBusy, StorageError) as exc:
            raise IngestRefused(str(exc)) from None
    # committed: from here on only their counts are needed. A first ingest's million files
    # (plan and registry rows, ~0.6 GB) are let go before the report's queries and the
    # `steps` step run in this same process.
    known = len(plan.known)
    for rows in (plan.read, plan.known, stats.logs, stats.data):
        rows.clear()
    if not stats.files and not tables_when_idle:
        return IngestReport(ingest_id, stats, plan.unchanged, known, {}, {}, [])
    # one connection for all the report's queries, reading only the data files each needs
    with store.reading(layout, views=False) as read:
        totals = read.rows(OUTPUT_TABLES)
        previews = {
            t: first_rows(read, t, ingest_id if stats.rows[t] else None) for t in OUTPUT_TABLES
        }
        drift = contract_drift(read, ingest_id) if stats.rows["tools"] else []
    return IngestReport(ingest_id, stats, plan.unchanged, known, totals, previews, drift)


@dataclass
class StepsReport:
    """What deriving the steps did: its id, the rows it wrote, the table's rows after it, and
    its first rows (the run's own when it wrote some)."""

    steps_id: str
    written: int
    total: int
    preview: list[dict]


def derive_steps(
    layout: Layout, wait_seconds: float = 0.0, say: Callable[[str], None] = _ignore
) -> StepsReport:
    """Derive the steps of the sessions that have none yet (warehouse.ingest.steps.derive_steps),
    with the lock held (awaited up to `wait_seconds`, `say` hearing the wait). IngestRefused
    for an expected failure."""
    try:
        with store.ingest_lock(layout, wait_seconds, say):
            steps_id = new_ingest_id()
            written = steps.derive_steps(layout, steps_id)
    except (store.WarehouseBusy, StorageError) as exc:
        raise IngestRefused(str(exc)) from None
    with store.reading(layout, views=False) as read:
        total = read.rows(["steps"])["steps"]
        preview = first_rows(read, "steps", steps_id if written else None)
    return StepsReport(steps_id, written, total, preview)


def first_rows(read: store.Reader, table: str, ingest_id: str | None = None) -> list[dict]:
    """The first rows of `table` (of one ingest run, if given: read from the files committed
    since it), without their ingest id."""
    if ingest_id:
        view = read.view(table, read.commit_of(ingest_id))
        sql = f"SELECT * FROM {view} WHERE ingest_id = '{ingest_id}' LIMIT {PREVIEW_ROWS}"
    else:
        sql = f"SELECT * FROM {read.view(table)} LIMIT {PREVIEW_ROWS}"
    rows = read(sql).to_pylist()
    for row in rows:
        row.pop("ingest_id", None)
    return rows


def contract_drift(read: store.Reader, ingest_id: str) -> list[str]:
    """Tools of the run's sessions whose contract differs from the one last seen for that tool
    in the same domain's earlier sessions: `domain: tool`. Looked for in the days just before
    the run's first; the whole warehouse is read only when a tool was not listed then (a
    session's tools are in its day's partition, and the last seen is the latest started)."""
    since = read.commit_of(ingest_id)
    sessions = read.view("sessions", since)
    first = (
        read(
            f"SELECT strftime(min(day) - INTERVAL {DRIFT_WINDOW_DAYS} DAY, '%Y-%m-%d') AS d "
            f"FROM {sessions} WHERE ingest_id = '{ingest_id}'"
        )
        .column("d")[0]
        .as_py()
    )
    found = []
    if first:
        recent = {"tools": read.view("tools", days_from=first)}
        recent["sessions"] = read.view("sessions", days_from=first)
        found = read(DRIFT.format(**recent, run=ingest_id)).to_pylist()
    if not found or not all(r["seen"] for r in found):
        everything = {"tools": read.view("tools"), "sessions": read.view("sessions")}
        found = read(DRIFT.format(**everything, run=ingest_id)).to_pylist()
    return [f"{r['domain']}: {r['tool']}" for r in found if r["changed"]]
