"""Assets: session logs -> the warehouse's tables (sessions, messages, calls, context, tools,
quarantine) -> steps.

Thin on purpose: the work is in warehouse/ (SQL) and stretto/ (the turn rule); these attach
what a person wants to see in the Dagster UI: counts, each table's columns with what they mean,
its first rows, and checks (lines read = ingested + quarantined + dropped, the quarantine's
share, tool contracts that changed).
"""

import hashlib
import time
import uuid

import dagster as dg

from assets.metadata import (
    EVERY_ASSET,
    LogProgress,
    Timings,
    column_schema,
    link,
    preview,
    skipped,
)
from assets.partitions import known_parts, register
from assets.resources import StrettoHome
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV, RedactError
from stretto.logs.sessionlog import LogError
from stretto.progress import Progress
from warehouse import discover, ingest, redacted, store, workers
from warehouse.layout import Layout
from warehouse.storage import StorageError

GROUP = "warehouse"
TABLE_DESCRIPTIONS = {
    "sessions": "One row per ingested session log: who, when, where the log is, and how its "
    "lines fared (read = ingested + quarantined + dropped).",
    "messages": "One row per ingested wire line of a session log.",
    "calls": "One row per tools/call from the host or the proxy, with its answer and LLM turn.",
    "context": "One row per conversation line (from: context) of a session log.",
    "tools": "One row per tool per session: its kind, contract and documentation.",
    "quarantine": "What could not be ingested: the file, the line and why.",
}
# The quarantine's share of the lines a run read above which its check warns.
QUARANTINE_WARN_SHARE = 0.05


def new_ingest_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def _failure(exc: Exception) -> dg.Failure:
    """An expected failure (another run holds the lock, the object store cannot be used): one
    line, no traceback."""
    return dg.Failure(description=str(exc), allow_retries=False)


def pending(layout: Layout, logs=None, pool=None) -> discover.Plan:
    """The logs under logs/ (or the folder `logs`: the redacted copy) whose content is not in
    the warehouse yet, by the registry's rule: a path is looked at again unless its size, mtime
    and ctime say it was not touched since it was last seen, then known by its content hash
    (warehouse/discover.py); hashed on `pool` (warehouse/workers.py), if given."""
    return discover.discover(layout, store.known_state(layout), logs=logs, pool=pool)


class IngestConfig(dg.Config):
    """`stretto ingest --redact`: ingest a pseudonymised copy of the logs (warehouse/redacted.py;
    the salt is read from the environment variable `salt_env`, never given here)."""

    redact: bool = False
    salt_env: str = SALT_ENV
    keep_shared: int = KEEP_SHARED
    hash_fields: list[str] = []


def to_read(layout: Layout, config: IngestConfig, say, pool=None) -> discover.Plan:
    """What this run reads: the logs, or with `redact` their pseudonymised copy brought up to
    date; refused (RedactError) when it would mix redacted and original sessions."""
    if not config.redact:
        redacted.check(layout, None)
        return pending(layout, pool=pool)
    redaction = redacted.Redaction(config.salt_env, config.keep_shared, tuple(config.hash_fields))
    redacted.check(layout, redaction)
    return pending(layout, redacted.redact_logs(layout, redaction, say), pool)


def plan_digest(plan: discover.Plan) -> str:
    text = "\n".join(f"{f.rel} {f.size} {f.content_hash}" for f in plan.read)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dg.observable_source_asset(
    name="logs",
    group_name=GROUP,
    description="The session logs under logs/ (written by stretto-proxy). Observed by size and "
    "content hash, whatever the mtime: its version changes when a log's content is not in "
    "the warehouse yet.",
)
def logs(context, stretto: StrettoHome) -> dg.ObserveResult:
    layout = stretto.layout()
    plan = pending(layout)
    return dg.ObserveResult(
        data_version=dg.DataVersion(f"{plan.commits}-{plan_digest(plan)}"),
        metadata={
            "logs": link(layout.logs),
            "files not in the warehouse yet": len(plan.read),
            "bytes not in the warehouse yet": sum(f.size for f in plan.read),
            "files unchanged": plan.unchanged,
        },
    )


def logs_seen(layout: Layout, read: int, unchanged: int, known: int) -> dg.AssetObservation:
    """What an ingest saw of the logs, as an observation of `logs` (the UI says when the logs
    were last looked at, not "Never observed")."""
    return dg.AssetObservation(
        asset_key="logs",
        metadata={
            "logs": link(layout.logs),
            "files read": read,
            "files unchanged": unchanged,
            "files already in (same content)": known,
        },
    )


