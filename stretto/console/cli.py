"""`stretto-console`: serve the console on the data directory.

stretto-console [--data DIR] [--listen ADDR] [--token TOKEN | --no-auth] [--read-only] [--open]
                [--drift-max-calls N]
stretto-console healthcheck [--listen ADDR]
"""

from __future__ import annotations

import argparse
import errno
import os
import secrets
import shlex
import socket
import sys
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path

import uvicorn

from stretto import __version__
from stretto.console import adapter
from stretto.console.files import private_dir
from stretto.console.jobs import KINDS
from stretto.console.views.driftruns import DRIFT_MAX_CALLS
from stretto.httpguard import BACKLOG, guarded, limits_for, raise_fd_limit
from stretto.listenauth import family_of, no_auth_problem, split_address, url_host
from stretto.usage import Parser, parse

DEFAULT_LISTEN = "127.0.0.1:7878"


class UsageError(ValueError):
    pass


def split_listen(listen: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) -> (host, port), as every stretto server reads --listen
    (stretto.listenauth); the console needs a port of its own to show in its address."""
    try:
        host, port = split_address(listen, DEFAULT_LISTEN)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if port == 0:
        raise UsageError(f"--listen {listen!r}: expected a port from 1 to 65535")
    return host, port


def reachable(host: str) -> str:
    """Where this machine reaches a console listening on `host`: loopback for a wildcard."""
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host


def url_of(host: str, port: int, token: str | None) -> str:
    shown = url_host(reachable(host))
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="stretto-console",
        description="A local web app over the data directory: sessions and their timelines, "
        f"flows as graphs with a live threshold, flow diffs, and the jobs ({', '.join(KINDS)}). "
        "docs/console.md tells more.",
    )
    parser.add_argument(
        "-V", "--version", action="version", version=f"stretto-console {__version__}"
    )
    parser.add_argument(
        "--data", metavar="DIR", help="the data directory (default: $STRETTO_HOME, else ~/.stretto)"
    )
    parser.add_argument(
        "--listen",
        metavar="ADDR",
        help=f"where to listen (default: $STRETTO_CONSOLE_LISTEN, else {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="the access token (default: $STRETTO_CONSOLE_TOKEN, else 32 random bytes, "
        "printed in the URL)",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="no token (loopback addresses only; then only Host localhost, 127.0.0.1 or [::1])",
    )
    parser.add_argument("--read-only", action="store_true", help="refuse every change (403)")
    parser.add_argument(
        "--open", action="store_true", help="open the console in the browser ($BROWSER)"
    )
    parser.add_argument(
        "--stretto",
        metavar="COMMAND",
        help="the stretto command jobs run (default: this Python's `-m stretto`)",
    )
    parser.add_argument(
        "--drift-max-calls",
        metavar="N",
        type=int,
        help="a flow's drift is computed when its domain's sessions hold at most N calls, "
        f"else said too large (default: {DRIFT_MAX_CALLS:,})",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    health = commands.add_parser(
        "healthcheck",
        help="exit 0 if a console answers at ADDR",
        description="GET /api/health at ADDR; exit 0 if it answers, else 1.",
    )
    health.add_argument(
        "--listen",
        dest="health_listen",
        metavar="ADDR",
        help=f"(default: $STRETTO_CONSOLE_LISTEN, else {DEFAULT_LISTEN})",
    )
    return parser


def healthcheck(listen: str) -> int:
    host, port = split_listen(listen)
    shown = url_host(reachable(host))
    try:
        with urllib.request.urlopen(f"http://{shown}:{port}/api/health", timeout=5) as answer:
            ok = answer.status == 200
    except (urllib.error.URLError, OSError) as exc:
        print(f"stretto-console: nothing answers at {listen} ({exc})", file=sys.stderr)
        return 1
    print(f"stretto-console: {listen} answers" if ok else f"stretto-console: {listen} is unwell")
    return 0 if ok else 1


def server_for(app, host: str, port: int):
    """uvicorn's server for the console, its connections bounded (stretto.httpguard: a
    request's headers within 10 s; at most 512 connections, 256 from one address, as the
    process's descriptors allow; beyond, 503)."""

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # SIGTERM or Ctrl-C: the open event streams end now (uvicorn would wait for them
            # the graceful timeout, then cancel them with a traceback) and drift stops
            console = getattr(getattr(app, "state", None), "console", None)
            if console is not None:
                console.stop()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=3,
        http=guarded(limits_for(raise_fd_limit())),
        ws="none",
        backlog=BACKLOG,
    )
    return Server(config)


def bind(host: str, port: int, listen: str) -> socket.socket | str:
    """The listening socket at host:port, or why not in one line (a port in use is said so,
    with another to try)."""
    try:
        return socket.create_server((host, port), family=family_of(host))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            shown = url_host(host)
            other = port + 1 if port < 65535 else 7879
            return (
                f"cannot listen on {listen}: the port {port} is in use (another console, or "
                f"another program); give another with --listen {shown}:{other}"
            )
        return f"cannot listen on {listen}: {exc.strerror or exc}"


def main(argv: list[str] | None = None) -> int:
    args = parse(build_parser(), sys.argv[1:] if argv is None else argv)
    listen = os.environ.get("STRETTO_CONSOLE_LISTEN") or DEFAULT_LISTEN
    try:
        if args.command == "healthcheck":
            return healthcheck(args.health_listen or args.listen or listen)
        listen = args.listen or listen
        host, port = split_listen(listen)
        if args.drift_max_calls is not None and args.drift_max_calls < 0:
            raise UsageError(f"--drift-max-calls {args.drift_max_calls}: expected 0 or more")
        if args.no_auth and args.token:
            raise UsageError("--no-auth and --token: choose one")
        problem = no_auth_problem(host, "--token") if args.no_auth else None
        if problem:
            raise UsageError(problem)
    except UsageError as exc:
        print(f"stretto-console: {exc}", file=sys.stderr)
        return 2
    token = (
        None
        if args.no_auth
        else (args.token or os.environ.get("STRETTO_CONSOLE_TOKEN") or secrets.token_hex(32))
    )
    data = Path(args.data).expanduser() if args.data else adapter.default_home()
    try:
        private_dir(data)
    except OSError as exc:
        print(f"stretto-console: {data}: cannot create it ({exc.strerror or exc})", file=sys.stderr)
        return 1
    # entry point: only serving (not --help, not healthcheck) loads the app and its state
    from stretto.console.app import create_app
    from stretto.console.state import Options

    options = Options(
        data=data,
        listen=listen,
        token=token,
        read_only=args.read_only,
        stretto=shlex.split(args.stretto) if args.stretto else None,
        drift_max_calls=DRIFT_MAX_CALLS if args.drift_max_calls is None else args.drift_max_calls,
    )
    sock = bind(host, port, listen)  # before anything is said to be there
    if isinstance(sock, str):
        print(f"stretto-console: {sock}", file=sys.stderr)
        return 1
    app = create_app(options)
    url = url_of(host, port, token)
    mode = " (read-only)" if args.read_only else ""
    print(f"stretto-console: {data}{mode} at {url}", flush=True)
    if args.open:
        webbrowser.open(url)
    server = server_for(app, host, port)
    try:
        with sock:
            server.run(sockets=[sock])
    except (OSError, SystemExit) as exc:
        if isinstance(exc, SystemExit) and not exc.code:
            return 0
        print(f"stretto-console: stopped serving on {listen} ({exc})", file=sys.stderr)
        return 1
    if not server.started:
        print(f"stretto-console: could not start serving on {listen}", file=sys.stderr)
        return 1
    return 0
