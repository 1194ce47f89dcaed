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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return 2
    from stretto.sessionlog import LogError

    try:
        return args.run(args)
    except LogError as exc:
        print(f"stretto: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
