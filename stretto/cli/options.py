"""What the commands share: how a command is declared (description, examples), the
options several commands take, each defined once, and how they print (a line on stderr, a
text table)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from stretto.home import Paths
from stretto.logs.sessionlog import is_session_log
from stretto.model.defaults import COSTS, ORACLE_TIMEOUT_MS, THRESHOLD
from stretto.oracle.errors import UnknownRunner
from stretto.progress import close_all

DECIDERS = ("arbiter", "reach", "habit")
HELP_WIDTH = 80  # descriptions are wrapped here; the examples are printed as written

Commands = argparse._SubParsersAction  # what add_subparsers() returns
Run = Callable[[argparse.Namespace], int]
T = TypeVar("T")
GAP = "  "  # between the columns of a text table
INTERRUPTED = 128 + 2  # the status of a process ended by SIGINT, as shells give it


def command(
    commands: Commands,
    name: str,
    run: Run,
    *,
    summary: str,
    description: str,
    examples: list[str],
    usage: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand: `summary` for `stretto --help`, `description` (one paragraph, wrapped)
    and `examples` (command lines, with an optional `# comment`) for `stretto NAME --help`."""
    parser = commands.add_parser(
        name,
        help=summary,
        description=textwrap.fill(description, HELP_WIDTH),
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples),
        usage=usage,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(run=run)
    return parser


def add_home(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    help = help or "STRETTO_HOME (default: $STRETTO_HOME, else ~/.stretto)"
    parser.add_argument("--home", metavar="DIR", help=help)


def paths(args: argparse.Namespace) -> Paths:
    """The paths under the home the command was given (--home), else the default one."""
    return Paths.at(args.home)


def add_decider(
    parser: argparse.ArgumentParser,
    help: str,
    *,
    default: str | None = None,
    repeatable: bool = False,
) -> None:
    parser.add_argument(
        "--decider",
        choices=DECIDERS,
        default=default,
        action="append" if repeatable else "store",
        help=help,
    )


def add_threshold(parser: argparse.ArgumentParser, help: str, *, repeatable: bool = False) -> None:
    """--threshold T; None when not given: the command serves the flow at its own threshold
    (stretto.model.decide.served_threshold: the flow's `serving`, else THRESHOLD)."""
    default = f"default: the flow's own threshold, else {THRESHOLD}"
    parser.add_argument(
        "--threshold",
        action="append" if repeatable else "store",
        type=float,
        metavar="T",
        help=f"{help} ({'repeatable; ' if repeatable else ''}{default})",
    )


def add_costs(parser: argparse.ArgumentParser, help: str) -> None:
    """--costs BETA,DELTA: a saved LLM turn's worth and a detour's cost, in any one unit
    (e.g. input tokens: τ²-bench retail 5824,2467); None when not given."""
    beta, delta = COSTS
    parser.add_argument(
        "--costs",
        metavar="BETA,DELTA",
        help=f"{help} (default {beta:g},{delta:g}: break-even at {THRESHOLD})",
    )


def costs_of(args: argparse.Namespace) -> tuple[float, float]:
    """The costs --costs gave, else the default; ValueError saying what is wrong."""
    if args.costs is None:
        return COSTS
    try:
        beta, delta = (float(x) for x in args.costs.split(","))
    except ValueError:
        raise ValueError(f"--costs {args.costs!r}: expected BETA,DELTA, e.g. 7,3") from None
    if not (beta > 0 and delta >= 0) or not all(map(math.isfinite, (beta, delta))):
        raise ValueError("--costs: BETA must be above 0 and DELTA at least 0")
    return beta, delta


def add_learning_options(parser: argparse.ArgumentParser) -> None:
    """--half-life and --rewards: which sessions train the habit, and how much each counts."""
    parser.add_argument(
        "--half-life",
        type=float,
        metavar="SESSIONS",
        help="a session this many sessions older than the newest counts half in the habit "
        "(default: every session counts the same)",
    )
    parser.add_argument(
        "--rewards",
        metavar="FILE",
        help="a JSON object session id -> reward, winning over the logs' (only sessions with "
        "a reward of at least 1, or none, train the habit)",
    )


def hash_field_names(value: str) -> list[str]:
    """The JSON keys one `--hash-field` value names: split at commas, each name stripped of
    spaces (`"email, name"` names `name`, as a key is matched stripped). An empty name
    (`email,,`, `" "`) is a usage error, exit 2: it names no key, so it would hash nothing."""
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{value!r} has an empty field name: give NAME, or NAME,NAME,..."
        )
    return names