def materializes_every_asset(context: dg.AssetExecutionContext) -> bool:
    """Whether each table materializes even when nothing was read: in a backfill (Materialize
    all: Dagster's asset backfill waits for every asset it asked for) and in a run whose
    caller reads every asset's metadata (`stretto ingest`: pipeline/run.py). Elsewhere (the
    nightly, the new_logs sensor) an ingest that read nothing materializes nothing."""
    return "dagster/backfill" in context.run.tags or EVERY_ASSET in context.run.tags


# One asset per table, each named as the table (the outputs' names differ: `context` is a
# reserved name for an output).
TABLE_OUTS = {
    f"{table}_table": dg.AssetOut(
        key=table,
        group_name=GROUP,
        description=TABLE_DESCRIPTIONS[table],
        is_required=False,
        dagster_type=dg.Nothing,
        metadata={"dagster/column_schema": column_schema(table)},
    )
    for table in ingest.OUTPUT_TABLES
}
CHECKS = [
    dg.AssetCheckSpec(
        "lines_read_balance",
        asset="sessions",
        blocking=True,
        description="lines read = ingested + quarantined + dropped, for the run's files; "
        "blocking: when it does not hold the run fails, before steps, counts or a relearn",
    ),
    dg.AssetCheckSpec(
        "quarantine_share",
        asset="quarantine",
        description=f"under {QUARANTINE_WARN_SHARE:.0%} of the lines a run read quarantined",
    ),
    dg.AssetCheckSpec(
        "tool_contracts_seen_before",
        asset="tools",
        description="each new session's tools/list contracts were seen before in its domain "
        "(a tool whose contract changed is named)",
    ),
]


def nothing_to_check(specs: list[dg.AssetCheckSpec], reason: str):
    """Check results for an asset that was skipped (Dagster wants one per check): passed,
    saying why nothing was checked."""
    for spec in specs:
        yield dg.AssetCheckResult(
            asset_key=spec.asset_key,
            check_name=spec.name,
            passed=True,
            description=f"nothing to check: {reason}",
        )


def table_preview(read: store.Reader, table: str, ingest_id: str | None = None) -> dg.MetadataValue:
    """The first rows of `table` (of one ingest run, if given: read from the files committed
    since it), long cells cut."""
    if ingest_id:
        view = read.view(table, read.commit_of(ingest_id))
        rows = read(f"SELECT * FROM {view} WHERE ingest_id = '{ingest_id}' LIMIT 5").to_pylist()
    else:
        rows = read(f"SELECT * FROM {read.view(table)} LIMIT 5").to_pylist()
    names = [c for c in (rows[0] if rows else {}) if c != "ingest_id"]
    return preview(rows, names)


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


