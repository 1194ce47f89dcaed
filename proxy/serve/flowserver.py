"""`--flow`: after each of the agent's calls, make the lookups the flow expects, and hand the
agent its own result with theirs appended (../shared/spec/algorithms.md §6.5).

The relay tells this module what passes (the host's calls, the conversation, the server's
answers); it feeds them to a SessionView (stretto.model.session: the step names and binding
state the Decider reads, the same view stretto.offline.walk rebuilds from a recorded log) and
never re-reads its own log. A run
holds the agent's answer, decides with stretto.model.decide, sends lookups with ids of its own
(`stretto-<n>`), and writes one line per decision and one per run to the flow log.

With a surprise gate (the flow's `surprise`, or `--flow-surprise T`) each of the agent's steps
after a result is scored under the habit as stretto.model.surprise says; once the gate closes,
every later result of the agent's is forwarded as it is, with one hand-back line in the flow log
giving the gate's reason.

With the arbiter decider (the default for a flow with an arbiter) each decision asks a
System-One model (proxy.serve.arbiter opens it: stretto.oracle, imported only then). The model never
holds the agent's answer past `--oracle-timeout`: a run's questions share that much time, each
is asked on a thread and given up when the time is spent, and the decision hands back with
`the System-One model failed: …` — the agent then gets the server's bytes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from proxy.record.recorder import parse_json_line
from proxy.serve.arbiter import ServingArbiter
from proxy.serve.guard import flow_refusal, schema_refusal, server_refusal
from proxy.serve.splice import SpliceError, append_content, encoded, lookups_item
from proxy.wire import id_key, messages
from stretto.logs.episode import context_message, response_outcome
from stretto.logs.toollist import ToolInfo, tools_from_result
from stretto.model.decide import Decider, SplitMix64
from stretto.model.decide import explore as explore_options
from stretto.model.program import STANDARD_PROGRAM, Execute, FlowDistributions, run
from stretto.model.session import SessionView
from stretto.model.surprise import Gate, habit_prior, step_surprise
from stretto.vocabulary import fnv1a64

PATIENCE_S = 60.0  # a lookup (or the proxy's own tools/list) not answered by then is abandoned
LIST_PAGES = 50  # the proxy's own tools/list follows nextCursor this many pages at most
# over stdio a proxy sees one server: another server's lookup is logged, as a shadow decision
OTHER_SERVER = "another server's lookup (over stdio each proxy makes its own server's only)"


class _Waiter:
    """A request of the proxy's own waiting for its answer: a lookup's (failed, text) once it
    came, None if it never did; the proxy's tools/list (`tool` None) keeps the answer."""

    def __init__(self, tool: str | None) -> None:
        self.tool = tool
        self.done = threading.Event()
        self.answer: tuple[bool, str] | None = None
        self.message: dict | None = None


