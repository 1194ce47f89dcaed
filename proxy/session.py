"""One stdio session of the proxy, started and run: `open_session` starts the server, its
log, the relay, the loop and the flow; `Session.run` forwards until the host or the server ends
it. `stretto-proxy` runs one on its own stdio (proxy.cli); `--listen` runs one per MCP session
on a pair of pipes (proxy.listen.piped).

Kept light on purpose, as proxy.cli is: the host waits for the first bytes, so what only some
sessions need (the HTTP upstream, the context file, retention, the flow) is imported when a
session needs it (tests/proxy/test_startup.py holds the list of what loads at start).
"""

from __future__ import annotations

import os
import sys
import time

from proxy.options import EXIT_PROXY_FAILED, EXIT_USAGE
from proxy.record.recorder import SessionLog, host_session_id
from proxy.record.redact import redact_command, redact_url
from proxy.relay import Relay
from proxy.transport.pump import Pump
from proxy.transport.upstream_stdio import StdioServer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from proxy.transport.upstream_http import HttpUpstream

FLOW_START_S = 1.0  # the flow starts loading at the server's first line, or this late
SHUTDOWN_GRACE_S = 2.0  # after the host leaves: how long the server gets to exit by itself
BUSY_GRACE_S = 10.0  # ... or, while it is still working (a loaded machine), at most this long
DRAIN_S = 2.0  # after the server exits: how long its last output gets to reach the host


def _run_until_exit(pump, exited, server, patient: bool) -> bool:
    """Forward until the server exits, SHUTDOWN_GRACE_S at most; if `patient`, past that for
    as long as the server is still working (running, or its CPU time moving: on a loaded
    machine a server's own shutdown can take longer), up to BUSY_GRACE_S. One that sits idle
    with its input closed is not waited for."""
    if pump.run_until(exited, SHUTDOWN_GRACE_S):
        return True
    progress = getattr(server, "progress", None)
    if not patient or progress is None:
        return False
    deadline = time.monotonic() + BUSY_GRACE_S - SHUTDOWN_GRACE_S
    before = progress()
    while before is not None and time.monotonic() < deadline:
        if pump.run_until(exited, 0.25):
            return True
        now = progress()
        if now is None or not (now[0] or now[1] > before[1]):
            return False
        before = now
    return exited()


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


def say(text: str) -> None:
    """Tell the user `text` on stderr, as the proxy speaks."""
    print(f"stretto-proxy: {text}", file=sys.stderr, flush=True)


class Session:
    """One session's parts, started: the server, its log, the relay, the loop, the flow."""

    def __init__(self, pump, relay, server, log, loader) -> None:
        self.pump, self.relay, self.server, self.log, self.loader = pump, relay, server, log, loader

    def run(self) -> int:
        """Forward until the host or the server ends the session; the exit status."""
        try:
            return _run(self.pump, self.relay, self.server, self.log, self.loader)
        finally:
            self.pump.close()


def open_session(
    args,
    command: list[str],
    started: float,
    started_ns: int,
    host_in: int = 0,
    host_out: int = 1,
    host_session: str | None = None,
    server_env: dict[str, str] | None = None,
) -> Session | tuple[int, str]:
    """Start the server and everything that records and serves its session, the host on
    `host_in`/`host_out`; or, when it cannot start, (exit status, why) (said on stderr).
    `host_session`: the log header's (with --listen, the MCP session); else the process's
    (proxy.record.recorder.host_session_id). `server_env`: added to the server's environment."""
    server: HttpUpstream | StdioServer
    http: HttpUpstream | None = None
    try:
        if args.upstream:
            from proxy.transport.upstream_http import (
                HttpUpstream,  # proxy start-up: http.client, --upstream
            )

            server = http = HttpUpstream(args.upstream, _upstream_headers(args.upstream_header))
        else:
            server = StdioServer(command, server_env)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE, str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure to start is the proxy's failure
        say(str(exc))
        return EXIT_PROXY_FAILED, str(exc)

    log = None
    if args.record:
        logged = [redact_url(args.upstream)] if args.upstream else redact_command(command)
        try:
            log = SessionLog(
                os.path.expanduser(args.record),
                server_command=logged,
                domain=args.domain,
                agent_model=args.agent_model,
                host_session=host_session or host_session_id(),
                server_name=args.server_name,
                started=started,
                started_monotonic_ns=started_ns,
            )
        except OSError as exc:
            why = f"cannot create the session log in {args.record}: {exc}"
            say(why)
            _abort(server)
            return EXIT_PROXY_FAILED, why
        if log.kept and not args.flow:  # with a flow: once the flow is accepted
            say(f"recording to {log.path}")

    if args.retain_days is not None:  # the server is starting meanwhile
        # proxy start-up: only with --retain-days
        from proxy.record.retention import sweep
        from stretto.oracle.cache import default_cache_dir

        cache = os.path.expanduser(args.oracle_cache) if args.oracle_cache else None
        record = os.path.expanduser(args.record) if args.record else None
        say(sweep(record, cache or str(default_cache_dir()), args.retain_days))

    context = None
    if args.context:
        from proxy.record.context import ContextFeed  # proxy start-up: only with --context

        context = ContextFeed(os.path.expanduser(args.context))

    relay = Relay(server, log, context, to_host=lambda line: pump.to_host(line))
    relay.hold_server_lines = bool(args.flow and not args.flow_shadow)
    pump = Pump(relay, server, host_in=host_in, host_out=host_out)
    relay.host_has_all = pump.drained
    if http is not None:
        http.set_error_handler(relay.answer_errors)
        http.start(relay.from_server)
        if not relay.hold_server_lines:
            http.stream_big_answers(pump.stream_to_host, relay.forwarded_from_server)
    loader = None
    if args.flow:
        from proxy.serve.flowload import FlowLoader  # proxy start-up: only with --flow

        relay.expect_flow()
        loader = FlowLoader(args, relay, pump.to_server, log, pump.wake)
    return Session(pump, relay, server, log, loader)


