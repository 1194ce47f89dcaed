"""A flow's life after the first learn: drift (has the agent changed?), stage (relearn beside
the served flow and compare), flow-commit, flow-log, flow-rollback (versioned flows)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stretto.cli.learning_options import learning_options, resolved
from stretto.cli.options import (
    Commands,
    add_decider,
    add_home,
    add_learning_options,
    add_wait,
    check_domain,
    command,
    paths,
    say,
)
from stretto.logs.rewards import read_rewards
from stretto.logs.sessionlog import LogError
from stretto.model.flow import FlowError, load_flow, load_manifest
from stretto.offline.lifecycle import drift as drifting


def register(commands: Commands) -> None:
    _register_drift(commands)
    _register_stage(commands)
    _register_versions(commands)


# --- drift -----------------------------------------------------------------------------------


def _register_drift(commands: Commands) -> None:
    defaults = drifting.Settings()
    drift = command(
        commands,
        "drift",
        _drift,
        summary="has the agent changed its habits since the flow was learned? (exit 1: yes)",
        description="Per session in start order: surprise (nats per decision of the agent's "
        "steps under the flow's decider, as audit scores), disagreement (1 − agreement) and "
        "the share of the agent's steps after a tool the flow never learned; Bayesian online "
        "change-point detection on the three together. The alarm sounds when the chance that "
        "a new run of sessions began within the last --window sessions reaches --threshold; "
        "it then holds until --hold sessions after the change. The report names where the "
        "change began and the sites whose surprise rose most. Markdown on stdout (--json: "
        "data); the report, its data and a plot of the series in --out (default "
        "HOME/reports/<domain>/drift-<time>/). Exit 1 while the alarm sounds "
        "after the last session, 0 when it does not, 2 on an error.",
        examples=[
            "stretto drift --flow notes.flow.json --sessions ~/.stretto/logs/notes",
            "stretto drift --flow shop.flow.json --otel traces.json --json --out drift/",
        ],
    )
    drift.add_argument("--flow", required=True, metavar="FLOW")
    source = drift.add_mutually_exclusive_group(required=True)
    source.add_argument("--sessions", metavar="DIR", help="a folder of session logs")
    source.add_argument(
        "--otel", metavar="FILE", help="an OpenTelemetry trace export, each trace a session"
    )
    source.add_argument("--results", nargs="+", metavar="FILE", help="τ²-bench results files")
    drift.add_argument(
        "--split", metavar="SPLIT.json", help="with --results: only the split's test tasks"
    )
    add_decider(drift, "whose probabilities are scored (default habit)", default="habit")
    drift.add_argument(
        "--hazard",
        type=float,
        default=defaults.hazard,
        metavar="P",
        help="the prior chance of a change after any session (%(default)g)",
    )
    drift.add_argument(
        "--window",
        type=int,
        default=defaults.window,
        metavar="N",
        help="sound when a change began within the last N sessions (%(default)s, at least 3)",
    )
    drift.add_argument(
        "--threshold",
        type=float,
        default=defaults.threshold,
        metavar="P",
        help="sound when that chance reaches P (%(default)g)",
    )
    drift.add_argument(
        "--hold",
        type=int,
        default=defaults.hold,
        metavar="N",
        help="keep sounding until N sessions after the change (%(default)s; 0: no longer than "
        "the window)",
    )
    drift.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    drift.add_argument("--out", metavar="DIR", help="where to write the report and the plot")
    add_home(drift)


def _drift(args: argparse.Namespace) -> int:
    """Exit 1 while sounding, 0 when quiet, 2 on any error (as flow-diff)."""
    try:
        flow = load_flow(args.flow)
        if args.decider == "reach" and not flow.get("reach"):
            raise ValueError(f"{args.flow}: this flow has no reach counts; use --decider habit")
        episodes = _drift_episodes(args, flow)
        settings = drifting.Settings(args.hazard, args.window, args.threshold, args.hold)
        result = drifting.drift(flow, episodes, args.decider, settings)
        folder = _report_folder(args, flow["manifest"]["domain"], "drift")
        drifting.write_report(result, folder)
    except (LogError, FlowError, ValueError, OSError) as exc:
        say(_message(exc))
        return 2
    if args.json:
        print(json.dumps(result.as_json(), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(drifting.markdown(result))
    if result.sounding:
        alarm = result.alarms[-1]
        say(
            f"the alarm is sounding: the agent's habits changed around session "
            f"{alarm['change_session']}, {len(result.sessions) - alarm['change']} sessions ago"
        )
    say(f"drift report, data and plot in {folder}")
    return 1 if result.sounding else 0


def _drift_episodes(args: argparse.Namespace, flow: dict) -> list:
    """The sessions to watch, all of the flow's domain (ValueError otherwise)."""
    domain = flow["manifest"]["domain"]
    if args.split and not args.results:
        raise ValueError("--split goes with --results")
    if args.otel:
        from stretto.logs.otel import episodes_from_otel  # --otel only: the OTLP reader

        episodes = episodes_from_otel(args.otel, flow["manifest"], domain)
    elif args.results:
        from stretto.offline.reports.replay import load_episodes  # --results only: replay's ~100 ms

        episodes = load_episodes(None, args.results, args.split, "test")
        check_domain(flow, args.flow, episodes=episodes)
    else:
        from stretto.logs.merged import read_episodes  # session logs only (~30 ms)

        check_domain(flow, args.flow, sessions=args.sessions)
        episodes = read_episodes(args.sessions)
    if not episodes:
        raise ValueError("no sessions to watch")
    return episodes