class FlowServer:
    def __init__(
        self,
        flow: dict,
        *,
        decider: str | None,
        threshold: float | None,
        per_call: int,
        per_session: int,
        tools: set[str] | None,
        log_path: str,
        shadow: bool,
        budget_chars: int,
        send,
        to_host,
        record,
        explore: float = 0.0,
        explore_seed: int = 0,
        session: str = "",
        arbiter: ServingArbiter | None = None,
        server_name: str | None = None,
        gate: Gate | None = None,
    ) -> None:
        self.flow = flow
        # A flow learned across servers names tools `server::tool`: this proxy's server's by
        # its --server-name. Its own lookups it makes; another server's it only logs (shadow).
        named = server_name is not None and any(
            t.startswith(f"{server_name}::") for t in flow["manifest"]["tools"]
        )
        self.prefix = f"{server_name}::" if named else ""
        self.decider = Decider(flow, decider, threshold)
        if self.decider.kind == "arbiter" and arbiter is None:
            raise ValueError("the arbiter decider needs a System-One model (serving_arbiter)")
        self.arbiter = arbiter if self.decider.kind == "arbiter" else None
        self.dists = FlowDistributions(flow)
        self.per_call, self.per_session = per_call, per_session
        self.allowed = tools
        self.shadow = shadow
        self.budget = budget_chars
        self.epsilon, self.seed, self.session = explore, explore_seed, session
        self.runs = 0
        self._send, self._to_host, self._record = send, to_host, record
        # only results a binding can read from are kept (as the offline walk keeps them)
        self.session_view = SessionView(
            self.decider.rules.source_tools(),
            transcript=self.arbiter.conversation if self.arbiter is not None else None,
        )
        self.lock = threading.RLock()
        self.agent_calls: dict[str, tuple[object, str, dict]] = {}  # id -> id, tool, args
        self.list_requests: set[str] = set()
        # what the server listed in this session (the host's tools/list or the proxy's own)
        self.listed: dict[str, ToolInfo] | None = None
        self.list_asked = False  # the proxy asked the server itself
        self.session_lookups = 0
        self.next_id = 1
        self.waiting: dict[str, _Waiter] = {}  # lookup id -> its waiter
        self.running = False
        self.warned: set[str] = set()
        self.gate = gate
        # the site after the last result (history, (tool, failed)), until the agent's next step
        self._gate_site: tuple[list[str], tuple[str, bool]] | None = None
        self._log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    # what passes through the relay ----------------------------------------------------------

    def from_host(self, value) -> None:
        with self.lock:
            for message in messages(value):
                method, request_id = message.get("method"), message.get("id")
                if request_id is None:
                    continue
                raw = message.get("params")
                params: dict = raw if isinstance(raw, dict) else {}
                if method == "tools/call" and isinstance(params.get("name"), str):
                    arguments = params.get("arguments")
                    arguments = arguments if isinstance(arguments, dict) else {}
                    key = id_key(request_id)
                    name = self.prefix + params["name"]
                    self._agent_step(name)
                    self.agent_calls[key] = (request_id, name, arguments)
                    self.session_view.sent(name, arguments, key)
                elif method == "tools/list":
                    self.list_requests.add(id_key(request_id))

    def said(self, value) -> None:
        role, text = context_message(value)  # read as the episode reader reads it
        with self.lock:
            if role in ("user", "assistant"):
                self._agent_step(None)  # a reply, or the user: the step is `respond`
            if role == "user":
                self.session_view.user_said(text)
            elif role == "assistant":
                self.session_view.assistant_replied(text)

    def from_server(self, value, line: bytes) -> bool:
        """True when the line is the flow's: an answer to the proxy's own request, or an
        agent's answer held for a run (the run sends it on); False to forward it as it is.
        Whatever goes wrong here, the line is forwarded: the host never loses an answer."""
        try:
            run = self._take(value, line)
        except Exception as exc:  # noqa: BLE001 - the line goes through as it is
            self._failed(None, f"the flow failed on a server line: {exc!r}")
            return False
        if run is None:
            return False
        if run is True:
            return True
        try:
            threading.Thread(target=self._run, args=run, name="flow-run", daemon=True).start()
        except Exception as exc:  # noqa: BLE001 - e.g. no thread to be had: forward the line
            with self.lock:
                self.running = False
            self._failed(run[0], f"the flow could not start a run: {exc!r}")
            return False
        return True

    def _take(self, value, line: bytes):
        """from_server's decision: None (forward), True (the flow's own answer), or the
        arguments of a run to start on the agent's answer."""
        if not isinstance(value, dict) or "id" not in value:
            if (
                isinstance(value, dict)
                and value.get("method") == "notifications/tools/list_changed"
            ):
                with self.lock:  # verified again before the next lookup
                    self.listed, self.list_asked = None, False
            return None
        if "method" in value or ("result" not in value and "error" not in value):
            return None  # not an answer the episode reader would take either
        key = id_key(value["id"])
        with self.lock:
            waiter = self.waiting.pop(key, None)
            if waiter is not None:
                if waiter.tool is None:  # the proxy's own tools/list
                    waiter.message = value
                    waiter.done.set()
                    return True
                # taken into the view here, in the order the log records the answers
                failed, text = response_outcome(value)
                self.session_view.came_back(waiter.tool, failed, text, key)
                self._gate_site = (list(self.session_view.history), (waiter.tool, failed))
                waiter.answer = (failed, text)
                waiter.done.set()
                return True
            if key in self.list_requests and isinstance(value.get("result"), dict):
                self.list_requests.discard(key)
                self._note_tools(value["result"])
                return None
            call = self.agent_calls.pop(key, None)
            if call is None:
                return None
            request_id, tool, _ = call
            failed, content = response_outcome(value)
            self.session_view.came_back(tool, failed, content, key)
            self._gate_site = (list(self.session_view.history), (tool, failed))
            if "result" not in value or self.running or self.session_lookups >= self.per_session:
                return None
            if self.gate is not None and self.gate.closed:
                self._write_log(self._gate_line(request_id))
                return None
            self.running = True
        return (request_id, tool, failed, value, line)

    def _note_tools(self, result: dict) -> None:
        """Take in one page of a tools/list answer (under the lock)."""
        listed = self.listed or {}
        for info in tools_from_result(result):
            listed[self.prefix + info.name] = info  # named as the flow names them
        self.listed = listed

    # the surprise gate ---------------------------------------------------------------------

    def _agent_step(self, step: str | None) -> None:
        """The agent's next step after a result (a call's tool, or None: it replied or the
        user spoke): scored at the site of that result, as stretto.model.surprise scores a
        recorded session. Holding the lock."""
        site, self._gate_site = self._gate_site, None
        if self.gate is None or site is None or self.gate.closed:
            return
        probs = habit_prior(self.decider, *site)
        if probs:  # a site that offers no lookup is not scored: the flow hands back there
            self.gate.observe(step_surprise(probs, step))

    def _gate_line(self, request_id) -> dict:
        """The hand-back line of a result the flow does not run after: the gate is closed."""
        gate = self.gate
        assert gate is not None and gate.closed_at is not None
        return {
            "address": "decide#0",
            "after": request_id,
            "decider": self.decider.kind,
            "site": None,  # the flow no longer decides at any site
            "probs": {},
            "prob": None,
            "binding": None,
            "shadow": self.shadow,
            "action": "hand_back",
            "reason": gate.reason,
            "gate": {
                "threshold": gate.threshold,
                "window": gate.window,
                "closed_at": gate.closed_at,
                "mean": gate.closing_mean,
            },
        }

    # a run -----------------------------------------------------------------------------------

    def _run(self, request_id, tool: str, failed: bool, answer: dict, line: bytes) -> None:
        made: list[tuple[str, dict, bool, str]] = []
        with self.lock:
            self.runs += 1
            run_index = self.runs
        pending: dict[str, tuple[str, dict]] = {}  # outcome address -> the lookup
        arbiter = self.arbiter
        asking = [0.0]  # seconds this run's questions have taken
        try:

            def decide(address: str, prev: int, prev_failed: bool) -> int:
                if len(made) >= self.per_call or self.session_lookups >= self.per_session:
                    return 0
                if arbiter is not None and arbiter.asked >= arbiter.questions:
                    return 0  # the session's questions are spent: hand back, no line
                last = self.dists.tools[prev] if prev < len(self.dists.tools) else None
                if arbiter is None:
                    with self.lock:
                        decision = self.decider.decide(
                            list(self.session_view.history),
                            (last, bool(prev_failed)) if last else None,
                            self.session_view.state,
                            every_option=self.epsilon > 0,
                        )
                else:
                    # the model is asked on a copy of the session, not under the lock: what
                    # else passes meanwhile is not held up
                    with self.lock:
                        view = self.session_view.fork()
                    within = max(0.0, arbiter.timeout_s - asking[0])
                    asked_at = time.monotonic()
                    decision = self.decider.decide(
                        view.history,
                        (last, bool(prev_failed)) if last else None,
                        view.state,
                        every_option=self.epsilon > 0,
                        judge=arbiter.judge.on(view, within=within),
                    )
                    asking[0] += time.monotonic() - asked_at
                if arbiter is not None and decision.asked:
                    arbiter.asked += 1
                exploration = None
                if self.epsilon > 0 and decision.site is not None:
                    # seeded by the session, the run and the address: reproducible draws
                    rng = SplitMix64(self.seed ^ fnv1a64(f"{self.session}/{run_index}/{address}"))
                    decision, exploration = explore_options(decision, self.epsilon, rng)
                entry = {
                    "address": address,
                    "after": request_id,
                    "decider": self.decider.kind,
                    "site": decision.site,
                    "probs": decision.probs,
                    "prob": decision.prob,
                    "binding": decision.binding,
                    # --flow-shadow, or a site the flow's promotion record does not promote
                    "shadow": self.shadow or decision.shadow,
                    "explore": exploration,
                }
                if decision.asked:  # the arbiter's: what the model said, the request's key
                    entry.update(
                        oracle=decision.oracle, predicates=decision.predicates, key=decision.key
                    )
                take, tool = False, decision.tool
                if decision.action == "lookup" and tool is not None:
                    entry.update(action="lookup", tool=tool, arguments=decision.arguments)
                    if decision.shadow:
                        entry["withheld"] = "the site is not promoted"
                    elif self.prefix and not tool.startswith(self.prefix):
                        entry.update(shadow=True, withheld=OTHER_SERVER)
                    elif not self.shadow:
                        refusal = self._refusal(tool)
                        unfit = None if refusal else self._unfit(tool, decision.arguments or {})
                        if refusal:
                            entry["withheld"] = refusal
                        elif unfit:  # a value the server's own schema refuses is not used
                            del entry["tool"], entry["arguments"]
                            entry.update(action="hand_back", reason=f"{tool}: {unfit}")
                        take = refusal is None and unfit is None
                else:
                    entry.update(action="hand_back", reason=decision.reason)
                self._write_log(entry)
                if not take or tool is None:
                    return 0
                pending[address.replace("decide", "outcome")] = (tool, decision.arguments or {})
                return self.dists.tool_id(tool)

            def look_up(address: str, tool_id: int) -> bool:
                tool, arguments = pending[address]
                ok, text = self._look_up(tool, arguments)
                made.append((tool, arguments, ok, text))
                return ok

            started = time.monotonic()
            max_lookups = 1 if self.shadow else self.per_call
            _, trace = run(
                STANDARD_PROGRAM,
                self.dists,
                Execute(decide, look_up),
                call=tool,
                call_failed=failed,
                max_lookups=max_lookups,
            )
            surprise = -sum(lp for _, _, lp in trace)
            self._write_log(
                {
                    "after": request_id,
                    "ms": int((time.monotonic() - started) * 1000),
                    "run": {
                        "call": tool,
                        "failed": failed,
                        "max_lookups": max_lookups,
                        "sites": [[a, v, lp] for a, v, lp in trace],
                        "surprise": 0.0 if surprise == 0 else surprise,
                    },
                }
            )
        except Exception as exc:  # noqa: BLE001 - a flow must never lose the agent's answer
            self._failed(request_id, f"the flow failed after {tool}: {exc!r}")
        finally:
            with self.lock:
                self.running = False
            self._hand_over(request_id, answer, line, made)

    def _hand_over(self, request_id, answer: dict, line: bytes, made: list) -> None:
        """Send the host the agent's answer: extended with the lookups if any were made and
        that works, else the server's own line — the very object the run was given (the
        relay's flowfeed knows it by identity)."""
        extended = None
        if made:
            try:
                extended = self._extended(answer, line, made)
            except Exception as exc:  # noqa: BLE001 - the server's bytes go through as they are
                self._failed(request_id, f"the lookups could not be appended: {exc}")
        if extended is None:
            self._to_host(line)
            return
        try:
            self._record("proxy", extended, parse_json_line(extended))
        finally:
            self._to_host(extended)

    def _failed(self, request_id, why: str) -> None:
        """Say on stderr and in the flow log that the flow failed, and why."""
        print(f"stretto-proxy: {why}", file=sys.stderr, flush=True)
        try:
            self._write_log({"after": request_id, "failed": why})
        except OSError:
            pass  # the flow log is out of reach; stderr said it

    def _refusal(self, tool: str) -> str | None:
        """Why the proxy will not make this lookup, or None (proxy.serve.guard); if the host never
        listed the tools, the proxy asks the server first."""
        refusal = flow_refusal(self.flow, self.allowed, tool) or server_refusal(
            self.flow, self.allowed, self._listing(), tool
        )
        if refusal == "its input contract changed" and tool not in self.warned:
            self.warned.add(tool)
            pinned, now = self.flow["contracts"][tool], (self.listed or {})[tool].contract
            print(
                f"stretto-proxy: {tool}'s input contract changed ({pinned!r} in the flow, "
                f"{now!r} now); the agent makes that call itself",
                file=sys.stderr,
                flush=True,
            )
        return refusal

    def _listing(self) -> dict[str, ToolInfo] | None:
        """What the server listed in this session; if nothing yet, the proxy asks it once
        (with ids of its own, following nextCursor), before its first lookup."""
        with self.lock:
            if self.listed is not None or self.list_asked:
                return self.listed
            self.list_asked = True
        cursor: str | None = None
        tools: dict[str, ToolInfo] = {}
        for _ in range(LIST_PAGES):
            params = {"cursor": cursor} if cursor is not None else {}
            message = self._ask("tools/list", params, None)
            result = message.get("result") if message is not None else None
            if not isinstance(result, dict):
                return None
            tools.update((self.prefix + info.name, info) for info in tools_from_result(result))
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str):
                break
        else:
            return None  # a listing without end is no listing
        with self.lock:
            self.listed = {**tools, **(self.listed or {})}
            return self.listed

    def _unfit(self, tool: str, arguments: dict) -> str | None:
        """Why the bound arguments do not satisfy the tool's inputSchema as listed, or None."""
        info = (self.listed or {}).get(tool)
        return schema_refusal(info.input_schema if info else None, arguments)

    def _look_up(self, tool: str, arguments: dict) -> tuple[bool, str]:
        # the server knows its tool by its own name, without the flow's `server::`
        name = tool.removeprefix(self.prefix)
        message = self._ask("tools/call", {"name": name, "arguments": arguments}, tool)
        if message is None:
            return False, "(no answer in time; abandoned)"
        failed, text = message["answer"]
        return not failed, text

    def _ask(self, method: str, params: dict, tool: str | None) -> dict | None:
        """Send the server a request with an id of the proxy's own and wait for its answer:
        the message (a lookup's as {"answer": (failed, text)}), None if none came."""
        with self.lock:
            own_id = f"stretto-{self.next_id}"
            self.next_id += 1
            waiter = _Waiter(tool)
            self.waiting[id_key(own_id)] = waiter
            if tool is not None:
                self.session_view.sent(tool, params["arguments"], id_key(own_id))
                self.session_lookups += 1
        request = {"jsonrpc": "2.0", "id": own_id, "method": method, "params": params}
        line = encoded(request, separators=(",", ":")) + b"\n"
        self._record("proxy", line, parse_json_line(line))
        self._send(line)
        if not waiter.done.wait(PATIENCE_S):
            with self.lock:
                self.waiting.pop(id_key(own_id), None)
            return None
        if tool is not None:  # a lookup: what the view took in, or the server went away
            return {"answer": waiter.answer or (True, "(the server went away before answering)")}
        return waiter.message

    def _extended(self, answer: dict, line: bytes, made: list) -> bytes:
        """The server's answer with the lookups' item added, its bytes as they are."""
        if not isinstance(answer.get("result"), dict):
            raise SpliceError("the answer's `result` is not an object")
        shown = [
            (tool.removeprefix(self.prefix), *rest) for tool, *rest in made
        ]  # as the agent knows them
        return append_content(line, lookups_item(shown, self.budget))

    def _write_log(self, entry: dict) -> None:
        clean = {k: v for k, v in entry.items() if v is not None or k in ("binding", "prob")}
        os.write(self._log, encoded(clean, sort_keys=True) + b"\n")

    def abandon(self) -> None:
        """The server is gone: release every lookup still waiting for it."""
        with self.lock:
            waiting, self.waiting = list(self.waiting.values()), {}
        for waiter in waiting:
            waiter.done.set()

    def close(self) -> None:
        os.close(self._log)
