"""The commands that set stretto up: init (the host configuration, stretto.cli.hosts) and
doctor (is this installation ready, stretto.cli.doctor)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stretto.cli import hosts
from stretto.cli.options import DECIDERS, Commands, add_home, command, paths, say
from stretto.logs.domain import RULE, is_valid_domain
from stretto.model.flow import load_flow


def register(commands: Commands) -> None:
    init = command(
        commands,
        "init",
        _init,
        summary="the host configuration that wraps an MCP server in stretto-proxy",
        description="Print (JSON, on stdout) the MCP host configuration that runs SERVER "
        "behind stretto-proxy, recording every session into HOME/logs/NAME/ (and serving FLOW "
        "when given), or merge it into the host's configuration file with --write; on stderr, "
        "the steps from there to a served flow. HOME is --home, else $STRETTO_HOME, else "
        "~/.stretto. For Claude Code it prints the JSON `claude mcp add-json NAME` takes.",
        usage="stretto init [--host HOST] [--name NAME] [--flow FLOW] "
        f"[--decider {{{','.join(DECIDERS)}}}] [--shadow] [--explore EPS] [--home DIR] "
        "[--write PATH [--force]] "
        "(-- SERVER COMMAND... | --server NAME=COMMAND...)",
        examples=[
            "stretto init --name notes -- node/node_modules/.bin/mcp-server-filesystem ~/notes",
            "stretto init --host claude-code --flow work.flow.json --write .mcp.json "
            "--server 'github=github-mcp-server stdio' "
            "--server 'docs=node /srv/docs-server.js'",
        ],
    )
    init.add_argument("--host", choices=tuple(hosts.HOSTS), default="claude-desktop")
    init.add_argument(
        "--name",
        help="the server's name and domain (default: the flow's domain, else from its command)",
    )
    init.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="one of several servers of the same host session (repeatable; instead of the "
        "command after --): each behind its own proxy with --server-name NAME, all recording "
        "into the domain --name, so learning merges their sessions",
    )
    init.add_argument("--flow", metavar="FLOW", help="serve this flow")
    init.add_argument(
        "--decider", choices=DECIDERS, help="with --flow: the decider (default: the flow's)"
    )
    init.add_argument(
        "--shadow",
        action="store_true",
        help="with --flow: decide and log, look nothing up; record into HOME/shadow/NAME/",
    )
    init.add_argument(
        "--explore",
        type=float,
        metavar="EPS",
        help="with --flow: take another option at rate EPS and log its chance; record into "
        "HOME/explore/NAME/ (for stretto evaluate)",
    )
    add_home(init, "the home the configuration names (default: $STRETTO_HOME, else ~/.stretto)")
    init.add_argument(
        "--write",
        metavar="PATH",
        help="merge the server into the host's configuration file at PATH (created if "
        "missing; the old file is kept as a backup)",
    )
    init.add_argument(
        "--force",
        action="store_true",
        help="with --write: replace a different server of the same name",
    )
    init.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    doctor = command(
        commands,
        "doctor",
        _doctor,
        summary="check the installation (it changes nothing)",
        description="Check Python and the packages, that stretto-proxy is on PATH, node and "
        "the filesystem server the walkthrough runs, the home (writable, or creatable), the "
        "warehouse (readable, with every view), each flow under HOME/flows/ (valid), each "
        "System-One runner the flows' arbiters name or --oracle gives (reachable, the model "
        "there, its key set — never printed; --network also asks it one question), and "
        "DAGSTER_HOME with dagster.yaml and telemetry off (for the Dagster UI only). Prints a "
        "table; exits 1 on a problem; warnings (the Dagster UI, node, PATH) do not.",
        examples=[
            "stretto doctor",
            "stretto doctor --oracle ollama://qwen3:8b --network",
        ],
    )
    doctor.add_argument(
        "--oracle",
        action="append",
        default=[],
        metavar="URI",
        help="also check this System-One runner (repeatable)",
    )
    doctor.add_argument(
        "--network", action="store_true", help="ask each runner one question (not cached)"
    )
    add_home(doctor)


def _init(args: argparse.Namespace) -> int:
    server = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        several = hosts.parse_servers(args.server)
    except hosts.InitError as exc:
        say(str(exc))
        return 2
    if several and server:
        say("give either --server NAME=COMMAND (repeatable) or one server's command after --")
        return 2
    if several and not (args.name or args.flow):
        say("--server needs --name: the domain the servers' sessions are recorded and learned as")
        return 2
    if not server and not several:
        say(
            "give the server's command after --, e.g. stretto init --name notes -- "
            "$PWD/node/node_modules/.bin/mcp-server-filesystem ~/notes (an installed server: "
            "`npx -y PACKAGE` would download it when the host first starts it)"
        )
        return 2
    for option, given in (("--decider", args.decider), ("--shadow", args.shadow)):
        if given and not args.flow:
            say(f"{option} goes with --flow (the flow it serves)")
            return 2
    if args.explore is not None and not (args.flow and 0 < args.explore <= 1):
        say("--explore EPS goes with --flow, and EPS is a rate above 0 and at most 1")
        return 2
    if args.force and not args.write:
        say("--force goes with --write (it replaces a server of the same name in that file)")
        return 2
    flow = None
    name = args.name
    if args.flow:
        served = load_flow(args.flow)  # refuse a bad flow before configuring a host to serve it
        flow = str(Path(args.flow).expanduser().resolve())
        name = name or served["manifest"]["domain"]
    for server_name, words in (several or {"": server}).items():
        problem = hosts.command_problem(words)
        if problem:
            which = f"--server {server_name}: " if server_name else ""
            say(f"warning: {which}{problem}: the host will fail to start the server")
    name = name or hosts.server_name(server)
    if not is_valid_domain(name):  # the proxy records its sessions under this domain
        say(f"--name {name!r}: {RULE}")
        return 2
    home = hosts.home_text(args.home)
    record = hosts.record_folder(home, name, shadow=args.shadow, explore=args.explore)
    entries = {
        server_name: hosts.server_entry(
            args.host,
            command,
            name=name,
            record=record,
            flow=flow,
            decider=args.decider,
            shadow=args.shadow,
            explore=args.explore,
            server_name=server_name if several else None,
        )
        for server_name, command in (several or {name: server}).items()
    }
    if args.write:
        try:
            done = hosts.write_entries(
                Path(args.write).expanduser(), args.host, entries, force=args.force
            )
        except hosts.InitError as exc:
            say(str(exc))
            return 1
        say(done)
    elif several:  # the servers under the host's table (Claude Code's .mcp.json has that too)
        print(json.dumps({hosts.HOSTS[args.host].table: entries}, indent=2))
    else:
        print(json.dumps(hosts.printed(args.host, name, entries[name]), indent=2))
    steps = hosts.next_steps(
        args.host,
        name,
        home,
        record,
        flow=flow,
        shadow=args.shadow,
        explore=args.explore,
        written=bool(args.write),
    )
    print(steps, file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    # entry point: only `stretto doctor` loads the warehouse and the oracle to check them
    from stretto.cli.doctor import WARN, checks, render

    rows = checks(paths(args).home, args.oracle, args.network)
    sys.stdout.write(render(rows))
    warnings = [what for what, ok, _ in rows if ok is WARN]
    problems = [what for what, ok, _ in rows if ok is False]
    if warnings:
        say(f"{len(warnings)} warning(s), nothing stretto itself needs: {', '.join(warnings)}")
    if problems:
        say(f"{len(problems)} problem(s): {', '.join(problems)}")
        return 1
    return 0
