"""The `stretto` command. Each subcommand imports what it needs when it runs."""

from __future__ import annotations

import argparse
import sys
import warnings

from stretto import __version__


def _sessions(args: argparse.Namespace) -> int:
    """Summarize each session log in a folder: what the reader makes of it."""
    from stretto.episode import Assistant, User, episode_from_log
    from stretto.sessionlog import list_session_logs, read_session_log

    rows = []
    for path in list_session_logs(args.dir):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log = read_session_log(path)
        for warning in caught:
            print(f"stretto: warning: {warning.message}", file=sys.stderr)
        episode = episode_from_log(log)
        turns = [e for e in episode.events if isinstance(e, Assistant) and e.calls]
        calls = episode.calls()
        rows.append(
            (
                episode.id,
                episode.domain,
                episode.agent_model,
                str(sum(not c.by_proxy for c in calls)),
                str(sum(c.by_proxy for c in calls)),
                str(len(turns)),
                str(sum(isinstance(e, User) for e in episode.events)),
            )
        )
    header = ("session", "domain", "agent model", "calls", "lookups", "turns", "user msgs")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(f"stretto: {len(rows)} session(s) in {args.dir}", file=sys.stderr)
    return 0


def _ingest(args: argparse.Namespace) -> int:
    """Run the ingest assets in this process (the same code the Dagster UI runs)."""
    import importlib

    # The CLI runs the pipeline's own assets; it loads them only when asked to.
    run = importlib.import_module("pipeline.run")
    ingest_assets = importlib.import_module("assets.ingest").INGEST_ASSETS
    from warehouse.layout import Layout

    layout = Layout.at(args.home)
    result = run.materialize(ingest_assets, str(layout.home), args.wait)
    if not result.success:
        print(f"stretto: ingest failed: {run.failure_message(result)}", file=sys.stderr)
        return 1
    found = run.output_metadata(result, "log_files")
    done = run.output_metadata(result, "session_tables")
    steps = run.output_metadata(result, "steps")
    print(
        f"stretto: ingested {done['files read']} file(s) ({found['files unchanged']} unchanged): "
        f"{done['lines read']} lines read, {done['lines ingested']} ingested, "
        f"{done['lines quarantined']} quarantined, {done['lines dropped']} dropped; "
        f"{done['rows written: sessions']} sessions, {done['rows written: calls']} calls, "
        f"{steps['rows written']} steps; warehouse {layout.database}"
    )
    if done["lines quarantined"]:
        print(
            'stretto: see them with: stretto sql "SELECT file, line, error FROM quarantine"',
            file=sys.stderr,
        )
    return 0


def _learn(args: argparse.Namespace) -> int:
    """Ingest the sessions folder into a warehouse of its own, then learn the flow."""
    import hashlib
    import importlib
    import os
    from pathlib import Path

    from stretto.flow import load_manifest
    from warehouse.layout import Layout, default_home

    if not args.habit_only:
        print(
            "stretto: the arbiter is not available yet; learn a habit-only flow with "
            "--habit-only (the decider is then reach, or habit)",
            file=sys.stderr,
        )
        return 2
    sessions = Path(args.sessions).expanduser().resolve()
    if not sessions.is_dir():
        print(f"stretto: {sessions}: not a directory of session logs", file=sys.stderr)
        return 1
    if args.manifest:
        load_manifest(args.manifest)  # refuse a bad manifest before any work
    # A warehouse of this folder's own, kept so that learning again is incremental.
    key = hashlib.blake2b(str(sessions).encode(), digest_size=8).hexdigest()
    home = (Path(args.home).expanduser() if args.home else default_home()) / "cache" / "learn" / key
    home.mkdir(parents=True, exist_ok=True)
    logs = home / "logs"
    if logs.is_symlink() and Path(os.readlink(logs)) != sessions:
        logs.unlink()
    if not logs.exists():
        logs.symlink_to(sessions, target_is_directory=True)
    run = importlib.import_module("pipeline.run")
    assets = [
        *importlib.import_module("assets.ingest").INGEST_ASSETS,
        importlib.import_module("assets.learn").flow,
    ]
    out = Path(args.out).expanduser().resolve()
    config = {"domain": args.domain, "out": str(out), "constants": args.constants}
    if args.manifest:
        config["manifest"] = str(Path(args.manifest).expanduser().resolve())
    result = run.materialize(assets, str(Layout.at(home).home), args.wait, {"flow": config})
    if not result.success:
        print(f"stretto: learn failed: {run.failure_message(result)}", file=sys.stderr)
        return 1
    learned = run.output_metadata(result, "flow")
    print(
        f"stretto: learned the {args.domain} flow from {learned['sessions']} sessions "
        f"({learned['tools']} tools) and wrote {out}"
    )
    return 0


def _sql(args: argparse.Namespace) -> int:
    import duckdb

    from stretto.tables import render
    from warehouse import store
    from warehouse.layout import Layout

    try:
        table = store.query(Layout.at(args.home), args.query)
    except store.NoWarehouse as exc:
        print(f"stretto: {exc}", file=sys.stderr)
        return 1
    except duckdb.Error as exc:
        print(f"stretto: query failed: {str(exc).strip()}", file=sys.stderr)
        return 1
    sys.stdout.write(render(table, args.format))
    return 0


