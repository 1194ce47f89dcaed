"""stretto-proxy's options: one table, read two ways.

`argparse` reads them when something needs saying (`--help`, `--version`, a usage error) and
is the reference for what they mean. It imports `re` and `gettext`: ~8 ms of a start-up that
should cost the host nothing, paid before the server can be started. So a plain command line
(only the table's long options, each given its value or none, as the table says) is read by
`quick_parse` instead, which gives exactly what argparse gives, or gives up and leaves it to
argparse (tests/proxy/test_options.py checks both ways, over generated command lines).

The proxy's own exit statuses are here too: a usage error's and a failure's, the same from
every module that gives up.
"""

from __future__ import annotations

from stretto import __version__
from stretto.model import defaults

# Exit statuses of the proxy itself (otherwise it exits with the server's status).
EXIT_USAGE = 2
EXIT_PROXY_FAILED = 125

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

# (option, kind, type, default, metavar, help); kind: value | append | flag.
# Groups are the headings of --help.
GROUPS: tuple[tuple[str, tuple[tuple, ...]], ...] = (
    (
        "recording",
        (
            (
                "--record",
                "value",
                str,
                None,
                "DIR",
                "write one log per session, DIR/<session>.jsonl",
            ),
            ("--domain", "value", str, None, "NAME", "the domain written in the log header"),
            (
                "--agent-model",
                "value",
                str,
                None,
                "NAME",
                "the agent's model, written in the header",
            ),
            (
                "--server-name",
                "value",
                str,
                None,
                "NAME",
                "this server's name in the host session, written in the header; learning "
                "names its tools NAME::tool and merges the logs of one host session "
                "(STRETTO_SESSION) across servers",
            ),
            (
                "--retain-days",
                "value",
                int,
                None,
                "DAYS",
                "at start, delete session logs under --record and oracle-cache entries "
                "last written more than DAYS days ago",
            ),
            (
                "--context",
                "value",
                str,
                None,
                "FILE",
                "a JSONL file of conversation messages ({role, content}) the host appends to; "
                "new lines are logged as 'context' before the next tool call",
            ),
        ),
    ),
    (
        "serving a flow",
        (
            (
                "--flow",
                "value",
                str,
                None,
                "FILE",
                "after each of the agent's calls, make the lookups this flow expects",
            ),
            (
                "--flow-decider",
                "value",
                ("arbiter", "reach", "habit"),
                None,
                None,
                "arbiter (the default when the flow has one), reach (else the default when the "
                "flow has reach counts) or habit",
            ),
            (
                "--flow-threshold",
                "value",
                float,
                None,
                "P",
                "make a lookup when probability x binding chance reaches P (default: the "
                f"flow's own threshold, written by learn --calibrate, else {defaults.THRESHOLD})",
            ),
            (
                "--flow-per-call",
                "value",
                int,
                defaults.PER_CALL,
                "N",
                "at most N lookups after one call (%(default)s)",
            ),
            (
                "--flow-per-session",
                "value",
                int,
                defaults.PER_SESSION,
                "N",
                "at most N lookups in a session (%(default)s)",
            ),
            (
                "--flow-tools",
                "append",
                str,
                None,
                "A,B",
                "only these lookups (comma-separated, repeatable); naming a tool the server "
                "lists without readOnlyHint lets it be looked up",
            ),
            (
                "--flow-log",
                "value",
                str,
                None,
                "FILE",
                "the flow log (default: <record dir>/<session>.flow.jsonl)",
            ),
            (
                "--flow-shadow",
                "flag",
                None,
                False,
                None,
                "decide and log, never look up: the agent gets the server's bytes",
            ),
            (
                "--flow-explore",
                "value",
                float,
                0.0,
                "EPSILON",
                "with probability EPSILON take another option that binds, and log every option "
                "and the propensity of what was taken",
            ),
            (
                "--flow-explore-seed",
                "value",
                int,
                0,
                "N",
                "seed of the exploration's draws (0)",
            ),
            (
                "--flow-budget",
                "value",
                int,
                defaults.BUDGET_CHARS,
                "CHARS",
                "at most this many characters appended to a result (%(default)s)",
            ),
            (
                "--flow-surprise",
                "value",
                str,
                None,
                "off|T",
                "the surprise gate: off, or hand back for the rest of the session once the "
                "agent's steps average above T nats (default: the flow's gate, if it has one)",
            ),
            (
                "--flow-questions",
                "value",
                int,
                300,
                "N",
                "the arbiter asks at most N questions in a session (%(default)s)",
            ),
            (
                "--task-id",
                "value",
                str,
                None,
                "ID",
                "the task the session is of (the arbiter's fold)",
            ),
        ),
    ),
    (
        "the System-One model (the arbiter decider; docs/oracle.md)",
        (
            (
                "--oracle",
                "value",
                str,
                None,
                "URI",
                "who answers: the flow's arbiter's model unless given; replay: the cache only",
            ),
            (
                "--oracle-cache",
                "value",
                str,
                None,
                "DIR",
                "the answer cache ($STRETTO_HOME/oracle-cache)",
            ),
            ("--oracle-base-url", "value", str, None, "URL", "the runner's server"),
            ("--oracle-log", "value", str, None, "FILE", "append each answer's record here"),
            (
                "--oracle-timeout",
                "value",
                int,
                defaults.ORACLE_TIMEOUT_MS,
                "MS",
                "a run's questions take at most MS milliseconds; then the flow hands back "
                "(%(default)s)",
            ),
        ),
    ),
    (
        "server",
        (
            (
                "--upstream",
                "value",
                str,
                None,
                "URL",
                "wrap a server that speaks Streamable HTTP at URL instead of starting a command",
            ),
            (
                "--upstream-header",
                "append",
                str,
                [],
                "NAME=VAR",
                "send header NAME with the value of environment variable VAR (never logged)",
            ),
        ),
    ),
    (
        "hosts over HTTP (docs/cli.md)",
        (
            (
                "--listen",
                "value",
                str,
                None,
                "ADDR",
                "serve hosts over Streamable HTTP at http://ADDR/mcp (HOST:PORT, port 0: any "
                "free one): one server, log and flow run per MCP session",
            ),
            (
                "--servers",
                "value",
                str,
                None,
                "FILE",
                "with --listen: front every server FILE names (JSONL, one server a line) as "
                "one MCP server, their tools named NAME::tool (docs/cli.md)",
            ),
            (
                "--listen-token-file",
                "value",
                str,
                None,
                "FILE",
                "require 'Authorization: Bearer <the token in FILE>' (FILE is created, 0600, "
                "with a new token when absent; default $STRETTO_HOME/listen.token)",
            ),
            (
                "--no-auth",
                "flag",
                None,
                False,
                None,
                "no token: any local user can use the server(s) (loopback addresses only)",
            ),
            (
                "--listen-idle",
                "value",
                float,
                None,
                "MINUTES",
                "end a session after this long without a request (240)",
            ),
        ),
    ),
)
OPTIONS = {option[0]: option for _, options in GROUPS for option in options}


