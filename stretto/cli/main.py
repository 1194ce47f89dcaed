"""The `stretto` command. Each subcommand imports what it needs when it runs."""

from __future__ import annotations

import argparse
import sys
import warnings

from stretto import __version__


def _sessions(args: argparse.Namespace) -> int:
    """Summarize each session log in a folder: what the reader makes of it."""
    from stretto.logs.episode import Assistant, User, episode_from_log
    from stretto.logs.sessionlog import list_session_logs, read_session_log

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


def _learn_folder(
    sessions,
    domain: str,
    out,
    *,
    home: str | None,
    wait: float,
    manifest: str | None = None,
    constants: bool = False,
) -> dict | None:
    """Ingest a folder of session logs into a warehouse of its own (under HOME/cache/learn/,
    kept so that learning again is incremental), then run the pipeline's `flow` asset to
    learn the `domain` flow into `out`. The asset's metadata, or None (after saying why)."""
    import hashlib
    import importlib
    import os
    from pathlib import Path

    from stretto.home import private_dirs
    from warehouse.layout import Layout, default_home

    sessions = Path(sessions).expanduser().resolve()
    key = hashlib.blake2b(str(sessions).encode(), digest_size=8).hexdigest()
    home = (Path(home).expanduser() if home else default_home()) / "cache" / "learn" / key
    private_dirs(home)
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
    out = str(Path(out).expanduser().resolve())
    config = {"domain": domain, "out": out, "constants": constants}
    if manifest:
        config["manifest"] = str(Path(manifest).expanduser().resolve())
    result = run.materialize(assets, str(Layout.at(home).home), wait, {"flow": config})
    if not result.success:
        print(f"stretto: learn failed: {run.failure_message(result)}", file=sys.stderr)
        return None
    return run.output_metadata(result, "flow")


def _learn(args: argparse.Namespace) -> int:
    """Ingest the sessions folder into a warehouse of its own, then learn the flow."""
    from pathlib import Path

    from stretto.model.flow import load_manifest

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
    out = Path(args.out).expanduser().resolve()
    learned = _learn_folder(
        sessions,
        args.domain,
        out,
        home=args.home,
        wait=args.wait,
        manifest=args.manifest,
        constants=args.constants,
    )
    if learned is None:
        return 1
    print(
        f"stretto: learned the {args.domain} flow from {learned['sessions']} sessions "
        f"({learned['tools']} tools) and wrote {out}"
    )
    return 0


def _tau2_tally(files: list) -> str:
    """`retail: 1 file, 40 episodes, 299 calls; ...` for τ²-bench results files read."""
    tally: dict[str, list[int]] = {}
    for results in files:
        counts = tally.setdefault(results.domain, [0, 0, 0, 0])
        counts[0] += 1
        counts[1] += len(results.simulations)
        counts[2] += results.calls
        counts[3] += results.user_calls
    parts = []
    for domain, (n_files, episodes, calls, user_calls) in sorted(tally.items()):
        part = f"{domain}: {n_files} file(s), {episodes} episodes, {calls} calls"
        if user_calls:
            part += f" ({user_calls} customer-side calls left out)"
        parts.append(part)
    return "; ".join(parts)


def _read_tau2(paths: list[str], tools, domain: str | None) -> list:
    """Convert τ²-bench results files (all of them, before anything is written)."""
    from stretto.logs.tau2 import read_results
    from stretto.progress import Progress

    progress = Progress(len(paths), "reading results", " files")
    files = []
    for path in paths:
        files.append(read_results(path, tools, domain))
        progress.advance()
    progress.close()
    for results in files:
        orphans = sum(s.orphan_results for s in results.simulations)
        if orphans:
            print(
                f"stretto: warning: {results.path}: {orphans} tool result(s) answer no call; "
                "left out",
                file=sys.stderr,
            )
    return files


