"""`stretto-proxy [options] -- <server command...>`: a recording MCP proxy on stdio.

Kept light on purpose: the host waits for this process before its first message. Until the
server is started and the first bytes move, the proxy imports nothing the interpreter has not
already loaded but `select` and its own small modules (tests/proxy/test_startup.py holds the
list); the flow, the HTTP client and `json`'s error messages come later, when they are needed.
The session itself, started and run, is proxy.session's.
"""

from __future__ import annotations

import os
import sys
import time

from proxy.options import EXIT_USAGE, parse_args
from proxy.session import open_session, say


def main(argv: list[str] | None = None) -> int:
    """Run the proxy as the command line asks; the exit status (the server's, or the proxy's
    own: proxy.options' EXIT_*)."""
    started, started_ns = time.time(), time.monotonic_ns()
    args, command = parse_args(sys.argv[1:] if argv is None else argv)

    if args.flow:  # a flow that is not there is refused before anything starts
        flow_path = os.path.expanduser(args.flow)
        try:
            open(flow_path, "rb").close()  # noqa: SIM115
        except OSError as exc:
            say(f"{flow_path}: cannot read: {exc.strerror or exc}")
            return EXIT_USAGE

    if args.listen:  # hosts over HTTP: a session like this one per MCP session
        from proxy.listen.endpoint import (
            serve,  # entry point: only --listen loads uvicorn, starlette
        )

        return serve(args, command)

    session = open_session(args, command, started, started_ns)
    if isinstance(session, tuple):
        return session[0]
    session.pump.catch_signals()
    return session.run()


if __name__ == "__main__":
    sys.exit(main())
