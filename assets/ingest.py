"""Assets: session logs -> the warehouse's tables (sessions, messages, calls, context, tools,
quarantine) -> steps.

Thin on purpose: a run is warehouse.ingest.run's (discovery, the lock, the workers, the commit;
the SQL in warehouse/, the turn rule in stretto/), and so is its report; these turn the report
into what a person wants to see in the Dagster UI: counts, each table's columns with what they
mean, its first rows, and checks (lines read = ingested + quarantined + dropped, the
quarantine's share, tool contracts that changed).
"""

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
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV
from stretto.progress import Progress
from warehouse import store
from warehouse.ingest import run as ingestrun
from warehouse.ingest.batches import OUTPUT_TABLES
from warehouse.ingest.redacted import Redaction
from warehouse.ingest.run import IngestRefused, pending, plan_digest
from warehouse.layout import Layout

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


def _failure(exc: Exception) -> dg.Failure:
    """An expected failure (another run holds the lock, the object store cannot be used): one
    line, no traceback."""
    return dg.Failure(description=str(exc), allow_retries=False)


class IngestConfig(dg.Config):
    """`stretto ingest --redact`: ingest a pseudonymised copy of the logs
    (warehouse/ingest/redacted.py;
    the salt is read from the environment variable `salt_env`, never given here)."""

    redact: bool = False
    salt_env: str = SALT_ENV
    keep_shared: int = KEEP_SHARED
    hash_fields: list[str] = []

    def redaction(self) -> Redaction | None:
        """The redaction the run reads the logs through, if any."""
        if not self.redact:
            return None
        return Redaction(self.salt_env, self.keep_shared, tuple(self.hash_fields))


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
    for table in OUTPUT_TABLES
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


def rows_preview(rows: list[dict]) -> dg.MetadataValue:
    """A table's first rows (warehouse.ingest.run.first_rows) as the UI shows them."""
    return preview(rows, list(rows[0]) if rows else [])


class _Ingesting:
    """The run's progress in files: a bar on the terminal (the CLI's) and a line in the run
    log every few seconds."""

    def __init__(self, context: dg.AssetExecutionContext, stretto: StrettoHome, files: int):
        self.bar = Progress(files, "ingesting", " files", enabled=stretto.progress or None)
        self.said = LogProgress(context.log.info, files, "files ingested")

    def advance(self, n: int) -> None:
        self.bar.advance(n)
        self.said.advance(n)

    def close(self) -> None:
        self.bar.close()
        self.said.close()


@dg.multi_asset(outs=TABLE_OUTS, deps=["logs"], check_specs=CHECKS, can_subset=False)
def session_tables(context: dg.AssetExecutionContext, config: IngestConfig, stretto: StrettoHome):
    """Ingest the new and changed logs (warehouse.ingest.run.run) into the tables."""
    layout = stretto.layout()
    reason = ingestrun.nothing_to_read(layout)
    if reason:
        for table in OUTPUT_TABLES:
            yield skipped(context, reason, table)
        yield from nothing_to_check(CHECKS, reason)
        return
    timings = Timings(context.log.info)
    try:
        report = ingestrun.run(
            layout,
            config.redaction(),
            lambda files: _Ingesting(context, stretto, files),
            wait_seconds=stretto.wait_seconds,
            say=context.log.info,
            warn=context.log.warning,
            phase=timings.phase,
            tables_when_idle=materializes_every_asset(context),  # else nothing is shown
        )
    except IngestRefused as exc:
        raise _failure(exc) from None
    added = register(context.instance, known_parts(layout))
    if added:
        context.log.info("new partitions: " + ", ".join(added))
    stats = report.stats
    yield logs_seen(layout, stats.files, report.unchanged, report.known)
    if not stats.files and not materializes_every_asset(context):
        reason = "no log holds content the warehouse does not have: nothing changed"
        context.log.info(reason)
        yield from nothing_to_check(CHECKS, reason)
        return
    run: dict = {  # dagster's metadata values, of several types
        "ingest id": report.ingest_id,
        "files read": stats.files,
        "files unchanged": report.unchanged,
        "files already in (same content)": report.known,
        "bytes read": stats.bytes,
        "lines read": stats.lines_read,
        "lines ingested": stats.lines_ingested,
        "lines quarantined": stats.lines_quarantined,
        "lines dropped": stats.lines_dropped,
        **{f"rows written: {t}": n for t, n in stats.rows.items()},
        "warehouse": link(layout.database),
        **timings.metadata(),
    }
    for table in OUTPUT_TABLES:
        metadata: dict = {
            "dagster/row_count": report.totals[table],
            "rows written": stats.rows[table],
            "preview": rows_preview(report.previews[table]),
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
    share = report.quarantine_share
    yield dg.AssetCheckResult(
        asset_key="quarantine",
        check_name="quarantine_share",
        passed=share < QUARANTINE_WARN_SHARE,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"{stats.lines_quarantined} of {stats.lines_read} lines read quarantined "
        f'({share:.1%}); see them with stretto sql "SELECT file, line, error FROM quarantine"',
        metadata={"share": share},
    )
    drift = report.drift
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
        report = ingestrun.derive_steps(layout, stretto.wait_seconds, context.log.info)
    except IngestRefused as exc:
        raise _failure(exc) from None
    yield dg.MaterializeResult(
        metadata={
            "rows written": report.written,
            "dagster/row_count": report.total,
            "preview": rows_preview(report.preview),
        }
    )


INGEST_ASSETS = [session_tables, steps]
