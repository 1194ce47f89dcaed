"""The commands that learn flows: learn, import-tau2, compile. Learning runs the pipeline's
own assets in this process, so the CLI and the Dagster UI compute the same flows."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from stretto.cli.calibrating import CALIBRATE_HELP, calibrate, said
from stretto.cli.learning_options import (
    MKDIR_HELP,
    domain_matches,
    learn_folder,
    learn_to_finish,
    learning_options,
    otel_logs,
    out_problem,
    resolved,
)
from stretto.cli.options import (
    Commands,
    add_costs,
    add_home,
    add_learning_options,
    add_oracle,
    add_wait,
    command,
    costs_of,
    oracle_cache,
    oracle_problem,
    paths,
    say,
)
from stretto.home import Paths, private_dirs
from stretto.model.decide import serving_part, theta_text
from stretto.model.defaults import SURPRISE_WINDOW
from stretto.model.flow import load_flow, load_manifest
from stretto.oracle.errors import OracleError
from stretto.progress import Progress


def register(commands: Commands) -> None:
    learn = command(
        commands,
        "learn",
        _learn,
        summary="learn a flow from recorded sessions (or an OpenTelemetry export)",
        description="Learn a flow from the session logs in DIR (or the traces of an "
        "OpenTelemetry export, each trace a session): ingest them (into a warehouse of their "
        "own under HOME/cache/learn/, so that learning again is incremental) and run the "
        "pipeline's `flow` asset in this process. Every session counts as successful but one "
        "whose reward (from --rewards, else its header) is below 1. --half-life makes older "
        "sessions count less in the habit; --surprise learns a surprise gate. With --oracle "
        "URI, 30% of the tasks (a session is its own task unless its header names one) are "
        "held out: the habit is learned from the others, and the System-One model the URI "
        "names is asked at every decision of the held-out sessions to fit the flow's arbiter "
        "(docs/oracle.md). --habit-only asks nothing and learns from every session; "
        "--arbiter-from takes the arbiter of another flow or an arbiter file.",
        examples=[
            "stretto learn --sessions logs/ --domain shop --oracle ollama://qwen3:8b "
            "--out shop.flow.json --half-life 200 --rewards rewards.json --surprise 0.95",
            "stretto learn --otel traces.json --manifest shop.manifest.json --domain shop "
            "--habit-only --out shop.flow.json",
        ],
    )
    source = learn.add_mutually_exclusive_group(required=True)
    source.add_argument("--sessions", metavar="DIR", help="a folder of session logs (*.jsonl)")
    source.add_argument(
        "--otel",
        metavar="FILE",
        help="an OpenTelemetry trace export (OTLP/JSON or protobuf) of GenAI spans, each "
        "trace a session (needs --manifest)",
    )
    learn.add_argument("--domain", required=True, metavar="NAME", help="the flow's domain")
    learn.add_argument(
        "--habit-only",
        action="store_true",
        help="ask no model: every session trains the habit; no arbiter",
    )
    learn.add_argument("--out", required=True, metavar="FILE", help="where to write the flow")
    learn.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
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
    learn.add_argument("--calibrate", action="store_true", help=CALIBRATE_HELP)
    add_costs(learn, SERVE_AT_HELP)
    add_learning_options(learn)
    learn.add_argument(
        "--surprise",
        type=float,
        metavar="Q",
        help="learn a surprise gate: its threshold the Q-quantile (0 < Q ≤ 1) of ordinary "
        "sessions' peak surprise, by 5-fold cross-fitting (default: no gate)",
    )
    learn.add_argument(
        "--surprise-window",
        type=int,
        default=SURPRISE_WINDOW,
        metavar="N",
        help="the gate's window: the steps whose mean surprise it watches (%(default)s)",
    )
    learn.add_argument(
        "--refit-habit",
        action="store_true",
        help="after fitting the arbiter, learn the habit again from every session",
    )
    learn.add_argument(
        "--arbiter-from",
        metavar="FILE",
        help="take the arbiter of this flow or arbiter file; asks nothing, every session trains",
    )
    add_oracle(
        learn,
        "who answers the held-out decisions' questions: ollama://MODEL, claude://MODEL, "
        "openai://MODEL, jev://MODEL, simulate://random|habit (required unless --habit-only "
        "or --arbiter-from)",
        learning=True,
    )
    add_home(learn)
    add_wait(learn, "another ingest of the same folder")

    import_tau2 = command(
        commands,
        "import-tau2",
        _import_tau2,
        summary="convert τ²-bench results files to session logs",
        description="Write each simulation of τ²-bench results files as a session log in DIR "
        "(<session>.jsonl, as stretto-proxy would have recorded it): the tools/list answer "
        "from the domain's tool kinds in TOOLS, the customer's and agent's words as context "
        "lines, the agent's calls and their results; the scripted greeting and the customer's "
        "own tool calls are left out. The header carries task_id, trial and reward. Importing "
        "again writes the same files. A file that is not a results file is refused.",
        examples=[
            "stretto import-tau2 runs.json --tools tau2_tools.json --out logs/retail "
            "--domain retail",
        ],
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

    compile_cmd = command(
        commands,
        "compile",
        _compile,
        summary="learn a flow from τ²-bench results (the training split's successful episodes)",
        description="Learn a habit-only flow from τ²-bench results files, as `stretto learn` "
        "does, from the episodes of the split's training tasks that succeeded (reward ≥ 1). "
        "Their session logs are written under HOME/cache/compile/ and learned from through the "
        "pipeline's assets. Results files of another domain are refused.",
        examples=[
            "stretto compile --results runs.json --domain retail --split split_tasks.json "
            "--out retail.flow.json",
        ],
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
    compile_cmd.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)
    compile_cmd.add_argument(
        "--tools",
        metavar="TOOLS.json",
        help="the domains' tool kinds (default: tau2_tools.json beside SPLIT or in its parent)",
    )
    compile_cmd.add_argument(
        "--calibrate",
        action="store_true",
        help=CALIBRATE_HELP + " (every training-task episode is replayed, failed ones too)",
    )
    add_costs(compile_cmd, SERVE_AT_HELP)
    compile_cmd.add_argument(
        "--pooled-arbiter",
        action="store_true",
        help="with --oracle: one arbiter for every task, not five cross-fitted by task group",
    )
    add_oracle(
        compile_cmd,
        "fit an arbiter on the split's test tasks, asking this model (default: none, a "
        "habit-only flow)",
        learning=True,
    )
    add_home(compile_cmd)
    add_wait(compile_cmd, "another ingest of the same episodes")


ORACLE_LEARNING = (
    "oracle",
    "oracle_cache",
    "oracle_base_url",
    "oracle_log",
    "oracle_price",
    "predicates",
    "manifest_options",
    "dataflow_hints",
)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _arbiter_config(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """The `flow` asset's arbiter fields from learn's or compile's options, or why they
    cannot be used (checked before any work: a runner's scheme, the files named)."""
    # entry point: only learn and compile ask a model (the oracle's HTTP client and questions)
    from stretto.oracle.oracle import parse_price
    from stretto.oracle.questions import load_predicates

    given = [n for n in ORACLE_LEARNING if getattr(args, n, None)]
    arbiter_from = getattr(args, "arbiter_from", None)
    refit = getattr(args, "refit_habit", False)
    if getattr(args, "habit_only", False):
        clashing = (
            given + (["arbiter_from"] if arbiter_from else []) + (["refit_habit"] if refit else [])
        )
        if clashing:
            return None, f"--habit-only asks no model: it takes no {_option(clashing[0])}"
        return None, None
    if arbiter_from:
        clashing = given + (["refit_habit"] if refit else [])
        if clashing:
            return None, f"--arbiter-from asks no model: it takes no {_option(clashing[0])}"
        path = resolved(arbiter_from)
        if not path.is_file():
            return None, f"--arbiter-from {arbiter_from}: no such file"
        return {"arbiter_from": str(path)}, None
    if not args.oracle:
        if given or refit:
            return None, f"{_option((given or ['refit_habit'])[0])} needs --oracle URI"
        return None, None
    problem = oracle_problem(args.oracle)
    if problem:
        return None, problem
    try:
        if args.oracle_price:
            parse_price(args.oracle_price)
        if args.predicates:
            load_predicates(args.predicates)
    except (ValueError, OracleError) as exc:
        return None, str(exc)
    if not args.oracle_budget >= 0:
        return None, f"--oracle-budget wants dollars ≥ 0, got {args.oracle_budget}"
    config: dict[str, Any] = {
        "oracle": args.oracle,
        "oracle_cache": str(oracle_cache(args)),
        "oracle_budget": args.oracle_budget,
        "manifest_options": args.manifest_options,
        "dataflow_hints": args.dataflow_hints,
        "refit_habit": refit,
        "pooled_arbiter": getattr(args, "pooled_arbiter", True),
    }
    for name, value in (
        ("oracle_base_url", args.oracle_base_url),
        ("oracle_log", str(resolved(args.oracle_log)) if args.oracle_log else None),
        ("oracle_price", args.oracle_price),
        ("predicates", str(resolved(args.predicates)) if args.predicates else None),
    ):
        if value is not None:
            config[name] = value
    return config, None


def _learn(args: argparse.Namespace) -> int:
    """Ingest the sessions folder (or the export's traces) into a warehouse of its own, then
    learn the flow."""
    arbiter, problem = _arbiter_config(args)
    problem = problem or _costs_problem(args)
    if problem:
        say(problem)
        return 2
    if arbiter is None and not args.habit_only:
        say(
            "learn needs --oracle URI to fit the flow's arbiter (docs/oracle.md), "
            "--arbiter-from FILE to take one, or --habit-only to learn without one"
        )
        return 2
    options = learning_options(args)
    if options is None:
        return 2
    problem = out_problem(args.out, args.home, args.mkdir)
    if problem:
        say(problem)
        return 2
    manifest = load_manifest(args.manifest) if args.manifest else None  # refused before work
    if args.otel:
        if manifest is None:
            say("--otel needs --manifest FILE: an export does not say which tools are reads")
            return 2
        export = resolved(args.otel)
        try:  # a folder per export's content: another export never mixes with this one's
            key = hashlib.blake2b(export.read_bytes(), digest_size=8).hexdigest()
        except OSError as exc:
            say(f"{export}: cannot read: {exc.strerror or exc}")
            return 1
        sessions = Paths.at(args.home).cache / "otel" / key
        private_dirs(sessions)
        if not otel_logs(str(export), manifest, args.domain, sessions):
            say(f"{export}: no trace with a tool call or an LLM turn to learn from")
            return 1
        options["otel"] = True
    else:
        sessions = resolved(args.sessions)
        if not sessions.is_dir():
            say(f"{sessions}: not a directory of session logs")
            return 1
        if not domain_matches(sessions, args.domain):
            return 1
    out = resolved(args.out)
    done = _learned(
        args,
        sessions,
        out,
        home=args.home,
        wait=args.wait,
        manifest=args.manifest,
        constants=args.constants,
        options=options,
        arbiter=arbiter,
    )
    if done is None:
        return 1
    learned, flow = done
    gate = flow.get("surprise")
    if gate:
        say(
            f"surprise gate: hands back above {gate['threshold']:.3f} nats per step over "
            f"{gate['window']} steps (the {gate['quantile']:g} quantile of {gate['sessions']} "
            "held-out sessions' peaks)"
        )
    print(
        f"stretto: learned the {args.domain} flow from {learned['sessions']} sessions "
        f"({learned['tools']} tools){_arbiter_said(learned)}{_wrote_now(args, out)}"
    )
    _finish(args, flow, out, sessions, manifest=args.manifest, constants=args.constants)
    return 0


SERVE_AT_HELP = (
    "a saved LLM turn's worth and a detour's cost, in one unit (e.g. input tokens); with "
    "--costs or --calibrate the flow is served by default at their break-even DELTA/(BETA+DELTA)"
)


def _costs_problem(args: argparse.Namespace) -> str | None:
    try:
        costs_of(args)
    except ValueError as exc:
        return str(exc)
    return None


def _finished_later(args: argparse.Namespace) -> bool:
    """Whether the command adds to the flow it learned before writing it (_finish)."""
    return args.costs is not None or args.calibrate


def _wrote_now(args: argparse.Namespace, out: Path) -> str:
    """` and wrote OUT` when the flow is already there; with --costs or --calibrate it is
    written later, by _finish, which says so once it has."""
    return "" if _finished_later(args) else f" and wrote {out}"


def _learned(
    args: argparse.Namespace, sessions: Path, out: Path, **learning: Any
) -> tuple[dict[str, Any], dict] | None:
    """Learn the flow from the folder of logs `sessions` (learn_folder's `learning` options):
    into `out`, or into a private draft when the command adds to it (_finished_later), so
    that `out` is written once, finished, and no reader of it sees a flow that is not the
    final one. The flow asset's metadata and the flow, or None after saying why it failed."""
    if _finished_later(args):
        return learn_to_finish(sessions, args.domain, **learning)
    learned = learn_folder(sessions, args.domain, out, **learning)
    return None if learned is None else (learned, load_flow(out))


def _finish(
    args: argparse.Namespace,
    flow: dict,
    out: Path,
    sessions: Path,
    *,
    manifest: str | None = None,
    constants: bool = False,
    tasks: Collection[str] | None = None,
) -> None:
    """With --costs or --calibrate, add to the flow learned its `serving` part (the threshold
    the proxy, replay, search and the console serve it at unless told otherwise) and, with
    --calibrate, its calibration (fitted on `sessions`, calibrate says how), then write it to
    `out`: the one write of the flow there (_learned put it in a draft)."""
    if not _finished_later(args):
        return  # _learned wrote it to `out`
    # the pipeline loads Dagster: loaded already, the flow was just learned with it
    from pipeline.learnfolder import write_finished

    flow["serving"] = serving_part(*costs_of(args))
    print(f"stretto: served at {theta_text(flow['serving']['threshold'])} unless told otherwise")
    table = None
    if args.calibrate:
        table = calibrate(
            flow,
            sessions,
            args.domain,
            home=args.home,
            manifest=manifest,
            constants=constants,
            tasks=tasks,
        )
    write_finished(flow, out, args.home)
    print(f"stretto: {said(table)}; wrote {out}" if table is not None else f"stretto: wrote {out}")


def _arbiter_said(learned: dict[str, Any]) -> str:
    """`, its arbiter fitted on N decisions of T held-out tasks (MODEL)` for what was learned
    (the flow asset's `arbiter` metadata: one domain's flow)."""
    arbiter = learned.get("arbiter")
    if not arbiter:
        return ""
    if arbiter["sources"]:
        return f", its arbiter taken from {arbiter['sources'][0].split(': ', 1)[-1]}"
    return (
        f", its arbiter fitted on {arbiter['cases']} decisions of {arbiter['tasks']} held-out "
        f"tasks ({arbiter['model']}"
        + (f", {arbiter['folds']} folds)" if arbiter["folds"] > 1 else ")")
    )


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


def _read_tau2(paths: list[str], tools: Any, domain: str | None) -> list:
    """Convert τ²-bench results files (all of them, before anything is written)."""
    from stretto.logs.tau2 import read_results  # entry point: only the τ²-bench commands

    progress = Progress(len(paths), "reading results", " files")
    files = []
    for path in paths:
        files.append(read_results(path, tools, domain))
        progress.advance()
    progress.close()
    for results in files:
        orphans = sum(s.orphan_results for s in results.simulations)
        if orphans:
            say(f"warning: {results.path}: {orphans} tool result(s) answer no call; left out")
    return files


def _import_tau2(args: argparse.Namespace) -> int:
    """Write each simulation of τ²-bench results files as a session log."""
    # entry point: only import-tau2 and compile read τ²-bench's files
    from stretto.logs.tau2 import write_logs
    from stretto.logs.tau2_inputs import load_tools

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
    # entry point: only import-tau2 and compile read τ²-bench's files
    from stretto.logs.tau2 import write_logs
    from stretto.logs.tau2_inputs import load_tools, read_split

    arbiter, problem = _arbiter_config(args)
    problem = problem or _costs_problem(args)
    if problem:
        say(problem)
        return 2
    problem = out_problem(args.out, args.home, args.mkdir)
    if problem:
        say(problem)
        return 2
    split = read_split(args.split)
    tools_path = args.tools
    if tools_path is None:  # τ²-bench's layout: domains/tau2_tools.json, domains/<d>/split...
        folder = resolved(args.split).parent
        found = [f / "tau2_tools.json" for f in (folder, folder.parent)]
        tools_path = next((f for f in found if f.is_file()), None)
        if tools_path is None:
            say(
                f"give the tools' kinds with --tools TOOLS.json (no tau2_tools.json "
                f"beside {args.split} or in its parent folder)"
            )
            return 2
    tools = load_tools(tools_path)
    files = _read_tau2(args.results, tools, args.domain)
    train = split["train"]
    # with an arbiter, the test tasks' episodes are its held-out decisions
    wanted = train | split["test"] if arbiter is not None else train
    chosen = [s for r in files for s in r.simulations if s.task_id in wanted]
    if not any(s.task_id in train for s in chosen):
        say(f"no episode of the files given is of a training task of {args.split}")
        return 1
    if arbiter is not None:
        held_out = sorted({s.task_id for s in chosen if s.task_id not in train})
        if not held_out:
            say(
                f"no episode of the files given is of a test task of {args.split}: no "
                "decisions to fit the arbiter on"
            )
            return 1
        arbiter["held_out_tasks"] = held_out
    # The logs go to a folder named by what is in them, so a different choice of episodes
    # never mixes with the logs of an earlier one (and the same choice learns incrementally).
    digest = hashlib.blake2b(digest_size=8)
    for sim in sorted(chosen, key=lambda s: s.session):
        digest.update(sim.text.encode("utf-8"))
    sessions = paths(args).cache / "compile" / f"{args.domain}-{digest.hexdigest()}"
    for results in files:
        kept = [s for s in results.simulations if s.task_id in wanted]
        write_logs(dataclasses.replace(results, simulations=kept), sessions)
    out = resolved(args.out)
    done = _learned(args, sessions, out, home=args.home, wait=args.wait, arbiter=arbiter)
    if done is None:
        return 1
    learned, flow = done
    training = sum(s.task_id in train for s in chosen)
    print(
        f"stretto: compiled the {args.domain} flow from {learned['sessions']} successful "
        f"training episodes (of {training} training-task episodes in {len(files)} file(s); "
        f"{learned['tools']} tools){_arbiter_said(learned)}{_wrote_now(args, out)}"
    )
    _finish(args, flow, out, sessions, tasks=train)
    return 0
