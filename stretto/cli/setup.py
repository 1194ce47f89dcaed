"""The commands that set stretto up: init (the host configuration, stretto.cli.hosts) and
doctor (is this installation ready, stretto.cli.doctor)."""

from __future__ import annotations

import argparse
import sys

from stretto.cli.hosts import HOSTS
from stretto.cli.options import DECIDERS, Commands, add_home, command, paths, say


def register(commands: Commands) -> None:
    init = command(
        commands,
        "init",
        _init,
        summary="print the host configuration that wraps an MCP server in stretto-proxy",
        description="Print (JSON, on stdout) the MCP host configuration that runs SERVER "
        "behind stretto-proxy, recording every session (and serving FLOW when given), and on "
        "stderr the steps from there to a served flow.",
        usage="stretto init [--host HOST] [--flow FLOW] [--decider {reach,habit}] "
        "[--name NAME] [--home DIR] -- SERVER COMMAND...",
        examples=[
            "stretto init -- npx -y @modelcontextprotocol/server-filesystem ~/notes",
            "stretto init --host claude-code --flow notes.flow.json --name notes -- node server.js",
        ],
    )
    init.add_argument("--host", choices=tuple(HOSTS), default="claude-desktop")
    init.add_argument("--flow", metavar="FLOW", help="serve this flow")
    init.add_argument(
        "--decider", choices=DECIDERS, help="with --flow: the decider (default: the flow's)"
    )
    init.add_argument("--name", help="the server's name and domain (default: from its command)")
    add_home(init, "STRETTO_HOME in the configuration (default ~/.stretto)")
    init.add_argument("server", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    doctor = command(
        commands,
        "doctor",
        _doctor,
        summary="check the installation",
        description="Check Python and the packages, node and the filesystem server the "
        "walkthrough runs, that STRETTO_HOME is writable, and DAGSTER_HOME with dagster.yaml "
        "and telemetry off. Prints a table; exits 1 on a problem.",
        examples=["stretto doctor", "DAGSTER_HOME=$HOME/.stretto/dagster stretto doctor"],
    )
    add_home(doctor)


def _init(args: argparse.Namespace) -> int:
    import json

    from stretto.cli.hosts import host_config, next_steps, server_name

    server = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not server:
        say(
            "give the server's command after --, e.g. "
            "stretto init -- npx -y @modelcontextprotocol/server-filesystem ~/notes"
        )
        return 2
    if args.flow:
        from stretto.model.flow import load_flow

        load_flow(args.flow)  # refuse a bad flow before printing a configuration for it
    name = args.name or server_name(server)
    home = args.home or "~/.stretto"
    config = host_config(
        args.host, server, name=name, home=home, flow=args.flow, decider=args.decider
    )
    print(json.dumps(config, indent=2))
    print(next_steps(args.host, name, home, args.flow), file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from stretto.cli.doctor import checks, render

    rows = checks(paths(args).home)
    sys.stdout.write(render(rows))
    problems = [what for what, ok, _ in rows if not ok]
    if problems:
        say(f"{len(problems)} problem(s): {', '.join(problems)}")
        return 1
    return 0