def _import_tau2(args: argparse.Namespace) -> int:
    """Write each simulation of τ²-bench results files as a session log."""
    from pathlib import Path

    from stretto.logs.tau2 import load_tools, write_logs

    tools = load_tools(args.tools)
    files = _read_tau2(args.results, tools, args.domain)
    out = Path(args.out).expanduser()
    for results in files:
        write_logs(results, out)
    episodes = sum(len(r.simulations) for r in files)
    calls = sum(r.calls for r in files)
    print(
        f"stretto: imported {len(files)} file(s) into {out}: {episodes} episodes, {calls} calls "
        f"({_tau2_tally(files)})"
    )
    return 0


def _compile(args: argparse.Namespace) -> int:
    """Learn a flow from the successful training-split episodes of τ²-bench results files."""
    import dataclasses
    import hashlib
    from pathlib import Path

    from stretto.logs.tau2 import load_tools, read_split, write_logs
    from warehouse.layout import default_home

    split = read_split(args.split)
    tools_path = args.tools
    if tools_path is None:  # τ²-bench's layout: domains/tau2_tools.json, domains/<d>/split...
        folder = Path(args.split).expanduser().resolve().parent
        found = [f / "tau2_tools.json" for f in (folder, folder.parent)]
        tools_path = next((f for f in found if f.is_file()), None)
        if tools_path is None:
            print(
                f"stretto: give the tools' kinds with --tools TOOLS.json (no tau2_tools.json "
                f"beside {args.split} or in its parent folder)",
                file=sys.stderr,
            )
            return 2
    tools = load_tools(tools_path)
    files = _read_tau2(args.results, tools, args.domain)
    train = split["train"]
    chosen = [s for r in files for s in r.simulations if s.task_id in train]
    if not chosen:
        print(
            f"stretto: no episode of the files given is of a training task of {args.split}",
            file=sys.stderr,
        )
        return 1
    # The logs go to a folder named by what is in them, so a different choice of episodes
    # never mixes with the logs of an earlier one (and the same choice learns incrementally).
    digest = hashlib.blake2b(digest_size=8)
    for sim in sorted(chosen, key=lambda s: s.session):
        digest.update(sim.text.encode("utf-8"))
    home = Path(args.home).expanduser() if args.home else default_home()
    sessions = home / "cache" / "compile" / f"{args.domain}-{digest.hexdigest()}"
    for results in files:
        kept = [s for s in results.simulations if s.task_id in train]
        write_logs(dataclasses.replace(results, simulations=kept), sessions)
    out = Path(args.out).expanduser().resolve()
    learned = _learn_folder(sessions, args.domain, out, home=args.home, wait=args.wait)
    if learned is None:
        return 1
    print(
        f"stretto: compiled the {args.domain} flow from {learned['sessions']} successful "
        f"training episodes (of {len(chosen)} training-task episodes in {len(files)} file(s); "
        f"{learned['tools']} tools) and wrote {out}"
    )
    return 0


