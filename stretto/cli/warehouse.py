"""The commands over session logs and the warehouse: sessions, ingest, sql (its result
printed by stretto.cli.queryresult)."""

from __future__ import annotations

import argparse
import sys
import warnings

from stretto.cli.learning_options import otel_logs
from stretto.cli.options import (
    Commands,
    add_hash_field,
    add_home,
    add_wait,
    aligned,
    command,
    interruptible,
    say,
)
from stretto.logs.domain import DomainError, check_domain
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV
from stretto.logs.sessionlog import list_session_logs, read_session_log
from stretto.model.flow import load_manifest


def register(commands: Commands) -> None:
    sessions = command(
        commands,
        "sessions",
        _sessions,
        summary="list the session logs in a folder as the reader sees them",
        description="List the session logs in DIR (not *.flow.jsonl or *.confirm.jsonl): "
        "each one's domain, agent model, the agent's calls, the flow's lookups, LLM turns and "
        "user messages. A malformed log is an error naming its file and line.",
        examples=[
            "stretto sessions ~/.stretto/logs/notes",
            "stretto sessions ~/.stretto/logs/notes | head -3",
        ],
    )
    sessions.add_argument("dir", metavar="DIR")

    ingest = command(
        commands,
        "ingest",
        _ingest,
        summary="ingest new and changed session logs into the warehouse",
        description="Ingest the session logs under HOME/logs/ into Parquet tables under "
        "HOME/warehouse/ (sessions, messages, calls, context, tools, steps, quarantine) with "
        "DuckDB views over them, running the pipeline's Dagster assets in this process. A file "
        "already ingested with the same content is not read again; a changed one replaces its "
        "rows. A malformed line is quarantined with its file, line and error, and the rest of "
        "its file is still ingested. With --otel, the traces of an OpenTelemetry export are "
        "first written as session logs under HOME/logs/<domain>/, one per trace.",
        examples=[
            "stretto ingest --home /srv/stretto --wait 0",
            "stretto ingest --otel traces.json --manifest shop.manifest.json",
        ],
    )
    add_home(ingest)
    add_warehouse(ingest)
    add_wait(ingest, "another ingest run to finish")
    ingest.add_argument(
        "--otel",
        metavar="FILE",
        help="first write the traces of this OpenTelemetry export (OTLP/JSON or protobuf) as "
        "session logs under HOME/logs/<domain>/",
    )
    ingest.add_argument(
        "--manifest",
        metavar="FILE",
        help="with --otel: the tools' kinds (and the domain) for the logs' tool lists",
    )
    ingest.add_argument(
        "--domain",
        metavar="NAME",
        help="with --otel: the sessions' domain (default: the manifest's, else otel)",
    )
    ingest.add_argument(
        "--redact",
        action="store_true",
        help="ingest a pseudonymised copy of the logs (stretto redact's rules, into "
        "HOME/warehouse/redacted/): no original value reaches the warehouse; a home is "
        "redacted or not for good",
    )
    ingest.add_argument(
        "--salt-env",
        metavar="VAR",
        default=SALT_ENV,
        help="with --redact: the environment variable holding the salt (%(default)s)",
    )
    ingest.add_argument(
        "--keep-shared",
        type=int,
        metavar="N",
        default=KEEP_SHARED,
        help="with --redact: keep a value seen in N or more sessions of a folder; 0: none "
        "(%(default)s)",
    )
    add_hash_field(
        ingest, "with --redact: always hash the values of JSON keys NAME (repeatable, or a,b)"
    )
    ingest.add_argument(
        "--retain-days",
        type=int,
        metavar="DAYS",
        help="then drop, in one commit, the warehouse's data of sessions that started more "
        "than DAYS days ago (UTC days), and say what went",
    )

    sql = command(
        commands,
        "sql",
        _sql,
        summary="query the warehouse with SQL",
        description="Run one SQL query (DuckDB) against the warehouse's views: sessions, "
        "messages, calls, context, tools, steps, quarantine, and the registry's registry, "
        "session_current, content_path, path_latest and data_files (docs/formats.md §2). "
        "Read-only and confined to the warehouse: only SELECT and EXPLAIN run, and DuckDB "
        "itself can open no file, to read or to write, whatever the statement. Prints an "
        "aligned table (long cells cut), CSV (lists and structs as JSON) or a JSON array of "
        "objects (null for NaN).",
        examples=[
            'stretto sql "SELECT tool, count(*) AS calls FROM calls GROUP BY tool"',
            'stretto sql "SELECT * FROM sessions" --format json | jq .',
        ],
    )
    sql.add_argument("query", metavar="QUERY")
    add_home(sql)
    add_warehouse(sql)
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")


def add_warehouse(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warehouse",
        metavar="URL",
        help="keep the warehouse's committed data (Parquet files and registry) at this "
        "object-store URL, s3://bucket/prefix, instead of under HOME/warehouse/ (default: "
        "$STRETTO_WAREHOUSE); credentials come from the environment (AWS_ACCESS_KEY_ID, ...)",
    )