# --- stage -----------------------------------------------------------------------------------


def _register_stage(commands: Commands) -> None:
    stage = command(
        commands,
        "stage",
        _stage,
        summary="relearn a flow beside the one served, and show what committing would change",
        description="Learn FLOW's staged version (<name>.staged.flow.json beside it) from "
        "every session in DIR, as `learn --habit-only` does, keeping the served flow's "
        "promotion and thresholds and relearning its surprise gate. Each session new since "
        "the last run (of the last --window) is first scored out of sample by the served "
        "flow and by the staged flow as it was before that session: the lookups each would "
        "make, how many the agent used later (with a 90% interval) and the detours. Prints "
        "the report per site and in total, and the flow-diff of committing. Committing stays "
        "a person's decision (flow-commit), unless --auto-commit-if-better: then the staged "
        "flow is committed when used − detours per session improved with its 90% interval "
        "above zero.",
        examples=[
            "stretto stage --flow ~/.stretto/flows/notes.flow.json --sessions "
            "~/.stretto/logs/notes",
            "stretto stage --flow shop.flow.json --sessions logs/shop --half-life 200 "
            "--window 100 --auto-commit-if-better",
        ],
    )
    stage.add_argument("--flow", required=True, metavar="FLOW", help="the flow served")
    stage.add_argument("--sessions", required=True, metavar="DIR", help="a folder of session logs")
    stage.add_argument(
        "--window",
        type=int,
        default=50,
        metavar="N",
        help="score and report the last N sessions (%(default)s)",
    )
    add_learning_options(stage)
    stage.add_argument(
        "--manifest",
        metavar="FILE",
        help="tool kinds from a manifest instead of the logs' tool lists (as learn takes it)",
    )
    stage.add_argument(
        "--auto-commit-if-better",
        action="store_true",
        help="commit the staged flow when used − detours per session improved, its 90%% "
        "interval above zero",
    )
    stage.add_argument("--json", action="store_true", help="the report as JSON")
    add_home(stage)
    add_wait(stage, "another ingest of the same folder")


