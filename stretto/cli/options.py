"""What the commands share: how a command is declared (description, examples), and the
options several commands take, each defined once."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from stretto.home import Paths
from stretto.logs.sessionlog import is_session_log
from stretto.model.defaults import THRESHOLD

DECIDERS = ("reach", "habit")
HELP_WIDTH = 80  # descriptions are wrapped here; the examples are printed as written

Commands = argparse._SubParsersAction  # what add_subparsers() returns
Run = Callable[[argparse.Namespace], int]


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
    """--threshold T, by default the proxy's (stretto.model.defaults.THRESHOLD)."""
    if repeatable:  # a list of them; the command falls back to the default
        parser.add_argument(
            "--threshold",
            action="append",
            type=float,
            metavar="T",
            help=f"{help} (repeatable; default {THRESHOLD})",
        )
    else:
        parser.add_argument(
            "--threshold",
            type=float,
            default=THRESHOLD,
            metavar="T",
            help=f"{help} (default %(default)s)",
        )


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


def say(message: str) -> None:
    """One line on stderr, as every message of the command is written."""
    print(f"stretto: {message}", file=sys.stderr)