def _sql(args: argparse.Namespace) -> int:
    import duckdb

    from stretto.cli.tables import render
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

    from stretto.cli.hosts import host_config, next_steps, server_name

    if not args.server:
        print(
            "stretto: give the server's command after --, e.g. "
            "stretto init -- npx -y @modelcontextprotocol/server-filesystem ~/notes",
            file=sys.stderr,
        )
        return 2
    if args.flow:
        from stretto.model.flow import load_flow

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

    from stretto.model.flow import load_flow
    from stretto.offline.review import markdown, summary

    flow = load_flow(args.flow)
    if args.format == "json":
        print(json.dumps(summary(flow, args.threshold), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown(flow, args.threshold))
    return 0


def _flow_diff(args: argparse.Namespace) -> int:
    from stretto.model.flow import FlowError, load_flow
    from stretto.offline.review import diff, diff_markdown

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

    from stretto.logs.episode import read_episodes
    from stretto.model.flow import load_flow
    from stretto.offline.audit import audit, markdown, write_tables
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


def _evaluate(args: argparse.Namespace) -> int:
    import json
    import time
    from pathlib import Path

    from stretto.model.flow import load_flow
    from stretto.offline import evaluate as ev
    from warehouse.layout import default_home

    flow = load_flow(args.flow) if args.flow else None
    try:
        labelled = ev.label_folder(args.sessions, flow["manifest"]["tools"] if flow else None)
        for warning in labelled.warnings:
            print(f"stretto: warning: {warning}", file=sys.stderr)
        targets = ev.targets(labelled, args.decider, args.threshold or [0.3])
        results = ev.evaluate(
            labelled,
            targets,
            min_ess=args.min_ess,
            switch_tau=args.switch_tau,
            bootstrap=args.bootstrap,
            seed=args.seed,
        )
    except ev.EvaluateError as exc:
        print(f"stretto: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results, indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(ev.markdown(results))
    home = Path(args.home).expanduser() if args.home else default_home()
    domain = flow["manifest"]["domain"] if flow else labelled.domain
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    folder = Path(args.out) if args.out else home / "reports" / domain / f"evaluation-{stamp}"
    written = ev.write_tables(labelled, results, folder)
    print(f"stretto: evaluation tables in {folder} ({len(written)} files)", file=sys.stderr)
    return 0


def _replay_episodes(args: argparse.Namespace, part: str = "test") -> list:
    from stretto.offline.replay import NoEpisodes, load_episodes

    try:
        return load_episodes(args.sessions, args.results, args.split, part)
    except NoEpisodes as exc:
        raise SystemExit(f"stretto: {exc}") from exc


def _replay(args: argparse.Namespace) -> int:
    import json
    import time
    from pathlib import Path

    from stretto.model.flow import load_flow
    from stretto.offline.replay import markdown, replay, write_tables
    from stretto.progress import Progress
    from warehouse.layout import default_home

    flow = load_flow(args.flow)
    if args.decider == "reach" and not flow.get("reach"):
        print("stretto: this flow has no reach counts; use --decider habit", file=sys.stderr)
        return 1
    episodes = _replay_episodes(args)
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
    )
    progress.close()
    if args.format == "json":
        print(json.dumps(result.as_json(), indent=1, ensure_ascii=False))
    else:
        sys.stdout.write(markdown(result))
    if args.out or args.home:
        home = Path(args.home).expanduser() if args.home else default_home()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        domain = flow["manifest"]["domain"]
        folder = Path(args.out) if args.out else home / "reports" / domain / f"replay-{stamp}"
        written = write_tables(result, folder)
        print(f"stretto: replay tables in {folder} ({len(written)} files)", file=sys.stderr)
    return 0


def _search(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from stretto.model.flow import load_flow, write_flow
    from stretto.offline.search import Search, markdown, report_json, with_thresholds
    from stretto.progress import Progress

    flow = load_flow(args.flow)
    try:
        beta, delta = (float(x) for x in args.costs.split(","))
    except ValueError:
        print(f"stretto: --costs {args.costs!r}: expected BETA,DELTA, e.g. 7,3", file=sys.stderr)
        return 2
    if beta <= 0 or delta < 0:
        print("stretto: --costs: BETA must be above 0 and DELTA at least 0", file=sys.stderr)
        return 2
    if args.decider == "reach" and not flow.get("reach"):
        print("stretto: this flow has no reach counts; use --decider habit", file=sys.stderr)
        return 1
    episodes = _replay_episodes(args, part="train")
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
        )
    except ValueError as exc:
        print(f"stretto: {exc}", file=sys.stderr)
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
        print(f"stretto: wrote the chosen thresholds into {out}", file=sys.stderr)
    return 0


def _promote(args: argparse.Namespace) -> int:
    from stretto.offline.promote import Bar, promote_flow, promoted_sites

    bar = Bar(args.threshold, args.min_used, args.min_lower, args.min_tasks)
    try:
        done = promote_flow(
            args.flow, args.shadow, bar, decider=args.decider, out=args.out, progress=True
        )
    except OSError as exc:
        print(f"stretto: {exc.filename or args.out or args.flow}: {exc.strerror}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a bad option, flow or log: the message names it
        print(f"stretto: {exc}", file=sys.stderr)
        return 1
    for warning in done.warnings:
        print(f"stretto: warning: {warning}", file=sys.stderr)
    sys.stdout.write(done.report)
    promoted, sites = promoted_sites(done.promotion.record), done.promotion.record["sites"]
    print(
        f"stretto: promoted {len(promoted)} of {len(sites)} sites; wrote {done.out}",
        file=sys.stderr,
    )
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stretto.cli.doctor import checks, render
    from warehouse.layout import default_home

    rows = checks(Path(args.home).expanduser() if args.home else default_home())
    sys.stdout.write(render(rows))
    problems = [what for what, ok, _ in rows if not ok]
    if problems:
        print(f"stretto: {len(problems)} problem(s): {', '.join(problems)}", file=sys.stderr)
        return 1
    return 0


def _episode_options(command: argparse.ArgumentParser, part: str) -> None:
    """The flow and the recorded episodes a replay or a search walks."""
    command.add_argument("--flow", required=True, metavar="FLOW")
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--sessions", metavar="DIR", help="a folder of session logs")
    source.add_argument("--results", nargs="+", metavar="FILE", help="τ²-bench results files")
    command.add_argument(
        "--split", metavar="SPLIT.json", help=f"replay only the split's {part} tasks"
    )


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
        "the pipeline's `flow` asset in this process. Every session counts as successful "
        "but one whose header gives a reward below 1.",
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

    import_tau2 = commands.add_parser(
        "import-tau2",
        help="convert τ²-bench results files to session logs",
        description="Write each simulation of τ²-bench results files as a session log in DIR "
        "(<session>.jsonl, as stretto-proxy would have recorded it): the tools/list answer "
        "from the domain's tool kinds in TOOLS, the customer's and agent's words as context "
        "lines, the agent's calls and their results; the scripted greeting and the customer's "
        "own tool calls are left out. The header carries task_id, trial and reward. Importing "
        "again writes the same files. A file that is not a results file is refused.",
    )
    import_tau2.add_argument("results", nargs="+", metavar="RESULTS.json")
    import_tau2.add_argument(
        "--tools",
        required=True,
        metavar="TOOLS.json",
        help="the domains' tools and their kinds (τ²-bench's tau2_tools.json)",
    )
    import_tau2.add_argument("--out", required=True, metavar="DIR", help="where to write the logs")
    import_tau2.add_argument(
        "--domain", metavar="NAME", help="refuse results files of any other domain"
    )
    import_tau2.set_defaults(run=_import_tau2)

    compile_cmd = commands.add_parser(
        "compile",
        help="learn a flow from τ²-bench results (the training split's successful episodes)",
        description="Learn a habit-only flow from τ²-bench results files, as `stretto learn` "
        "does, from the episodes of the split's training tasks that succeeded (reward ≥ 1). "
        "Their session logs are written under HOME/cache/compile/ and learned from through the "
        "pipeline's assets. Results files of another domain are refused.",
    )
    compile_cmd.add_argument(
        "--results", required=True, nargs="+", metavar="FILE", help="τ²-bench results files"
    )
    compile_cmd.add_argument("--domain", required=True, metavar="NAME", help="the flow's domain")
    compile_cmd.add_argument(
        "--split",
        required=True,
        metavar="SPLIT.json",
        help='the task split ({"train": [...], "test": [...]}); only training tasks are learned',
    )
    compile_cmd.add_argument("--out", required=True, metavar="FLOW", help="where to write the flow")
    compile_cmd.add_argument(
        "--tools",
        metavar="TOOLS.json",
        help="the domains' tool kinds (default: tau2_tools.json beside SPLIT or in its parent)",
    )
    compile_cmd.add_argument("--home", metavar="DIR", help=home_help)
    compile_cmd.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long to wait for another ingest of the same episodes",
    )
    compile_cmd.set_defaults(run=_compile)

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

    evaluate_cmd = commands.add_parser(
        "evaluate",
        help="estimate what other rules would have done, from exploring flow logs",
        description="Read the flow logs (*.flow.jsonl) a proxy wrote with --flow-explore beside "
        "their session logs in DIR; label every option each decision offered from what the "
        "agent did (used: it made that very call itself before its next write; else a "
        "detour; the turn it would have saved); and estimate, per site and in total, what each "
        "target rule (--decider x --threshold) would have done over those decisions: lookups, "
        "used, detours, turns saved. Estimators: the labels of every option, the direct method "
        "(a reward model), IPS, SNIPS, doubly robust, self-normalized DR and Switch-DR, each "
        "with 95% intervals (normal, and bootstrap over sessions) and weight diagnostics. "
        "Weighted estimates with an effective sample size under --min-ess are refused; logs "
        "without propensities are refused. Markdown on stdout (--json: data); the tables as "
        "Parquet in --out (default HOME/reports/<domain>/evaluation-<time>/).",
    )
    evaluate_cmd.add_argument(
        "--sessions", required=True, metavar="DIR", help="session logs and their flow logs"
    )
    evaluate_cmd.add_argument(
        "--flow",
        metavar="FLOW",
        help="the flow served: its manifest says which tools are writes where a session's own "
        "tool listing does not, and names the report's domain",
    )
    evaluate_cmd.add_argument(
        "--decider",
        action="append",
        choices=("reach", "habit"),
        help="a target decider (repeatable; default: the logs' own)",
    )
    evaluate_cmd.add_argument(
        "--threshold",
        action="append",
        type=float,
        metavar="T",
        help="a target threshold (repeatable; default 0.3)",
    )
    evaluate_cmd.add_argument(
        "--min-ess",
        type=float,
        default=10.0,
        metavar="N",
        help="refuse weighted estimates whose effective sample size is under N (10)",
    )
    evaluate_cmd.add_argument(
        "--switch-tau",
        type=float,
        default=20.0,
        metavar="W",
        help="Switch-DR: the reward model replaces the weighted term above weight W (20)",
    )
    evaluate_cmd.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap draws over sessions (1000; 0: none)",
    )
    evaluate_cmd.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (0)")
    evaluate_cmd.add_argument("--json", action="store_true", help="the results as JSON")
    evaluate_cmd.add_argument("--out", metavar="DIR", help="where to write the tables")
    evaluate_cmd.add_argument("--home", metavar="DIR", help=home_help)
    evaluate_cmd.set_defaults(run=_evaluate)

    replay_cmd = commands.add_parser(
        "replay",
        help="replay recorded episodes with a flow: turns saved against detours",
        description='Replay recorded episodes "from the record" (no LLM runs): after each of '
        "the agent's calls the flow decides exactly as the proxy would, its lookups are answered "
        "from the record (the agent's own later call with the same arguments before its next "
        "write, else a stand-in that never counts as used), and a later call is skipped when a "
        "fresh lookup answered it. Per episode and in total: turns, turns saved, calls skipped, "
        "lookups used next and later, detours, the read-only ceiling and the share of it taken; "
        "with --explore, the calibration of p × binding (ECE, Brier, AUC).",
    )
    _episode_options(replay_cmd, "test")
    replay_cmd.add_argument(
        "--decider",
        choices=("reach", "habit"),
        help="reach (use before the next write) or habit (next step); default: as served",
    )
    replay_cmd.add_argument("--threshold", type=float, default=0.3, metavar="T")
    replay_cmd.add_argument(
        "--explore",
        type=float,
        metavar="EPS",
        help="explore at rate EPS as the proxy would (0: never), and score every option for "
        "calibration",
    )
    replay_cmd.add_argument("--per-call", type=int, default=8, metavar="N")
    replay_cmd.add_argument(
        "--per-episode", type=int, default=40, metavar="N", help="lookups per episode (40)"
    )
    replay_cmd.add_argument("--format", choices=("markdown", "json"), default="markdown")
    replay_cmd.add_argument("--out", metavar="DIR", help="also write the tables as Parquet to DIR")
    replay_cmd.add_argument(
        "--home", metavar="DIR", help="write the tables under HOME/reports/<domain>/replay-<time>/"
    )
    replay_cmd.set_defaults(run=_replay)

    search_cmd = commands.add_parser(
        "search",
        help="choose per-site thresholds by replaying recorded episodes",
        description="Choose each site's threshold (0.10 to 0.95 by 0.05, or off) by replaying "
        "recorded episodes with the flow (as `stretto replay` does): the utility "
        "BETA·turns saved − DELTA·detours is maximized one site at a time. Prints the start, "
        "the chosen setting and the Pareto front of turns saved against detours, and writes "
        "the chosen thresholds into the flow's `thresholds` (in place, or to --out). With "
        "--results and --split, the split's training tasks are replayed.",
    )
    _episode_options(search_cmd, "training")
    search_cmd.add_argument(
        "--costs",
        default="7,3",
        metavar="BETA,DELTA",
        help="value of a saved turn and cost of a detour (default 7,3: break-even at 0.3)",
    )
    search_cmd.add_argument(
        "--decider",
        choices=("reach", "habit"),
        help="default: as served (reach if the flow has it)",
    )
    search_cmd.add_argument(
        "--threshold", type=float, default=0.3, metavar="T", help="where sites start (0.3)"
    )
    search_cmd.add_argument(
        "--site", action="append", metavar="SITE", help="search only this site (repeatable)"
    )
    search_cmd.add_argument("--out", metavar="FLOW", help="write the flow here, not in place")
    search_cmd.add_argument("--dry-run", action="store_true", help="report; write nothing")
    search_cmd.add_argument("--json", action="store_true", help="the report as JSON")
    search_cmd.set_defaults(run=_search)

    promote_cmd = commands.add_parser(
        "promote",
        help="promote the sites whose lookups the agent would have used",
        description="Score the flow as served on sessions recorded in shadow mode "
        "(stretto-proxy --flow-shadow) or without a flow: at each of the agent's results the "
        "flow decides as the proxy would (its own promotion removed), and a lookup it would "
        "make counts as used when the agent makes that call itself in a later LLM turn. A site "
        "is promoted when at least --min-used of its lookups were used, the 90% Wilson lower "
        "bound of that share is at least --min-lower, and they came from at least --min-tasks "
        "sessions. Writes the flow with its `promoted` record (in place, or to --out) and "
        "prints the report. A flow with a promotion record acts only at promoted sites; at the "
        "others the proxy logs its decisions as shadow.",
    )
    promote_cmd.add_argument("--flow", required=True, metavar="FLOW")
    promote_cmd.add_argument(
        "--shadow", required=True, metavar="DIR", help="a folder of session logs to score"
    )
    promote_cmd.add_argument(
        "--decider",
        choices=("reach", "habit"),
        help="default: as served (reach if the flow has it)",
    )
    promote_cmd.add_argument(
        "--threshold", type=float, default=0.3, metavar="T", help="the threshold scored (0.3)"
    )
    promote_cmd.add_argument(
        "--min-used", type=float, default=0.7, metavar="SHARE", help="used share (0.7)"
    )
    promote_cmd.add_argument(
        "--min-lower",
        type=float,
        default=0.5,
        metavar="SHARE",
        help="Wilson lower bound of the used share, z = 1.645 (0.5)",
    )
    promote_cmd.add_argument(
        "--min-tasks", type=int, default=3, metavar="N", help="distinct sessions (3)"
    )
    promote_cmd.add_argument("--out", metavar="FLOW", help="write the flow here, not in place")
    promote_cmd.set_defaults(run=_promote)

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
    from stretto.logs.sessionlog import LogError
    from stretto.model.flow import FlowError

    try:
        return args.run(args)
    except (LogError, FlowError) as exc:  # bad input: the message names file, line, field
        print(f"stretto: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