def _stage(args: argparse.Namespace) -> int:
    # entry point: only `stretto stage` runs the pipeline (Dagster, DuckDB, polars)
    from assets.ingest import INGEST_ASSETS
    from pipeline.learnfolder import cache_layout
    from pipeline.run import failure_message, materialize
    from stretto.offline.lifecycle import stage as staging
    from warehouse.counts.learn import LearnError, learner, warehouse_episodes

    options = learning_options(args)
    if options is None:
        return 2
    if args.window < 1:
        say(f"--window wants at least 1 session, got {args.window}")
        return 2
    flow_path = resolved(args.flow)
    committed = load_flow(flow_path)
    manifest = load_manifest(args.manifest) if args.manifest else None
    sessions = resolved(args.sessions)
    if not sessions.is_dir():
        say(f"{sessions}: not a directory of session logs")
        return 1
    check_domain(committed, args.flow, sessions=sessions, below=True)  # as ingest reads them
    layout = cache_layout(args.home, sessions)
    ingested = materialize(INGEST_ASSETS, str(layout.home), args.wait, warehouse=layout.url)
    if not ingested.success:
        say(f"ingest failed: {failure_message(ingested)}")
        return 1
    rewards = read_rewards(args.rewards) if args.rewards else None
    learn = learner(
        layout,
        committed["manifest"]["domain"],
        manifest=manifest,
        rewards=rewards,
        half_life=args.half_life,
    )
    try:
        result = staging.stage(
            flow_path,
            warehouse_episodes(layout, rewards=rewards),
            learn,
            window=args.window,
            settings={k: v for k, v in options.items() if k in ("half_life", "rewards")},
        )
    except (ValueError, LearnError) as exc:
        say(_message(exc))
        return 1
    if args.json:
        print(json.dumps(result.as_json(), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(staging.markdown(result))
    totals = result.totals()
    say(
        f"staged {result.staged_path} from {totals['sessions']} scored sessions "
        f"({result.scored_now} new); {len(result.review)} change(s) need review"
    )
    if args.auto_commit_if_better:
        entry = staging.commit_if_better(flow_path, result)
        if entry is None:
            say("not committed: the staged flow is not shown better (flow-commit to commit it)")
        else:
            say(f"committed the staged flow as version {entry['version']}: {entry['note']}")
    return 0


# --- versions --------------------------------------------------------------------------------


def _register_versions(commands: Commands) -> None:
    commit = command(
        commands,
        "flow-commit",
        _flow_commit,
        summary="serve the staged flow (or the flow as it is) as a new version",
        description="Commit FLOW's staged version (<name>.staged.flow.json, written by "
        "`stretto stage`), or without one the flow file as it is now, as the next version "
        "in <name>.history/, with the time, the note and what changed, and serve it: the "
        "flow file is replaced whole, so a proxy picks it up at its next session, never in "
        "the middle of one. A flow served before its first commit is kept first as version "
        "1. Prints the change list (flow-diff) of the commit.",
        examples=[
            "stretto flow-commit --flow ~/.stretto/flows/notes.flow.json --note "
            '"learned again from this week\'s sessions"',
        ],
    )
    commit.add_argument("--flow", required=True, metavar="FLOW", help="the flow served")
    commit.add_argument("--note", required=True, metavar="TEXT", help="why this version")

    log = command(
        commands,
        "flow-log",
        _flow_log,
        summary="list a flow's committed versions",
        description="Every version of FLOW ever committed or rolled back to, oldest first: "
        "its number, when, the note, how many of its changes needed review, and its content "
        "hash. --json gives the entries as data, each with its change lists.",
        examples=["stretto flow-log --flow ~/.stretto/flows/notes.flow.json"],
    )
    log.add_argument("--flow", required=True, metavar="FLOW")
    log.add_argument("--json", action="store_true", help="the entries as JSON")

    rollback = command(
        commands,
        "flow-rollback",
        _flow_rollback,
        summary="serve an earlier committed version of a flow again",
        description="Restore version N of FLOW (default: the commit before the one served) "
        "byte for byte, replacing the flow file whole, and log the rollback as a new entry. "
        "A proxy picks it up at its next session. Prints the change list of the rollback.",
        examples=[
            "stretto flow-rollback --flow ~/.stretto/flows/notes.flow.json",
            "stretto flow-rollback --flow notes.flow.json --to 3",
        ],
    )
    rollback.add_argument("--flow", required=True, metavar="FLOW")
    rollback.add_argument("--to", type=int, metavar="N", help="the version to serve again")


def _flow_commit(args: argparse.Namespace) -> int:
    # entry point: the versioned flows and their review (~40 ms), for flow-commit only
    from stretto.offline.lifecycle import versions
    from stretto.offline.lifecycle.flowdiff import diff_markdown

    try:
        entry = versions.commit(args.flow, args.note)
    except (versions.VersionError, OSError) as exc:
        say(_message(exc))
        return 1
    sys.stdout.write(diff_markdown(entry["review"], entry["other"]))
    say(
        f"committed version {entry['version']} of {args.flow} ({entry['sha256'][:12]}); "
        f"{len(entry['review'])} change(s) needed review"
    )
    return 0


def _flow_log(args: argparse.Namespace) -> int:
    from stretto.offline.lifecycle import (
        versions,  # entry point: the versioned flows, for flow-log only
    )

    try:
        if args.json:
            print(json.dumps(versions.log(args.flow), indent=1, ensure_ascii=False))
        else:
            sys.stdout.write(versions.log_markdown(args.flow))
        now = versions.served(args.flow)
    except versions.VersionError as exc:
        say(_message(exc))
        return 1
    if not now.startswith(("version ", "no committed")):
        say(f"warning: served now: {now}")
    return 0


def _flow_rollback(args: argparse.Namespace) -> int:
    # entry point: the versioned flows and their review (~40 ms), for flow-rollback only
    from stretto.offline.lifecycle import versions
    from stretto.offline.lifecycle.flowdiff import diff_markdown

    try:
        entry = versions.rollback(args.flow, args.to)
    except (versions.VersionError, OSError) as exc:
        say(_message(exc))
        return 1
    sys.stdout.write(diff_markdown(entry["review"], entry["other"]))
    say(f"serving version {entry['to']} of {args.flow} again (log entry {entry['version']})")
    return 0


# --- shared ----------------------------------------------------------------------------------


def _message(exc: BaseException) -> str:
    """One line for an error: an OSError names its file."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


def _report_folder(args: argparse.Namespace, domain: str, kind: str) -> Path:
    """--out if given, else a new folder under HOME/reports/<domain>/."""
    return Path(args.out) if args.out else paths(args).report_folder(domain, kind)
