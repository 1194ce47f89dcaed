"""`--flow FILE` loaded beside the session, never before its first bytes.

Reading and validating a flow imports jsonschema, jsonpath-ng and the serving model: ~0.1 s
here, more than the whole rest of the proxy's start-up. So it runs on a thread of its own,
started once the server has said its first line (proxy.session): the session's start costs the
host nothing, and the flow is there long before the agent's first call comes back. The relay
keeps what the flow must be shown until it is there (proxy.relay). A flow that fails
validation still ends the session with exit 2 and leaves nothing recorded — a moment after
the start rather than before it.

The loader holds Python's lock while it works; a short switch interval meanwhile lets the
forwarding thread take it back within half a millisecond of its bytes arriving.
"""

from __future__ import annotations

import _thread
import os
import sys

from proxy.options import EXIT_PROXY_FAILED, EXIT_USAGE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from proxy.serve.flowserver import FlowServer

SWITCH_S = 0.0005  # while loading: how long the loader may keep the forwarding thread waiting


def check_flow(args) -> str | None:
    """Why `args.flow` cannot be served, or None (`--listen` asks before it listens: each
    session's loader reads the flow again, and a bad one would refuse every session)."""
    # proxy start-up: this module loads with the forwarding; the flow's model when it is read
    from stretto.model.flow import FlowError, load_flow

    try:
        flow = load_flow(os.path.expanduser(args.flow))
    except FlowError as exc:
        return str(exc)
    from proxy.serve.arbiter import serving_problem  # proxy start-up: the serving model, as above

    return serving_problem(flow, args.flow_decider, args.oracle)


class FlowLoader:
    """Loads the flow and builds its FlowServer on a thread; `done()` says when it is over,
    then `server` is the FlowServer, or `failure` is (exit status, message)."""

    def __init__(self, args, relay, send, log, wake) -> None:
        self.args, self._relay, self._send, self._log, self._wake = args, relay, send, log, wake
        self.server: FlowServer | None = None
        self.log_path = ""
        self.failure: tuple[int, str] | None = None
        self._finished = _thread.allocate_lock()
        self._finished.acquire()

    def start(self) -> None:
        _thread.start_new_thread(self._load, ())

    def done(self) -> bool:
        return not self._finished.locked()

    def wait(self) -> None:
        with self._finished:
            pass

    def _load(self) -> None:
        before = sys.getswitchinterval()
        sys.setswitchinterval(min(before, SWITCH_S))
        try:
            self._build()
        except Exception as exc:  # noqa: BLE001 - said, and the session ends
            self.failure = (EXIT_PROXY_FAILED, f"cannot serve the flow {self.args.flow}: {exc}")
        finally:
            sys.setswitchinterval(before)
            self._finished.release()
            self._wake()

    def _build(self) -> None:
        # proxy start-up: the flow's model loads here, on the loader's thread
        from stretto.model.flow import FlowError, load_flow

        args, log = self.args, self._log
        try:
            flow = load_flow(os.path.expanduser(args.flow))
        except FlowError as exc:
            self.failure = (EXIT_USAGE, str(exc))
            return
        # proxy start-up: the serving model, on the loader's thread too
        from pathlib import Path

        from proxy.serve.arbiter import serving_arbiter, serving_problem
        from proxy.serve.flowserver import FlowServer
        from stretto.logs.logreader import flow_log_of  # loaded with flowserver's episode
        from stretto.model.surprise import gate_from_flow

        problem = serving_problem(flow, args.flow_decider, args.oracle)
        if problem:
            self.failure = (EXIT_USAGE, problem)
            return

        tools = None
        if args.flow_tools:
            tools = {t.strip() for spec in args.flow_tools for t in spec.split(",") if t.strip()}
        log_path = args.flow_log or str(flow_log_of(Path(log.path)))
        record = log.record if log is not None else (lambda sender, line, parsed: None)
        session = log.session if log is not None else ""
        try:
            arbiter = serving_arbiter(
                flow,
                decider=args.flow_decider,
                oracle=args.oracle,
                cache=args.oracle_cache,
                base_url=args.oracle_base_url,
                log=args.oracle_log,
                timeout_ms=args.oracle_timeout,
                questions=args.flow_questions,
                session=session,
                task=args.task_id,
            )
            self.server = FlowServer(
                flow,
                decider=args.flow_decider,
                threshold=args.flow_threshold,
                per_call=args.flow_per_call,
                per_session=args.flow_per_session,
                tools=tools,
                log_path=os.path.expanduser(log_path),
                shadow=args.flow_shadow,
                budget_chars=args.flow_budget,
                send=self._send,
                to_host=self._relay.flow_to_host,
                record=record,
                explore=args.flow_explore,
                explore_seed=args.flow_explore_seed,
                session=session,
                arbiter=arbiter,
                server_name=args.server_name,
                gate=gate_from_flow(flow, args.flow_surprise),
            )
        except OSError as exc:
            self.failure = (EXIT_PROXY_FAILED, f"cannot open the flow log {log_path}: {exc}")
            return
        except (ValueError, KeyError) as exc:
            self.failure = (EXIT_USAGE, f"{args.flow}: cannot be served: {exc}")
            return
        self.log_path = log_path