@dg.multi_asset(outs=TABLE_OUTS, deps=["logs"], check_specs=CHECKS, can_subset=False)
def session_tables(context: dg.AssetExecutionContext, config: IngestConfig, stretto: StrettoHome):
    """Ingest the new and changed logs (warehouse.store.ingest_run) into the tables."""
    layout = stretto.layout()
    timings = Timings(context.log.info)
    if not layout.logs.is_dir() and not store.has_warehouse(layout):
        reason = f"no session logs under {layout.logs} yet"
        for table in ingest.OUTPUT_TABLES:
            yield skipped(context, reason, table)
        yield from nothing_to_check(CHECKS, reason)
        return
    # one pool of worker processes hashes the new logs, then ingests them
    with workers.worker_pool() as pool:
        with timings.phase("finding new logs"):
            try:
                plan = to_read(layout, config, context.log.warning, pool)
            except (RedactError, LogError, StorageError) as exc:
                raise _failure(exc) from None
        try:
            with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
                ingest_id = new_ingest_id()
                bar = Progress(
                    len(plan.read), "ingesting", " files", enabled=stretto.progress or None
                )
                said = LogProgress(context.log.info, len(plan.read), "files ingested")

                def advance(batch: ingest.IngestStats) -> None:
                    bar.advance(batch.files)
                    said.advance(batch.files)

                with timings.phase("ingesting"):
                    plan, stats = store.ingest_run(
                        layout,
                        plan,
                        ingest_id,
                        on_batch=advance,
                        say=context.log.warning,
                        pool=pool,
                    )
                bar.close()
                said.close()
        except (store.WarehouseBusy, StorageError) as exc:
            raise _failure(exc) from None
    # committed: from here on only their counts are needed. A first ingest's million files
    # (plan and registry rows, ~0.6 GB) are let go before the metadata's queries and the
    # `steps` step run in this same process.
    known = len(plan.known)
    for rows in (plan.read, plan.known, stats.logs, stats.data):
        rows.clear()
    added = register(context.instance, known_parts(layout))
    if added:
        context.log.info("new partitions: " + ", ".join(added))
    yield logs_seen(layout, stats.files, plan.unchanged, known)
    if not stats.files and not materializes_every_asset(context):
        reason = "no log holds content the warehouse does not have: nothing changed"
        context.log.info(reason)
        yield from nothing_to_check(CHECKS, reason)
        return
    # one connection for all the metadata's queries, reading only the data files each needs
    with store.reading(layout, views=False) as read:
        totals = read.rows(ingest.OUTPUT_TABLES)
        previews = {
            t: table_preview(read, t, ingest_id if stats.rows[t] else None)
            for t in ingest.OUTPUT_TABLES
        }
        drift = contract_drift(read, ingest_id) if stats.rows["tools"] else []
    run: dict = {  # dagster's metadata values, of several types
        "ingest id": ingest_id,
        "files read": stats.files,
        "files unchanged": plan.unchanged,
        "files already in (same content)": known,
        "bytes read": stats.bytes,
        "lines read": stats.lines_read,
        "lines ingested": stats.lines_ingested,
        "lines quarantined": stats.lines_quarantined,
        "lines dropped": stats.lines_dropped,
        **{f"rows written: {t}": n for t, n in stats.rows.items()},
        "warehouse": link(layout.database),
        **timings.metadata(),
    }
    for table in ingest.OUTPUT_TABLES:
        metadata: dict = {
            "dagster/row_count": totals[table],
            "rows written": stats.rows[table],
            "preview": previews[table],
        }
        if table == "sessions":
            metadata.update(run)
        yield dg.MaterializeResult(asset_key=table, metadata=metadata)
    yield dg.AssetCheckResult(
        asset_key="sessions",
        check_name="lines_read_balance",
        passed=stats.balanced,
        description=f"lines read {stats.lines_read} = ingested {stats.lines_ingested} + "
        f"quarantined {stats.lines_quarantined} + dropped {stats.lines_dropped}"
        + ("" if stats.balanced else ": DOES NOT HOLD"),
        metadata={"lines read": stats.lines_read},
    )
    share = stats.lines_quarantined / stats.lines_read if stats.lines_read else 0.0
    yield dg.AssetCheckResult(
        asset_key="quarantine",
        check_name="quarantine_share",
        passed=share < QUARANTINE_WARN_SHARE,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{stats.lines_quarantined} of {stats.lines_read} lines read quarantined "
        f'({share:.1%}); see them with stretto sql "SELECT file, line, error FROM quarantine"',
        metadata={"share": share},
    )
    yield dg.AssetCheckResult(
        asset_key="tools",
        check_name="tool_contracts_seen_before",
        passed=not drift,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            "tools whose contract changed: " + ", ".join(drift)
            if drift
            else "every tool's contract was seen before (or the tool is new)"
        ),
        metadata={"changed": ", ".join(drift) or "none"},
    )


@dg.asset(
    group_name=GROUP,
    deps=["sessions", "calls"],  # and `context` (a name Dagster reserves for inputs)
    output_required=False,
    description="Each session's abstract steps (one per tool call, one per assistant reply), "
    "the input of learning; derived for the sessions that have none yet.",
    metadata={"dagster/column_schema": column_schema("steps")},
)
def steps(context: dg.AssetExecutionContext, stretto: StrettoHome):
    layout = stretto.layout()
    if not store.has_warehouse(layout):
        yield skipped(context, f"no warehouse at {layout.warehouse} yet (nothing ingested)")
        return
    try:
        with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
            step_id = new_ingest_id()
            written = store.derive_steps(layout, step_id)
    except (store.WarehouseBusy, StorageError) as exc:
        raise _failure(exc) from None
    with store.reading(layout, views=False) as read:
        total = read.rows(["steps"])["steps"]
        preview = table_preview(read, "steps", step_id if written else None)
    yield dg.MaterializeResult(
        metadata={"rows written": written, "dagster/row_count": total, "preview": preview}
    )


INGEST_ASSETS = [session_tables, steps]
