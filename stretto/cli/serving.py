"""The command that serves a flow's decisions to harnesses that are not MCP hosts: serve
(stretto.offline.tcp_serve)."""

from __future__ import annotations

import argparse
import signal
import threading

from stretto.cli.options import (
    Commands,
    add_decider,
    add_oracle,
    add_threshold,
    command,
    oracle_cache,
    oracle_problem,
    say,
)
from stretto.home import Paths
from stretto.listenauth import is_loopback, no_auth_problem, split_address, token_of
from stretto.model.decide import decider_problem


def register(commands: Commands) -> None:
    serve = command(
        commands,
        "serve",
        _serve,
        summary="serve a flow's decisions over a local TCP port (one JSON query each)",
        description="Serve the flow's decisions to a harness that is not an MCP host: each "
        'connection sends one JSON line {"task_id", "messages": [τ²-bench messages ending '
        'with a tool result], "agent_model"?} and gets one JSON line back, the decision the '
        "proxy would make after that result (action, tool and arguments or reason, site, "
        "probs, and for the arbiter the model's answer and the request's key). Each query "
        'carries the token, {"token": TOKEN, ...}, TOKEN the line of the token file (made '
        "0600 when missing); a query without it is refused, as is a line over "
        "--max-request-bytes or one not whole within 30 s. The ready line on stderr names the "
        "address, the next one the token file. Listens on loopback only, unless "
        "--allow-remote. Runs until interrupted.",
        examples=[
            "stretto serve --flow retail.flow.json --listen 127.0.0.1:7600",
            "stretto serve --flow retail.flow.json --oracle replay --log answers.jsonl",
        ],
    )
    serve.add_argument("--flow", required=True, metavar="FLOW")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:0",
        metavar="ADDR",
        help="HOST:PORT to listen on, [::1]:PORT for IPv6 (%(default)s: a free port, named on "
        "stderr)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="every query must carry the token (its `token` field), the one line of FILE; a "
        "missing FILE is made, 0600, with a new random token; one other users may read or "
        "write is refused (default: HOME/serve.token)",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="ask for no token: every local user can ask the flow and spend its questions "
        "(loopback addresses only)",
    )
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen on an address other machines may reach (the token is sent in clear: a "
        "trusted network only); without it, only a loopback address is taken",
    )
    serve.add_argument(
        "--max-request-bytes",
        type=int,
        metavar="N",
        help="a longer query line is refused and its connection closed (default: 8 MiB)",
    )
    add_decider(serve, "default: the flow's arbiter, else reach if it has it, else habit")
    add_threshold(serve, "make a lookup when its score reaches T")
    serve.add_argument(
        "--max-questions",
        type=int,
        default=300,
        metavar="N",
        help="the arbiter asks at most N questions in all; then it hands back (%(default)s)",
    )
    serve.add_argument("--log", metavar="FILE", help="append every answer, with its ms")
    serve.add_argument(
        "--explore",
        type=float,
        metavar="EPSILON",
        help="take another option that binds with probability EPSILON, and say so (0: log "
        "the options, explore nothing)",
    )
    serve.add_argument(
        "--explore-seed", type=int, metavar="N", help="seed of the draws (0; needs --explore)"
    )
    add_oracle(
        serve,
        "who answers the arbiter's questions (default: the flow's arbiter's model; replay: "
        "the cache only)",
        timeout=True,
    )
    serve.add_argument(
        "--home", metavar="DIR", help="STRETTO_HOME, for the default cache and token file"
    )


def _serve(args: argparse.Namespace) -> int:
    # entry point: the decision server and the arbiter's runners, for serve only
    from stretto.offline.tcp_serve import (
        MAX_REQUEST_BYTES,
        TOKEN_FILE,
        Decisions,
        DecisionServer,
        ServeOptions,
    )
    from stretto.oracle.arbiter import load_flow

    flow = load_flow(args.flow)
    problem = (decider_problem(flow, args.decider) if args.decider else None) or oracle_problem(
        args.oracle
    )
    if args.explore is not None and not 0 <= args.explore <= 1:
        problem = f"--explore wants a probability in [0, 1], got {args.explore}"
    elif args.explore_seed is not None and args.explore is None:
        problem = "--explore-seed needs --explore"
    elif args.max_questions < 0 or args.oracle_timeout <= 0:
        problem = "--max-questions wants a count, --oracle-timeout milliseconds above 0"
    elif args.max_request_bytes is not None and args.max_request_bytes < 1:
        problem = "--max-request-bytes wants a size in bytes above 0"
    elif args.no_auth and args.token_file:
        problem = "--no-auth and --token-file: choose one"
    if problem:
        say(problem)
        return 2
    try:
        address = split_address(args.listen, "127.0.0.1:7600")
    except ValueError as exc:
        say(str(exc))
        return 2
    problem = listen_problem(address[0], args.no_auth, args.allow_remote)
    if problem:
        say(problem)
        return 2
    token = file = None
    made = False
    if not args.no_auth:
        try:
            token, file, made = token_of(
                args.token_file, Paths.at(args.home).home / TOKEN_FILE, "--token-file"
            )
        except ValueError as exc:
            say(str(exc))
            return 2
    options = ServeOptions(
        decider=args.decider,
        threshold=args.threshold,
        max_questions=args.max_questions,
        explore=args.explore,
        explore_seed=args.explore_seed or 0,
        oracle=args.oracle,
        cache=oracle_cache(args),
        base_url=args.oracle_base_url,
        oracle_log=args.oracle_log,
        timeout_ms=args.oracle_timeout,
        log=args.log,
    )
    decisions = Decisions(flow, options)
    try:
        server = DecisionServer(
            address, decisions, token, args.max_request_bytes or MAX_REQUEST_BYTES
        )
    except OSError as exc:
        say(f"cannot listen on {args.listen}: {exc.strerror or exc}")
        return 1
    stopped = threading.Event()

    def stop(signum, _frame) -> None:
        stopped.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    say(f"flow ready on {server.address} ({decisions.decider.kind} decider)")
    if file is not None:
        new = " (made now, 0600)" if made else ""
        say(f'queries carry "token": TOKEN, TOKEN the line in {file}{new}')
    else:
        say("--no-auth: no token is asked: every local user can ask the flow")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        decisions.close()
    say(f"stopped after {decisions.questions} questions")
    return 0


def listen_problem(host: str, no_auth: bool, allow_remote: bool) -> str | None:
    """Why `stretto serve` may not listen on `host` so, if it may not: without a token only on
    loopback (as the proxy's --listen), and off loopback only when asked (--allow-remote)."""
    if is_loopback(host):
        return None
    if no_auth:
        return no_auth_problem(host, "--token-file")
    if not allow_remote:
        return (
            f"--listen {host}: not a loopback address, so other machines could ask the flow "
            "and spend its questions; give --allow-remote to serve them (with the token)"
        )
    return None