def add_hash_field(parser: argparse.ArgumentParser, help: str) -> None:
    """--hash-field NAME (repeatable, or comma-separated), of `stretto redact` and `stretto
    ingest --redact`: `args.hash_field` is the list of every name given."""
    parser.add_argument(
        "--hash-field",
        type=hash_field_names,
        action="extend",
        default=[],
        metavar="NAME",
        help=help,
    )


def add_oracle(
    parser: argparse.ArgumentParser,
    oracle_help: str,
    *,
    timeout: bool = False,
    learning: bool = False,
) -> None:
    """The System-One oracle's options (docs/oracle.md): who answers (`--oracle URI`), the
    cache, the server, the answers' log; serving's timeout; learning's budget, price,
    predicates and what the questions offer."""
    group = parser.add_argument_group("the System-One oracle (docs/oracle.md)")
    group.add_argument("--oracle", metavar="URI", help=oracle_help)
    group.add_argument(
        "--oracle-cache", metavar="DIR", help="the answer cache (default: HOME/oracle-cache)"
    )
    group.add_argument(
        "--oracle-base-url", metavar="URL", help="the runner's server, instead of its default"
    )
    group.add_argument("--oracle-log", metavar="FILE", help="append each answer's record here")
    if timeout:
        group.add_argument(
            "--oracle-timeout",
            type=int,
            default=ORACLE_TIMEOUT_MS,
            metavar="MS",
            help="give up on an answer after MS milliseconds and hand back (%(default)s)",
        )
    if learning:
        group.add_argument(
            "--oracle-budget",
            type=float,
            default=1.0,
            metavar="DOLLARS",
            help="refuse, before asking, if the uncached questions could cost more (%(default)g)",
        )
        group.add_argument(
            "--oracle-price",
            metavar="IN[,OUT]",
            help="dollars per million tokens in (and out), for the budget (default: the runner's)",
        )
        group.add_argument(
            "--predicates", metavar="FILE", help='yes/no questions to weigh: {"predicates": [...]}'
        )
        group.add_argument(
            "--manifest-options", action="store_true", help="offer every read tool at every site"
        )
        group.add_argument(
            "--dataflow-hints",
            action="store_true",
            help="describe which arguments each lookup's results supply",
        )


def oracle_cache(args: argparse.Namespace) -> Path:
    """--oracle-cache, else HOME/oracle-cache (HOME: --home, else the default home)."""
    if getattr(args, "oracle_cache", None):
        return Path(args.oracle_cache).expanduser().resolve()
    return Paths.at(getattr(args, "home", None)).oracle_cache


def offline_oracle(args: argparse.Namespace):
    """The offline tools' oracle options (`--oracle`, default replay: the cache only)."""
    # commands that ask an oracle only: judging loads the HTTP runners (~100 ms at --help)
    from stretto.offline.episode_judges import OracleOptions

    return OracleOptions(
        uri=args.oracle or "replay",
        cache=oracle_cache(args),
        base_url=args.oracle_base_url,
        log=args.oracle_log,
    )


def oracle_problem(uri: str | None) -> str | None:
    """Why an --oracle URI names no runner, or None."""
    if uri is None:
        return None
    # commands given --oracle only: the runners load the HTTP client (~90 ms at --help)
    from stretto.oracle.runners import parse_uri

    try:
        parse_uri(uri)
    except UnknownRunner as exc:
        return str(exc)
    return None