def _attach(relay, loader, log) -> None:
    """Serve the loaded flow from now on (it is shown the session so far first)."""
    if log is not None and log.kept:
        say(f"recording to {log.path}")
    say(f"serving the flow {loader.args.flow}; its log: {loader.log_path}")
    relay.attach_flow(loader.server)


def _abort(server) -> None:
    """End a server the session will not use."""
    server.kill()
    if hasattr(server, "reap"):
        server.reap()
        server.release_watchdog()  # the group was killed whole


def _run(pump, relay, server, log, loader) -> int:
    stdio = pump.stdio

    def exited() -> bool:
        return pump.server_status is not None if stdio else server.wait(0) is not None

    def host_or_signal() -> bool:
        return pump.host_eof or bool(pump.signals) or pump.host_gone

    def flow_verdict() -> bool:
        return loader is not None and relay.flow is None and loader.done() and not refused

    def output_done() -> bool:
        return pump.output_closed if stdio else server.settled()

    def finish_reading() -> None:
        """Forward what the server said before it went, to the host while it reads."""
        pump.run_until(lambda: output_done() and pump.drained(), DRAIN_S)

    refused: list[tuple[int, str]] = []
    if loader is not None:
        # The flow loads once the server has said something: the start of the session costs
        # the host nothing, and the flow is there long before the agent's first call returns.
        pump.run_until(
            lambda: pump.to_host_outlet.sent > 0 or exited() or host_or_signal(), FLOW_START_S
        )
        loader.start()
    while True:
        pump.run_until(lambda: exited() or host_or_signal() or pump.output_closed or flow_verdict())
        if not flow_verdict():
            break
        if loader.failure is None:
            _attach(relay, loader, log)
        else:
            refused.append(loader.failure)
            say(loader.failure[1])
            relay.drop_flow()
            break

    deaf = False
    if pump.output_closed and not (exited() or host_or_signal() or refused):
        # The server closed its stdout: on its way out, or running on with nothing it says
        # reaching the host.
        deaf = not pump.run_until(exited, SHUTDOWN_GRACE_S)

    if exited():
        status = pump.server_status if stdio else server.wait(0)
        finish_reading()
        if relay.flow is not None:
            relay.flow.abandon()
        answered = relay.fail_pending(f"the MCP server exited (status {status}) before answering")
        note = f"; answered {answered} waiting request(s) with an error" if answered else ""
        say(f"the server exited with status {status}{note}")
    else:
        if deaf:
            answered = relay.fail_pending("the MCP server closed its output")
            note = f"; answered {answered} waiting request(s) with an error" if answered else ""
            say(f"the server closed its output but kept running{note}; ending it")
        if refused:
            pump.close_server_input(drain=False)
            server.terminate()
        elif pump.signals:
            say(f"stopping on signal {pump.signals[0]}")
            pump.close_server_input(drain=False)
            server.terminate()
        else:
            pump.close_server_input()  # the host has gone: let the server finish by itself
        if not _run_until_exit(pump, exited, server, patient=not (refused or pump.signals)):
            server.terminate()
            if not pump.run_until(exited, SHUTDOWN_GRACE_S):
                say("the server did not end on SIGTERM; killing it (SIGKILL)")
                server.kill()
                pump.run_until(exited)
        status = pump.server_status if stdio else server.wait(0)
        finish_reading()
        # The host has hung up: requests left unanswered stay so in the log, unanswered.
    if hasattr(server, "end_group"):
        server.end_group(SHUTDOWN_GRACE_S)  # whatever the server left running
    if loader is not None and relay.flow is None and not refused:
        loader.wait()  # a flow refused late still refuses the session
        if loader.failure is not None:
            refused.append(loader.failure)
            say(loader.failure[1])
        elif relay.holds_lines():
            relay.drop_flow()  # too late to extend the answers it would have: they go as they are
        else:
            _attach(relay, loader, log)  # its decisions on the session are logged all the same
    if relay.flow is not None:  # let the runs still deciding log what they decided
        deadline = time.monotonic() + DRAIN_S
        while relay.flow_busy() and time.monotonic() < deadline:
            time.sleep(0.005)
    pump.run_until(pump.drained, DRAIN_S)  # the proxy's own answers, if any
    if refused:
        if log is not None:
            log.remove()  # a refused session leaves nothing behind
        return refused[0][0]
    relay.log_context()  # the conversation's last words come after the last call
    if log is not None:
        log.close()
    return status if status is not None else EXIT_PROXY_FAILED