class Options:
    """The parsed options, by the names argparse gives them (`flow_threshold`, ...)."""

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)

    def __eq__(self, other: object) -> bool:
        return vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Options({vars(self)})"


def dest(option: str) -> str:
    return option[2:].replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    import argparse  # proxy start-up: only --help and a usage error build the parser

    p = argparse.ArgumentParser(
        prog="stretto-proxy",
        usage="stretto-proxy [options] -- <server command...>\n"
        "       stretto-proxy [options] --upstream URL\n"
        "       stretto-proxy --listen ADDR [options] (-- <server command...> | --upstream URL)\n"
        "       stretto-proxy --listen ADDR --servers FILE [options]",
        description="Wrap an MCP server: forward every message between the host (stdin/stdout) "
        "and the server unchanged, and record each session as JSONL.",
        epilog="Own messages go to stderr prefixed 'stretto-proxy:'. Exit status: the server's "
        "(128+n if killed by signal n); 125 if the proxy itself fails; 2 on usage errors.",
    )
    p.add_argument("-V", "--version", action="version", version=f"stretto-proxy {__version__}")
    for title, options in GROUPS:
        group = p.add_argument_group(title)
        for option, kind, kind_type, default, metavar, help_text in options:
            if kind == "flag":
                group.add_argument(option, action="store_true", help=help_text)
                continue
            extra: dict = {"default": default, "metavar": metavar, "help": help_text}
            if isinstance(kind_type, tuple):
                extra["choices"] = kind_type
            elif kind_type is not str:
                extra["type"] = kind_type
            if kind == "append":
                extra["action"] = "append"
            group.add_argument(option, **extra)
    return p


