"""`stretto-proxy [options] -- <server command...>`: a recording MCP proxy on stdio.

Kept light on purpose: the host waits for this process before its first message, so
nothing here imports dagster, duckdb, polars, pyarrow or mcp.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from stretto import __version__
from stretto.model import defaults

TYPE_CHECKING = False  # typing's constant, without importing typing at start-up
if TYPE_CHECKING:
    from proxy.upstream_http import HttpUpstream
    from proxy.upstream_stdio import StdioServer

# Exit statuses of the proxy itself (otherwise it exits with the server's status).
EXIT_PROXY_FAILED = 125
EXIT_USAGE = 2

SHUTDOWN_GRACE_S = 2.0  # after the host leaves: how long the server gets to exit by itself
DRAIN_S = 2.0  # after the server exits: how long its last output gets to reach the host


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stretto-proxy",
        usage="stretto-proxy [options] -- <server command...>\n"
        "       stretto-proxy [options] --upstream URL",
        description="Wrap an MCP server: forward every message between the host (stdin/stdout) "
        "and the server unchanged, and record each session as JSONL.",
        epilog="Own messages go to stderr prefixed 'stretto-proxy:'. Exit status: the server's "
        "(128+n if killed by signal n); 125 if the proxy itself fails; 2 on usage errors.",
    )
    p.add_argument("-V", "--version", action="version", version=f"stretto-proxy {__version__}")
    rec = p.add_argument_group("recording")
    rec.add_argument(
        "--record", metavar="DIR", help="write one log per session, DIR/<session>.jsonl"
    )
    rec.add_argument("--domain", metavar="NAME", help="the domain written in the log header")
    rec.add_argument(
        "--agent-model", metavar="NAME", help="the agent's model, written in the header"
    )
    rec.add_argument(
        "--context",
        metavar="FILE",
        help="a JSONL file of conversation messages ({role, content}) the host appends to; "
        "new lines are logged as 'context' before the next tool call",
    )
    flows = p.add_argument_group("serving a flow")
    flows.add_argument(
        "--flow",
        metavar="FILE",
        help="after each of the agent's calls, make the lookups this flow expects",
    )
    flows.add_argument(
        "--flow-decider",
        choices=("reach", "habit"),
        help="reach (the default when the flow has reach counts) or habit",
    )
    flows.add_argument(
        "--flow-threshold",
        type=float,
        default=defaults.THRESHOLD,
        metavar="P",
        help="make a lookup when probability x binding chance reaches P (%(default)s)",
    )
    flows.add_argument(
        "--flow-per-call",
        type=int,
        default=defaults.PER_CALL,
        metavar="N",
        help="at most N lookups after one call (%(default)s)",
    )
    flows.add_argument(
        "--flow-per-session",
        type=int,
        default=defaults.PER_SESSION,
        metavar="N",
        help="at most N lookups in a session (%(default)s)",
    )
    flows.add_argument(
        "--flow-tools",
        action="append",
        metavar="A,B",
        help="only these lookups (comma-separated, repeatable)",
    )
    flows.add_argument(
        "--flow-log",
        metavar="FILE",
        help="the flow log (default: <record dir>/<session>.flow.jsonl)",
    )
    flows.add_argument(
        "--flow-shadow",
        action="store_true",
        help="decide and log, never look up: the agent gets the server's bytes",
    )
    flows.add_argument(
        "--flow-explore",
        type=float,
        default=0.0,
        metavar="EPSILON",
        help="with probability EPSILON take another option that binds, and log every option "
        "and the propensity of what was taken",
    )
    flows.add_argument(
        "--flow-explore-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the exploration's draws (0)",
    )
    flows.add_argument(
        "--flow-budget",
        type=int,
        default=defaults.BUDGET_CHARS,
        metavar="CHARS",
        help="at most this many characters appended to a result (%(default)s)",
    )
    srv = p.add_argument_group("server")
    srv.add_argument(
        "--upstream",
        metavar="URL",
        help="wrap a server that speaks Streamable HTTP at URL instead of starting a command",
    )
    srv.add_argument(
        "--upstream-header",
        metavar="NAME=VAR",
        action="append",
        default=[],
        help="send header NAME with the value of environment variable VAR (never logged)",
    )
    return p


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = _parser()
    if "--" in argv:
        cut = argv.index("--")
        own, command = argv[:cut], argv[cut + 1 :]
    else:
        own, command = argv, []
    args = parser.parse_args(own)
    if args.upstream and command:
        parser.error("give either --upstream URL or a server command after --, not both")
    if not args.upstream and not command:
        parser.error("no server to wrap: give its command after -- (or --upstream URL)")
    if args.upstream_header and not args.upstream:
        parser.error("--upstream-header needs --upstream")
    flow_options = ("flow_decider", "flow_tools", "flow_log", "flow_shadow", "flow_explore")
    if not args.flow and any(getattr(args, o) for o in flow_options):
        parser.error("the --flow-* options need --flow")
    if not 0.0 <= args.flow_explore <= 1.0:
        parser.error("--flow-explore wants a probability in [0, 1]")
    if args.flow and not (args.record or args.flow_log):
        parser.error(
            "--flow needs --record DIR (the flow log goes beside the session log) "
            "or --flow-log FILE"
        )
    return args, command


def _upstream_headers(specs: list[str]) -> dict[str, str]:
    headers = {}
    for spec in specs:
        name, sep, var = spec.partition("=")
        if not sep or not name or not var:
            raise SystemExit(f"stretto-proxy: --upstream-header wants NAME=VAR, got {spec!r}")
        if var not in os.environ:
            raise SystemExit(f"stretto-proxy: --upstream-header {name}: ${var} is not set")
        headers[name] = os.environ[var]
    return headers


def _say(text: str) -> None:
    print(f"stretto-proxy: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    started, started_ns = time.time(), time.monotonic_ns()
    args, command = parse_args(sys.argv[1:] if argv is None else argv)

    from proxy.redact import redact_command, redact_url
    from proxy.relay import Relay

    flow = None
    if args.flow:  # refuse a bad flow before starting anything
        from stretto.model.flow import FlowError, load_flow

        try:
            flow = load_flow(os.path.expanduser(args.flow))
        except FlowError as exc:
            _say(str(exc))
            return EXIT_USAGE

    server: HttpUpstream | StdioServer
    try:
        if args.upstream:
            from proxy.upstream_http import HttpUpstream

            server = HttpUpstream(args.upstream, _upstream_headers(args.upstream_header))
            logged_command = [redact_url(args.upstream)]
        else:
            from proxy.upstream_stdio import StdioServer

            server = StdioServer(command)
            logged_command = redact_command(command)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - any failure to start is the proxy's failure
        _say(str(exc))
        return EXIT_PROXY_FAILED

    log = None
    if args.record:
        from proxy.recorder import SessionLog

        try:
            log = SessionLog(
                os.path.expanduser(args.record),
                server_command=logged_command,
                domain=args.domain,
                agent_model=args.agent_model,
                started=started,
                started_monotonic_ns=started_ns,
            )
        except OSError as exc:
            _say(f"cannot create the session log in {args.record}: {exc}")
            server.kill()
            server.wait(5)
            return EXIT_PROXY_FAILED
        if log.kept:
            _say(f"recording to {log.path}")

    context = None
    if args.context:
        from proxy.context import ContextFeed

        context = ContextFeed(os.path.expanduser(args.context))

    relay = Relay(server, log, context)
    if hasattr(server, "set_error_handler"):
        server.set_error_handler(relay.answer_errors)
    if flow is not None:
        relay.flow = _flow_server(flow, args, relay, server, log)
    return _run(relay, server, log)


def _flow_server(flow, args, relay, server, log):
    """What serves the flow in this session."""
    from proxy.serve import FlowServer

    tools = None
    if args.flow_tools:
        tools = {t.strip() for spec in args.flow_tools for t in spec.split(",") if t.strip()}
    log_path = args.flow_log or os.path.join(os.path.dirname(log.path), f"{log.session}.flow.jsonl")
    record = log.record if log is not None else (lambda sender, line, parsed: None)
    _say(f"serving the flow {args.flow}; its log: {log_path}")
    return FlowServer(
        flow,
        decider=args.flow_decider,
        threshold=args.flow_threshold,
        per_call=args.flow_per_call,
        per_session=args.flow_per_session,
        tools=tools,
        log_path=os.path.expanduser(log_path),
        shadow=args.flow_shadow,
        budget_chars=args.flow_budget,
        send=server.send,
        to_host=relay.to_host,
        record=record,
        explore=args.flow_explore,
        explore_seed=args.flow_explore_seed,
        session=log.session if log is not None else "",
    )


def _run(relay, server, log) -> int:
    wake = threading.Event()
    host_eof = threading.Event()
    output_closed = threading.Event()
    stop_signal: list[int] = []
    server_status: list[int] = []

    def read_host() -> None:
        stdin = open(0, "rb", buffering=1 << 16, closefd=False)  # noqa: SIM115
        try:
            for line in iter(stdin.readline, b""):
                relay.from_host(line)
        except OSError:
            pass  # our stdin failed: the host has gone
        finally:
            host_eof.set()
            wake.set()

    def on_output_end() -> None:
        output_closed.set()
        wake.set()

    def watch_server() -> None:
        server_status.append(server.wait())
        wake.set()

    def on_signal(signum, _frame) -> None:
        stop_signal.append(signum)
        wake.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    if hasattr(server, "set_end_handler"):
        server.set_end_handler(on_output_end)
    server.start(relay.from_server)
    threading.Thread(target=read_host, name="host-stdin", daemon=True).start()
    threading.Thread(target=watch_server, name="server-wait", daemon=True).start()

    def host_or_signal() -> bool:
        return host_eof.is_set() or bool(stop_signal) or relay.host_gone.is_set()

    while not (server_status or host_or_signal() or output_closed.is_set()):
        wake.wait(0.5)
        wake.clear()

    deaf = False
    if output_closed.is_set() and not (server_status or host_or_signal()):
        # The server closed its stdout: on its way out, or running on with nothing it says
        # reaching the host.
        exited = server.wait(SHUTDOWN_GRACE_S)
        if exited is not None:
            server_status.append(exited)
        deaf = exited is None

    if server_status:
        status = server_status[0]
        server.finish_reading(DRAIN_S)
        if relay.flow is not None:
            relay.flow.abandon()
        answered = relay.fail_pending(f"the MCP server exited (status {status}) before answering")
        note = f"; answered {answered} waiting request(s) with an error" if answered else ""
        _say(f"the server exited with status {status}{note}")
    else:
        if deaf:
            answered = relay.fail_pending("the MCP server closed its output")
            note = f"; answered {answered} waiting request(s) with an error" if answered else ""
            _say(f"the server closed its output but kept running{note}; ending it")
        if stop_signal:
            _say(f"stopping on signal {stop_signal[0]}")
            server.close_input()
            server.terminate()
        else:
            server.close_input()  # the host has gone: let the server finish by itself
        status = server.wait(SHUTDOWN_GRACE_S)
        if status is None:
            server.terminate()
            status = server.wait(SHUTDOWN_GRACE_S)
        if status is None:
            server.kill()
            status = server.wait()
        server.finish_reading(DRAIN_S)
        # The host has hung up: requests left unanswered stay so in the log, unanswered.
    if hasattr(server, "end_group"):
        server.end_group(SHUTDOWN_GRACE_S)  # whatever the server left running
    relay.log_context()  # the conversation's last words come after the last call
    if log is not None:
        log.close()
    return status if status is not None else EXIT_PROXY_FAILED


if __name__ == "__main__":
    sys.exit(main())