def _sessions(args: argparse.Namespace) -> int:
    """Summarize each session log in a folder: what the reader makes of it."""
    from stretto.logs.episode import User, episode_from_log  # entry point: sessions only

    rows = []
    for path in list_session_logs(args.dir):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log = read_session_log(path)
        for warning in caught:
            say(f"warning: {warning.message}")
        episode = episode_from_log(log)
        calls = episode.calls()
        counts = (
            sum(not c.by_proxy for c in calls),
            sum(c.by_proxy for c in calls),
            episode.llm_turns(),
            sum(isinstance(e, User) for e in episode.events),
        )
        rows.append([episode.id, episode.domain, episode.agent_model, *map(str, counts)])
    header = ["session", "domain", "agent model", "calls", "lookups", "turns", "user msgs"]
    sys.stdout.write("\n".join(aligned(header, rows)) + "\n")
    say(f"{len(rows)} session(s) in {args.dir}")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    """Run the ingest assets in this process (the same code the Dagster UI runs)."""
    # entry point: only `stretto ingest` runs the pipeline (Dagster, DuckDB, polars)
    from assets.ingest import INGEST_ASSETS
    from pipeline.run import failure_message, materialize, output_metadata
    from warehouse.layout import Layout

    layout = Layout.at(args.home, args.warehouse)
    redaction_options = args.keep_shared != KEEP_SHARED or args.hash_field
    if not args.redact and (redaction_options or args.salt_env != SALT_ENV):
        say("--salt-env, --keep-shared and --hash-field go with --redact")
        return 2
    if args.keep_shared < 0 or (args.retain_days is not None and args.retain_days < 1):
        say("--keep-shared wants 0 or more, --retain-days 1 or more")
        return 2
    if args.otel:
        if not _write_otel(args, layout.logs):
            return 1
    elif args.manifest or args.domain:
        say("--manifest and --domain go with --otel")
        return 2
    config = {
        "redact": args.redact,
        "salt_env": args.salt_env,
        "keep_shared": args.keep_shared,
        "hash_fields": args.hash_field,
    }
    result = interruptible(
        lambda: materialize(
            INGEST_ASSETS,
            str(layout.home),
            args.wait,
            asset_config={"session_tables": config},
            warehouse=layout.url,
        ),
        "interrupted; the next ingest removes the partial run",
    )
    if not result.success:
        say(f"ingest failed: {failure_message(result)}")
        return 1
    found = done = output_metadata(result, "sessions")
    steps = output_metadata(result, "steps")
    print(
        f"stretto: ingested {done['files read']} file(s) ({found['files unchanged']} unchanged): "
        f"{done['lines read']} lines read, {done['lines ingested']} ingested, "
        f"{done['lines quarantined']} quarantined, {done['lines dropped']} dropped; "
        f"{done['rows written: sessions']} sessions, {done['rows written: calls']} calls, "
        f"{steps['rows written']} steps; warehouse {layout.url or layout.database}"
    )
    if done["lines quarantined"]:
        say('see them with: stretto sql "SELECT file, line, error FROM quarantine"')
    if args.retain_days is not None:
        return _retain(layout, args.retain_days, args.wait)
    return 0


def _retain(layout, days: int, wait: float) -> int:
    """Drop the warehouse's data older than `days`, with the ingest lock held."""
    # `ingest --retain-days` only: the warehouse's store loads DuckDB and pyarrow
    from warehouse import store
    from warehouse.datastore import StorageError
    from warehouse.ingest.run import new_ingest_id
    from warehouse.upkeep import retention

    try:
        with store.ingest_lock(layout, wait, say):
            dropped = retention.drop_older(layout, days, new_ingest_id())
    except (store.WarehouseBusy, StorageError) as exc:
        say(str(exc))
        return 1
    say(dropped.said(days))
    return 0


def _write_otel(args: argparse.Namespace, logs) -> bool:
    """`ingest --otel`: the export's traces as session logs under HOME/logs/<domain>/."""
    manifest = load_manifest(args.manifest) if args.manifest else None
    try:
        domain = check_domain(args.domain or (manifest or {}).get("domain") or "otel")
    except DomainError as exc:
        say(str(exc))
        return False
    if not otel_logs(args.otel, manifest, domain, logs / domain):
        say(f"{args.otel}: no trace with a tool call or an LLM turn to ingest")
        return False
    return True


def _sql(args: argparse.Namespace) -> int:
    # entry point: only `stretto sql` loads DuckDB, and polars to print the result
    import duckdb

    from stretto.cli.queryresult import render
    from warehouse import store
    from warehouse.datastore import StorageError
    from warehouse.layout import Layout

    try:
        table = store.query(Layout.at(args.home, args.warehouse), args.query)
    except (store.NoWarehouse, StorageError) as exc:
        say(str(exc))
        return 1
    except duckdb.Error as exc:
        say(f"query failed: {str(exc).strip()}")
        return 1
    sys.stdout.write(render(table, args.format))
    return 0
