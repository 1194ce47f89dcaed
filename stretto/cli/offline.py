"""The commands that judge a flow on recorded sessions, no LLM running: audit, evaluate,
replay, search, promote (stretto.offline)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stretto.cli.options import (
    Commands,
    add_costs,
    add_decider,
    add_home,
    add_oracle,
    add_threshold,
    check_domain,
    command,
    costs_of,
    offline_oracle,
    oracle_problem,
    paths,
    say,
)
from stretto.model.decide import decider_problem, served_threshold
from stretto.model.defaults import PER_CALL, PER_SESSION, THRESHOLD
from stretto.model.flow import load_flow as load_flow_file
from stretto.model.flow import write_flow
from stretto.progress import Progress

AS_SERVED = "default: as served (the flow's arbiter, else reach if the flow has it, else habit)"
REPLAYED = (
    "who answers the arbiter decider's questions (default replay: the cache only; a "
    "decision it cannot answer is left out and counted)"
)


def register(commands: Commands) -> None:
    _register_audit(commands)
    _register_evaluate(commands)
    _register_replay(commands)
    _register_search(commands)
    _register_promote(commands)


def _episode_options(parser: argparse.ArgumentParser, part: str) -> None:
    """The flow and the recorded episodes a replay or a search walks."""
    parser.add_argument("--flow", required=True, metavar="FLOW")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sessions", metavar="DIR", help="a folder of session logs")
    source.add_argument("--results", nargs="+", metavar="FILE", help="τ²-bench results files")
    parser.add_argument(
        "--split", metavar="SPLIT.json", help=f"replay only the split's {part} tasks"
    )


def _register_audit(commands: Commands) -> None:
    audit = command(
        commands,
        "audit",
        _audit,
        summary="score a flow on sessions it never saw",
        description="Run the flow's decider at each decision point of the sessions in DIR: "
        "per site, decisions, agreement (the likeliest option was the agent's next step) and "
        "nats per decision; and the calibration of the served score (probability × binding "
        "chance) against whether the agent made that call before its next write (ECE, Brier, "
        "a reliability plot). Markdown on stdout; the tables as Parquet and the plot as PNG in "
        "--out (default HOME/reports/<domain>/audit-<time>/).",
        examples=[
            "stretto audit --flow notes.flow.json --sessions held-out/",
            "stretto audit --flow notes.flow.json --sessions held-out/ --decider reach "
            "--out audit/",
        ],
    )
    audit.add_argument("--flow", required=True, metavar="FLOW")
    audit.add_argument("--sessions", required=True, metavar="DIR")
    add_decider(
        audit,
        "the next-step probabilities scored (default: arbiter if the flow has one, else habit)",
    )
    audit.add_argument("--out", metavar="DIR", help="where to write the tables and plot")
    add_oracle(audit, REPLAYED)
    add_home(audit)


def _decider_problem(args: argparse.Namespace, flow: dict, decider: str | None) -> str | None:
    """Why the command cannot decide with `decider`, or with the oracle it was given."""
    problem = decider_problem(flow, decider) if decider else None
    return problem or (oracle_problem(args.oracle) if args.oracle else None)


def _audit(args: argparse.Namespace) -> int:
    # entry point: the audit, the merged logs and the arbiter's runners, for audit only
    from stretto.logs.merged import read_episodes
    from stretto.offline.reports.audit import audit, markdown, write_tables
    from stretto.oracle.arbiter import load_flow

    flow = load_flow(args.flow)
    check_domain(flow, args.flow, sessions=args.sessions)
    episodes = read_episodes(args.sessions)
    decider = args.decider or ("arbiter" if flow.get("arbiter") else "habit")
    problem = _decider_problem(args, flow, decider)
    if problem:
        say(problem)
        return 1
    result = audit(flow, episodes, decider, offline_oracle(args))
    if not result.decisions:  # an agreement of 0.0% would be a score of nothing
        unanswered = f", {result.unanswered} left unanswered" if result.unanswered else ""
        say(
            f"nothing to score: the {len(episodes)} session(s) in {args.sessions} hold no "
            f"decision the flow makes (a result of the agent's call that something "
            f"followed{unanswered}); nothing written"
        )
        return 1
    sys.stdout.write(markdown(result))
    folder = _report_folder(args, flow["manifest"]["domain"], "audit")
    written = write_tables(result, folder)
    if result.unanswered:
        say(f"{result.unanswered} decisions left out: no answer from the oracle")
    say(f"audit tables and plot in {folder} ({len(written)} files)")
    return 0


def _register_evaluate(commands: Commands) -> None:
    evaluate = command(
        commands,
        "evaluate",
        _evaluate,
        summary="estimate what other rules would have done, from exploring flow logs",
        description="Read the flow logs (*.flow.jsonl) a proxy wrote with --flow-explore "
        "beside their session logs in DIR; label every option each decision offered from what "
        "the agent did (used: it made that very call itself before its next write; else a "
        "detour; the turn it would have saved); and estimate, per site and in total, what each "
        "target rule (--decider x --threshold) would have done over those decisions: lookups, "
        "used, detours, turns saved. Estimators: the labels of every option, the direct method "
        "(a reward model), IPS, SNIPS, doubly robust, self-normalized DR and Switch-DR, each "
        "with 95% intervals (normal, and bootstrap over sessions) and weight diagnostics. "
        "Weighted estimates with an effective sample size under --min-ess are refused; logs "
        "without propensities are refused. Markdown on stdout (--json: data); the tables as "
        "Parquet in --out (default HOME/reports/<domain>/evaluation-<time>/).",
        examples=[
            "stretto evaluate --sessions ~/.stretto/logs/notes --flow notes.flow.json",
            "stretto evaluate --sessions explored/ --decider habit --threshold 0.2 "
            "--threshold 0.4 --json",
        ],
    )
    evaluate.add_argument(
        "--sessions", required=True, metavar="DIR", help="session logs and their flow logs"
    )
    evaluate.add_argument(
        "--flow",
        metavar="FLOW",
        help="the flow served: its manifest says which tools are writes where a session's own "
        "tool listing does not, and names the report's domain",
    )
    add_decider(
        evaluate,
        "a target decider (repeatable; default: the logs' own): habit, or the decider the logs "
        "were made with (reach, or arbiter: its logged probabilities)",
        repeatable=True,
    )
    add_threshold(evaluate, "a target threshold", repeatable=True)
    evaluate.add_argument(
        "--min-ess",
        type=float,
        default=10.0,
        metavar="N",
        help="refuse weighted estimates whose effective sample size is under N (%(default)g)",
    )
    evaluate.add_argument(
        "--switch-tau",
        type=float,
        default=20.0,
        metavar="W",
        help="Switch-DR: the reward model replaces the weighted term above weight W (%(default)g)",
    )
    evaluate.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap draws over sessions (%(default)s; 0: none)",
    )
    evaluate.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (0)")
    evaluate.add_argument("--json", action="store_true", help="the results as JSON")
    evaluate.add_argument("--out", metavar="DIR", help="where to write the tables")
    add_home(evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    # entry point: the estimators and the arbiter's runners, for evaluate only
    from stretto.offline import evaluate as ev
    from stretto.oracle.arbiter import load_flow

    flow = load_flow(args.flow) if args.flow else None
    if flow:
        check_domain(flow, args.flow, sessions=args.sessions)
    try:
        labelled = ev.label_folder(args.sessions, flow["manifest"]["tools"] if flow else None)
        for warning in labelled.warnings:
            say(f"warning: {warning}")
        own = served_threshold(flow) if flow else THRESHOLD
        targets = ev.targets(labelled, args.decider, args.threshold or [own])
        results = ev.evaluate(
            labelled,
            targets,
            min_ess=args.min_ess,
            switch_tau=args.switch_tau,
            bootstrap=args.bootstrap,
            seed=args.seed,
        )
    except ev.EvaluateError as exc:
        say(str(exc))
        return 1
    if args.json:
        print(json.dumps(results, indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(ev.markdown(results))
    domain = flow["manifest"]["domain"] if flow else labelled.domain
    folder = _report_folder(args, domain, "evaluation")
    written = ev.write_tables(labelled, results, folder)
    say(f"evaluation tables in {folder} ({len(written)} files)")
    return 0


def _register_replay(commands: Commands) -> None:
    replay = command(
        commands,
        "replay",
        _replay,
        summary="replay recorded episodes with a flow: turns saved against detours",
        description='Replay recorded episodes "from the record" (no LLM runs): after each of '
        "the agent's calls the flow decides exactly as the proxy would, its lookups are "
        "answered from the record (the agent's own later call with the same arguments before "
        "its next write, else a stand-in that never counts as used), and a later call is "
        "skipped when a fresh lookup answered it. Per episode and in total: turns, turns "
        "saved, calls skipped, lookups used next and later, detours, the read-only ceiling and "
        "the share of it taken; with --explore, the calibration of p × binding (ECE, Brier, "
        "AUC).",
        examples=[
            "stretto replay --flow notes.flow.json --sessions held-out/",
            "stretto replay --flow retail.flow.json --results runs.json --split split_tasks.json "
            "--explore 0",
        ],
    )
    _episode_options(replay, "test")
    add_decider(
        replay,
        "arbiter (asks the System-One model), reach (use before the next write) or habit (next "
        "step); " + AS_SERVED,
    )
    add_oracle(replay, REPLAYED)
    add_threshold(replay, "make a lookup when its score reaches T")
    replay.add_argument(
        "--explore",
        type=float,
        metavar="EPS",
        help="explore at rate EPS as the proxy would (0: never), and score every option for "
        "calibration",
    )
    replay.add_argument(
        "--per-call",
        type=int,
        default=PER_CALL,
        metavar="N",
        help="lookups after one call (%(default)s)",
    )
    replay.add_argument(
        "--per-episode",
        type=int,
        default=PER_SESSION,
        metavar="N",
        help="lookups per episode (%(default)s)",
    )
    replay.add_argument("--format", choices=("markdown", "json"), default="markdown")
    replay.add_argument("--out", metavar="DIR", help="also write the tables as Parquet to DIR")
    add_home(replay, "write the tables under HOME/reports/<domain>/replay-<time>/")


def _replay_episodes(args: argparse.Namespace, flow: dict, part: str) -> list:
    """The episodes to walk, all of the flow's domain (as `compile` refuses results files of
    another domain): a flow's counts say nothing about another domain's tools."""
    from stretto.offline.reports.replay import NoEpisodes, load_episodes  # replay and search only

    try:
        episodes = load_episodes(args.sessions, args.results, args.split, part)
    except NoEpisodes as exc:
        raise SystemExit(f"stretto: {exc}") from exc
    if args.results:
        check_domain(flow, args.flow, episodes=episodes)
    else:  # a log without a domain in its header may be of any
        check_domain(flow, args.flow, sessions=args.sessions)
    return episodes


def _replay(args: argparse.Namespace) -> int:
    # entry point: the walk and the arbiter's runners (~150 ms), for replay only
    from stretto.offline.reports.replay import markdown, replay, write_tables
    from stretto.oracle.arbiter import load_flow

    flow = load_flow(args.flow)
    problem = _decider_problem(args, flow, args.decider)
    if problem:
        say(f"{problem}; use --decider habit" if "reach" in problem else problem)
        return 1
    episodes = _replay_episodes(args, flow, "test")
    progress = Progress(len(episodes), "replay", " episodes")
    result = replay(
        flow,
        episodes,
        decider=args.decider,
        threshold=args.threshold,
        explore=args.explore,
        per_call=args.per_call,
        per_episode=args.per_episode,
        progress=progress,
        oracle=offline_oracle(args),
    )
    progress.close()
    if args.format == "json":
        print(json.dumps(result.as_json(), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown(result))
    if args.out or args.home:
        folder = _report_folder(args, flow["manifest"]["domain"], "replay")
        written = write_tables(result, folder)
        say(f"replay tables in {folder} ({len(written)} files)")
    return 0


def _register_search(commands: Commands) -> None:
    search = command(
        commands,
        "search",
        _search,
        summary="choose per-site thresholds by replaying recorded episodes",
        description="Choose each site's threshold (0.10 to 0.95 by 0.05, or off) by replaying "
        "recorded episodes with the flow (as `stretto replay` does): the utility "
        "BETA·turns saved − DELTA·detours is maximized one site at a time. Prints the start, "
        "the chosen setting and the Pareto front of turns saved against detours, and writes "
        "the chosen thresholds into the flow's `thresholds` (in place, or to --out). With "
        "--results and --split, the split's training tasks are replayed.",
        examples=[
            "stretto search --flow notes.flow.json --sessions ~/.stretto/logs/notes --dry-run",
            "stretto search --flow retail.flow.json --results runs.json --split split_tasks.json "
            "--costs 5824,2467",
        ],
    )
    _episode_options(search, "training")
    add_costs(search, "value of a saved turn and cost of a detour")
    add_decider(search, AS_SERVED)
    add_oracle(search, REPLAYED)
    add_threshold(search, "where sites start")
    search.add_argument(
        "--site", action="append", metavar="SITE", help="search only this site (repeatable)"
    )
    search.add_argument("--out", metavar="FLOW", help="write the flow here, not in place")
    search.add_argument("--dry-run", action="store_true", help="report; write nothing")
    search.add_argument("--json", action="store_true", help="the report as JSON")


def _search(args: argparse.Namespace) -> int:
    # entry point: the search and the arbiter's runners (~150 ms), for search only
    from stretto.offline.reports.search import Search, markdown, report_json, with_thresholds
    from stretto.oracle.arbiter import load_flow

    flow = load_flow(args.flow)
    try:
        beta, delta = costs_of(args)
    except ValueError as exc:
        say(str(exc))
        return 2
    problem = _decider_problem(args, flow, args.decider)
    if problem:
        say(f"{problem}; use --decider habit" if "reach" in problem else problem)
        return 1
    episodes = _replay_episodes(args, flow, "train")
    progress = Progress(0, "search", " settings scored")
    try:
        search = Search(
            flow,
            episodes,
            decider=args.decider,
            threshold=args.threshold,
            sites=args.site,
            costs=(beta, delta),
            progress=progress,
            oracle=offline_oracle(args),
        )
    except ValueError as exc:
        progress.close()
        say(str(exc))
        return 1
    chosen = search.run()
    progress.close()
    if args.json:
        print(json.dumps(report_json(search, chosen), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown(search, chosen))
    if not args.dry_run:
        out = Path(args.out or args.flow)
        write_flow(with_thresholds(flow, chosen.setting), out)
        say(f"wrote the chosen thresholds into {out}")
    return 0


def _register_promote(commands: Commands) -> None:
    promote = command(
        commands,
        "promote",
        _promote,
        summary="promote the sites whose lookups the agent would have used",
        description="Score the flow as served on sessions recorded in shadow mode "
        "(stretto-proxy --flow-shadow) or without a flow: at each of the agent's results the "
        "flow decides as the proxy would (its own promotion removed), and a lookup it would "
        "make counts as used when the agent makes that call itself in a later LLM turn. A site "
        "is promoted when at least --min-used of its lookups were used, the 90% Wilson lower "
        "bound of that share is at least --min-lower, and they came from at least --min-tasks "
        "sessions. Writes the flow with its `promoted` record (in place, or to --out) and "
        "prints the report. A flow with a promotion record acts only at promoted sites; at the "
        "others the proxy logs its decisions as shadow.",
        examples=[
            "stretto promote --flow notes.flow.json --shadow ~/.stretto/logs/notes "
            "--out promoted.flow.json",
            "stretto promote --flow notes.flow.json --shadow shadow/ --min-used 0.8 --min-tasks 5",
        ],
    )
    promote.add_argument("--flow", required=True, metavar="FLOW")
    promote.add_argument(
        "--shadow", required=True, metavar="DIR", help="a folder of session logs to score"
    )
    add_decider(promote, AS_SERVED)
    add_oracle(
        promote,
        "who answers the arbiter decider's questions (default replay: the cache only; pass "
        "the proxy's --oracle-cache for shadow sessions)",
    )
    add_threshold(promote, "the threshold scored")
    promote.add_argument(
        "--min-used", type=float, default=0.7, metavar="SHARE", help="used share (%(default)s)"
    )
    promote.add_argument(
        "--min-lower",
        type=float,
        default=0.5,
        metavar="SHARE",
        help="Wilson lower bound of the used share, z = 1.645 (%(default)s)",
    )
    promote.add_argument(
        "--min-tasks", type=int, default=3, metavar="N", help="distinct sessions (%(default)s)"
    )
    promote.add_argument("--out", metavar="FLOW", help="write the flow here, not in place")


def _promote(args: argparse.Namespace) -> int:
    # entry point: promotion and its oracle (~120 ms), for promote only
    from stretto.offline.lifecycle.promote import Bar, promote_flow, promoted_sites

    bar = Bar(args.threshold, args.min_used, args.min_lower, args.min_tasks)  # None: the flow's
    problem = oracle_problem(args.oracle)
    if problem:
        say(problem)
        return 1
    check_domain(load_flow_file(args.flow), args.flow, sessions=args.shadow)
    try:
        done = promote_flow(
            args.flow,
            args.shadow,
            bar,
            decider=args.decider,
            out=args.out,
            progress=True,
            oracle=offline_oracle(args),
        )
    except OSError as exc:
        say(f"{exc.filename or args.out or args.flow}: {exc.strerror}")
        return 1
    except ValueError as exc:  # a bad option, flow or log: the message names it
        say(str(exc))
        return 1
    for warning in done.warnings:
        say(f"warning: {warning}")
    sys.stdout.write(done.report)
    promoted, sites = promoted_sites(done.promotion.record), done.promotion.record["sites"]
    scored = done.promotion.scored
    unanswered = (
        f" ({scored.unanswered} decisions left out, unanswered)" if scored.unanswered else ""
    )
    say(
        f"scored {scored.sessions} sessions{unanswered}; promoted {len(promoted)} of "
        f"{len(sites)} sites; wrote {done.out}"
    )
    return 0


def _report_folder(args: argparse.Namespace, domain: str, kind: str) -> Path:
    """--out if given, else a new folder under HOME/reports/<domain>/."""
    return Path(args.out) if args.out else paths(args).report_folder(domain, kind)