def quick_parse(argv: list[str]) -> Options | None:
    """The options of a plain command line, exactly as argparse reads them; None when it is
    not plain (an abbreviation, a short option, a value that starts with `-`, a value that
    does not convert, ...): argparse then reads it, and says what is wrong."""
    values: dict[str, object] = {}
    for option, _, _, default, _, _ in OPTIONS.values():
        values[dest(option)] = list(default) if isinstance(default, list) else default
    i = 0
    while i < len(argv):
        word = argv[i]
        name, equals, value = word.partition("=")
        found = OPTIONS.get(name)
        if found is None:
            return None
        _, kind, kind_type, _, _, _ = found
        if kind == "flag":
            if equals:
                return None
            values[dest(name)] = True
            i += 1
            continue
        if not equals:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if not value or value.startswith("-"):
            return None
        if isinstance(kind_type, tuple):
            if value not in kind_type:
                return None
            converted: object = value
        else:
            try:
                converted = kind_type(value)
            except ValueError:
                return None
        if kind == "append":
            so_far = values[dest(name)]
            values[dest(name)] = [*so_far, converted] if isinstance(so_far, list) else [converted]
        else:
            values[dest(name)] = converted
    return Options(**values)


def parse_args(argv: list[str]) -> tuple[Options | argparse.Namespace, list[str]]:
    """(options, the server command after `--`); a usage error exits 2 with argparse's words."""
    if "--" in argv:
        cut = argv.index("--")
        own, command = argv[:cut], argv[cut + 1 :]
    else:
        own, command = argv, []
    args: Options | argparse.Namespace | None = quick_parse(own)
    if args is None:
        args = build_parser().parse_args(own)
    problem = _problem(args, command)
    if problem:
        build_parser().error(problem)
    return args, command


def plain_name(name: str) -> bool:
    """A server name prefixes tool names (`NAME::tool`): a plain word, no separator in it."""
    return bool(name) and all(c.isalnum() or c in "-_." for c in name)


def _problem(args, command: list[str]) -> str | None:
    """What is wrong with these options together, if anything."""
    if args.servers is not None:
        if not args.listen:
            return "--servers needs --listen (over stdio a host starts one proxy per server)"
        if args.upstream or command or args.upstream_header or args.server_name:
            return (
                "--servers names every server (and its name): not with a command after --, "
                "--upstream, --upstream-header or --server-name"
            )
    elif args.upstream and command:
        return "give either --upstream URL or a server command after --, not both"
    elif not args.upstream and not command:
        return "no server to wrap: give its command after -- (or --upstream URL)"
    if args.upstream_header and not args.upstream:
        return "--upstream-header needs --upstream"
    if (args.listen_token_file or args.listen_idle is not None or args.no_auth) and not args.listen:
        return "--listen-token-file, --no-auth and --listen-idle need --listen"
    if args.no_auth and args.listen_token_file:
        return "--no-auth and --listen-token-file: choose one"
    if args.listen and (args.context or args.flow_log):
        return "--context and --flow-log name one file: not with --listen (many sessions)"
    if args.listen_idle is not None and not args.listen_idle > 0:
        return "--listen-idle wants minutes above 0"
    flow_options = (
        "flow_decider",
        "flow_tools",
        "flow_log",
        "flow_shadow",
        "flow_explore",
        "flow_surprise",
    )
    if not args.flow and any(getattr(args, o) for o in flow_options):
        return "the --flow-* options need --flow"
    if args.oracle_timeout <= 0 or args.flow_questions < 0:
        return "--oracle-timeout wants milliseconds above 0, --flow-questions a count"
    if args.retain_days is not None and args.retain_days < 1:
        return "--retain-days wants a whole number of days, 1 or more"
    if args.server_name is not None and not plain_name(args.server_name):
        return "--server-name wants letters, digits, '-', '_' or '.' (no '::')"
    if not 0.0 <= args.flow_explore <= 1.0:
        return "--flow-explore wants a probability in [0, 1]"
    if args.flow_surprise is not None and not _surprise_ok(args.flow_surprise):
        return "--flow-surprise wants off or a number of nats ≥ 0"
    threshold = args.flow_threshold
    if threshold is not None and not 0.0 <= threshold <= 1.0:  # nan is refused too
        return "--flow-threshold wants a probability in [0, 1]"
    if args.flow and not (args.record or args.flow_log):
        return (
            "--flow needs --record DIR (the flow log goes beside the session log) "
            "or --flow-log FILE"
        )
    return None


def _surprise_ok(value: str) -> bool:
    """`off`, or a finite number ≥ 0 (stretto.model.surprise.gate_from_flow reads it)."""
    if value == "off":
        return True
    try:
        number = float(value)
    except ValueError:
        return False
    return 0.0 <= number < float("inf")