def add_wait(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--wait",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help=f"how long to wait for {what} (default %(default)g; 0: fail at once)",
    )


def log_domains(folder: Path, *, below: bool) -> Counter[str | None]:
    """How many session logs in `folder` (with `below`, in its subfolders too, as ingest finds
    them) name each domain in their header (None: no domain). Only the first line of each is
    read; a log whose header cannot be read is left to the reader, which says why."""
    domains: Counter[str | None] = Counter()
    for path in folder.rglob("*.jsonl") if below else folder.glob("*.jsonl"):
        if not (path.is_file() and is_session_log(path)):
            continue
        try:
            with path.open("rb") as log:
                header = json.loads(log.readline())
        except (OSError, ValueError):
            continue
        if isinstance(header, dict) and "stretto_mcp_log" in header:
            domain = header.get("domain")
            domains[domain if isinstance(domain, str) else None] += 1
    return domains


def other_domains(found: Counter[str | None], domain: str) -> dict[str, int]:
    """The domains other than `domain` that logs counted by `log_domains` name, with how many
    logs name each. A log that names no domain may be of any, so it is of no other."""
    return {d: n for d, n in found.items() if d is not None and d != domain}


class OtherDomain(ValueError):
    """Sessions or results files of another domain than the flow's: a flow's counts say
    nothing about another domain's tools. main() says it and exits 2."""


def check_domain(
    flow: dict,
    flow_path: str | Path,
    *,
    sessions: str | Path | None = None,
    episodes: list | None = None,
    below: bool = False,
) -> None:
    """Refuse (OtherDomain) what a command would read with a flow when it is of another
    domain than the flow's: session logs in `sessions` (and in its subfolders with `below`,
    as ingest reads them) whose headers name another domain (a log without one may be of
    any), or `episodes` read from results files (each names its domain). The one check of
    every command that reads sessions with a flow (replay, search, drift, audit, evaluate,
    promote, stage)."""
    domain = flow["manifest"]["domain"]
    other = next((e for e in episodes or [] if e.domain != domain), None)
    if other is not None:
        raise OtherDomain(
            f"{other.source.split('#')[0]}: a results file of the {other.domain} domain, not "
            f"the flow's {domain} ({flow_path})"
        )
    if sessions is None or not Path(sessions).is_dir():
        return
    others = other_domains(log_domains(Path(sessions), below=below), domain)
    if others:
        held = ", ".join(f"{d} ({n})" for d, n in sorted(others.items()))
        raise OtherDomain(
            f"{sessions}: sessions of another domain than the flow's {domain} ({flow_path}): {held}"
        )


def interruptible(work: Callable[[], T], said: str) -> T:
    """`work()`, on a thread of its own so that Ctrl-C reaches this one at once: on the main
    thread Dagster holds SIGINT back until a step ends, then fails the run with a traceback,
    and DuckDB turns it into a failed query. On Ctrl-C: `said` in one line on stderr, and the
    process ends now with status 130, leaving what the work wrote as a crash leaves it (every
    write of the warehouse is recovered from that by the next run)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="stretto-work", daemon=True)
    thread.start()
    try:
        thread.join()
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):  # the terminal gets its cursor back
            close_all()
        print(f"stretto: {said}", file=sys.stderr, flush=True)
        os._exit(INTERRUPTED)
    if "error" in box:
        raise box["error"]
    return box["value"]


def say(message: str) -> None:
    """One line on stderr, as every message of the command is written."""
    print(f"stretto: {message}", file=sys.stderr)


def aligned(header: Sequence[str], rows: Iterable[Sequence[str]], rule: bool = False) -> list[str]:
    """The lines of a text table: the header (with `rule`, a line of dashes under it), then the
    rows; each column padded to its widest cell."""
    rows = list(rows)
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    lines = [
        GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if rule:
        lines.insert(1, GAP.join("-" * w for w in widths))
    return lines