def _init(args: argparse.Namespace) -> int:
    import json

    from stretto.hosts import host_config, next_steps, server_name

    if not args.server:
        print(
            "stretto: give the server's command after --, e.g. "
            "stretto init -- npx -y @modelcontextprotocol/server-filesystem ~/notes",
            file=sys.stderr,
        )
        return 2
    if args.flow:
        from stretto.flow import load_flow

        load_flow(args.flow)  # refuse a bad flow before printing a configuration for it
    name = args.name or server_name(args.server)
    home = args.home or "~/.stretto"
    config = host_config(
        args.host, args.server, name=name, home=home, flow=args.flow, decider=args.decider
    )
    print(json.dumps(config, indent=2))
    print(next_steps(args.host, name, home, args.flow), file=sys.stderr)
    return 0


def _flow_show(args: argparse.Namespace) -> int:
    import json

    from stretto.flow import load_flow
    from stretto.review import markdown, summary

    flow = load_flow(args.flow)
    if args.format == "json":
        print(json.dumps(summary(flow, args.threshold), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown(flow, args.threshold))
    return 0


def _flow_diff(args: argparse.Namespace) -> int:
    from stretto.flow import FlowError, load_flow
    from stretto.review import diff, diff_markdown

    try:
        old, new = load_flow(args.old), load_flow(args.new)
    except FlowError as exc:
        print(f"stretto: {exc}", file=sys.stderr)
        return 2
    review, other = diff(old, new)
    sys.stdout.write(diff_markdown(review, other))
    return 1 if review else 0


def _audit(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from stretto.audit import audit, markdown, write_tables
    from stretto.episode import read_episodes
    from stretto.flow import load_flow
    from warehouse.layout import default_home

    flow = load_flow(args.flow)
    episodes = read_episodes(args.sessions)
    if args.decider == "reach" and not flow.get("reach"):
        print("stretto: this flow has no reach counts", file=sys.stderr)
        return 1
    result = audit(flow, episodes, args.decider)
    sys.stdout.write(markdown(result))
    home = Path(args.home).expanduser() if args.home else default_home()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    folder = (
        Path(args.out)
        if args.out
        else (home / "reports" / flow["manifest"]["domain"] / f"audit-{stamp}")
    )
    written = write_tables(result, folder)
    print(f"stretto: audit tables and plot in {folder} ({len(written)} files)", file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stretto.doctor import checks, render
    from warehouse.layout import default_home

    rows = checks(Path(args.home).expanduser() if args.home else default_home())
    sys.stdout.write(render(rows))
    problems = [what for what, ok, _ in rows if not ok]
    if problems:
        print(f"stretto: {len(problems)} problem(s): {', '.join(problems)}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stretto",
        description="Learn, from an MCP agent's recorded sessions, which reads it is about to "
        "make, and review what was learned. Sessions are recorded by stretto-proxy.",
    )
    parser.add_argument("--version", action="version", version=f"stretto {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sessions = commands.add_parser(
        "sessions",
        help="list the session logs in a folder as the reader sees them",
        description="List the session logs in DIR (not *.flow.jsonl or *.confirm.jsonl): "
        "each one's domain, agent model, the agent's calls, the flow's lookups, LLM turns and "
        "user messages. A malformed log is an error naming its file and line.",
    )
    sessions.add_argument("dir", metavar="DIR")
    sessions.set_defaults(run=_sessions)

    home_help = "STRETTO_HOME (default: $STRETTO_HOME, else ~/.stretto)"
    ingest = commands.add_parser(
        "ingest",
        help="ingest new and changed session logs into the warehouse",
        description="Ingest the session logs under HOME/logs/ into Parquet tables under "
        "HOME/warehouse/ (sessions, messages, calls, context, tools, steps, quarantine) with "
        "DuckDB views over them, running the pipeline's Dagster assets in this process. A file "
        "already ingested with the same content is not read again; a changed one replaces its "
        "rows. A malformed line is quarantined with its file, line and error, and the rest of "
        "its file is still ingested.",
    )
    ingest.add_argument("--home", metavar="DIR", help=home_help)
    ingest.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait if another ingest run is writing (default 600; 0 fails at once)",
    )
    ingest.set_defaults(run=_ingest)

    learn = commands.add_parser(
        "learn",
        help="learn a flow from recorded sessions",
        description="Learn a flow from the session logs in DIR: ingest them (into a warehouse "
        "of their own under HOME/cache/learn/, so that learning again is incremental) and run "
        "the pipeline's `flow` asset in this process. Every session counts as successful.",
    )
    learn.add_argument(
        "--sessions", required=True, metavar="DIR", help="a folder of session logs (*.jsonl)"
    )
    learn.add_argument("--domain", required=True, metavar="NAME", help="the flow's domain")
    learn.add_argument("--out", required=True, metavar="FILE", help="where to write the flow")
    learn.add_argument(
        "--habit-only",
        action="store_true",
        help="learn without an arbiter (the only kind this stretto learns)",
    )
    learn.add_argument(
        "--manifest",
        metavar="FILE",
        help='tool kinds from a manifest {"domain", "tools": {name: kind}} '
        "instead of the logs' tool lists",
    )
    learn.add_argument(
        "--constants",
        action="store_true",
        help="also learn arguments the agent always passes the same way",
    )
    learn.add_argument("--home", metavar="DIR", help=home_help)
    learn.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for another ingest of the same folder",
    )
    learn.set_defaults(run=_learn)

    init = commands.add_parser(
        "init",
        help="print the host configuration that wraps an MCP server in stretto-proxy",
        description="Print (JSON, on stdout) the MCP host configuration that runs SERVER "
        "behind stretto-proxy, recording every session (and serving FLOW when given), and on "
        "stderr the steps from there to a served flow.",
        usage="stretto init [--host HOST] [--flow FLOW] [--name NAME] -- SERVER COMMAND...",
    )
    init.add_argument(
        "--host",
        choices=("claude-desktop", "claude-code", "cursor", "vscode"),
        default="claude-desktop",
    )
    init.add_argument("--flow", metavar="FLOW", help="serve this flow")
    init.add_argument(
        "--decider",
        choices=("reach", "habit"),
        help="with --flow: the decider (default: the flow's)",
    )
    init.add_argument("--name", help="the server's name and domain (default: from its command)")
    init.add_argument(
        "--home", metavar="DIR", help="STRETTO_HOME in the configuration (default ~/.stretto)"
    )
    init.add_argument("server", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    init.set_defaults(run=_init)

    show = commands.add_parser(
        "flow-show",
        help="show what a flow may do, for a reviewer",
        description="Markdown for a reviewer: the tools a flow may call and those it never "
        "calls, each site's lookups with what it would do (reach × binding chance against the "
        "threshold), each lookup's argument sources and binding chance, the program, and where "
        "the flow came from. --format json gives the same as data.",
    )
    show.add_argument("flow", metavar="FLOW")
    show.add_argument("--threshold", type=float, default=0.3)
    show.add_argument("--format", choices=("markdown", "json"), default="markdown")
    show.set_defaults(run=_flow_show)

    flow_diff = commands.add_parser(
        "flow-diff",
        help="list what changed between two flows (exit 1: needs review)",
        description="A change list for a pull request. Exit 0 when NEW can do nothing OLD "
        "could not; exit 1 when it can (a new lookup, a new source for an argument, a new "
        "constant, a changed program, a site switched on or a threshold lowered, a new tool it "
        "may call, a site promoted), listed under 'Needs review'; exit 2 on an error. Changed "
        "probabilities and counts are listed but need no review.",
    )
    flow_diff.add_argument("old", metavar="OLD")
    flow_diff.add_argument("new", metavar="NEW")
    flow_diff.set_defaults(run=_flow_diff)

    audit_cmd = commands.add_parser(
        "audit",
        help="score a flow on sessions it never saw",
        description="Run the flow's decider at each decision point of the sessions in DIR: "
        "per site, decisions, agreement (the likeliest option was the agent's next step) and "
        "nats per decision; and the calibration of the served score (probability × binding "
        "chance) against whether the agent made that call before its next write (ECE, Brier, "
        "a reliability plot). Markdown on stdout; the tables as Parquet and the plot as PNG in "
        "--out (default HOME/reports/<domain>/audit-<time>/).",
    )
    audit_cmd.add_argument("--flow", required=True, metavar="FLOW")
    audit_cmd.add_argument("--sessions", required=True, metavar="DIR")
    audit_cmd.add_argument(
        "--decider",
        choices=("habit", "reach"),
        default="habit",
        help="the next-step probabilities scored (default habit)",
    )
    audit_cmd.add_argument("--out", metavar="DIR", help="where to write the tables and plot")
    audit_cmd.add_argument("--home", metavar="DIR", help=home_help)
    audit_cmd.set_defaults(run=_audit)

    doctor = commands.add_parser(
        "doctor",
        help="check the installation",
        description="Check Python and the packages, node and the filesystem server the "
        "walkthrough runs, that STRETTO_HOME is writable, and DAGSTER_HOME with dagster.yaml "
        "and telemetry off. Prints a table; exits 1 on a problem.",
    )
    doctor.add_argument("--home", metavar="DIR", help=home_help)
    doctor.set_defaults(run=_doctor)

    sql = commands.add_parser(
        "sql",
        help="query the warehouse with SQL",
        description="Run one SQL query (DuckDB) against the warehouse's views: sessions, "
        "messages, calls, context, tools, steps, quarantine (docs/formats.md §2).",
    )
    sql.add_argument("query", metavar="QUERY")
    sql.add_argument("--home", metavar="DIR", help=home_help)
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.set_defaults(run=_sql)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "server", None) and args.server[0] == "--":
        args.server = args.server[1:]
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    from stretto.flow import FlowError
    from stretto.sessionlog import LogError

    try:
        return args.run(args)
    except (LogError, FlowError) as exc:  # bad input: the message names file, line, field
        print(f"stretto: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
