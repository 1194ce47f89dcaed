"""What serving a flow costs the proxy: the time it spends deciding after each agent call.

A flow of 30 tools (counts learned by warehouse.counts.learn from synthetic sessions; every
read binds its `id` from earlier results) is served over sessions of 200 agent calls. After
each call, the proxy's own run is timed — stretto.model.program with the Execute handler,
the decider (stretto.model.decide) and the binding (stretto.model.binding), as
proxy/serve/flowserver.py runs them — with every lookup answered at once from a canned
result, so the server's time is excluded. The baseline, in the same run: the proxy's plain
forwarding of the same call (its request and its answer through proxy.relay.Relay, recording
on). Prints p50 and p99 of both and the ratio. Goal: p50 under 1 ms.

With --arbiter, the same sessions are served by the arbiter decider (the flow given an
arbiter of fixed weights): first asking a live oracle — `simulate://habit` (seeded draws, no
model), and `openai://` against a local stand-in of an OpenAI-compatible server that answers
at once (so what is timed is our side: the question, HTTP, parsing, the cache write; never a
model's thinking) — then the same decisions again with every answer in the cache (`replay`).
The cached run is held to the same goal; for the live runs the added time per decision over
the cached one is printed.

    .venv/bin/python bench/decide.py [--sessions 20] [--calls 200] [--arbiter]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.record.recorder import SessionLog  # noqa: E402
from proxy.relay import Relay  # noqa: E402
from stretto.model.binding import SessionState  # noqa: E402
from stretto.model.decide import Decider  # noqa: E402
from stretto.model.program import STANDARD_PROGRAM, Execute, FlowDistributions, run  # noqa: E402
from stretto.model.session import SessionView  # noqa: E402

TOOLS = [f"tool_{i:02d}" for i in range(30)]
KINDS = {t: ("write" if i % 6 == 0 else "read") for i, t in enumerate(TOOLS)}


def next_tool(rng: random.Random, tool: str | None) -> str:
    """A skewed chain: each tool is mostly followed by one of two others."""
    if tool is None or rng.random() < 0.2:
        return rng.choice(TOOLS)
    i = TOOLS.index(tool)
    return TOOLS[(i + 1) % 30] if rng.random() < 0.6 else TOOLS[(i + 7) % 30]


def result_for(rng: random.Random, tool: str) -> str:
    return json.dumps(
        {
            "items": [
                {"id": f"{tool}-{rng.randrange(10**6)}", "note": "x" * 40}
                for _ in range(rng.randint(1, 4))
            ]
        }
    )


def learn_flow(sessions: int, calls: int) -> dict:
    import duckdb

    from stretto.model.flow import build_flow
    from stretto.model.habit import fit_alpha
    from warehouse.counts.learn import count_steps

    rng = random.Random(1)
    rows = []
    for s in range(sessions):
        tool = None
        for step in range(calls):
            tool = next_tool(rng, tool)
            rows.append((f"s{s}", step, tool, "tool", "ok", s))
    import pyarrow as pa

    names = ["session", "step", "action", "kind", "outcome", "session_order"]
    con = duckdb.connect()
    # one insert of every row, not a statement per row
    con.register("synthetic", pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}))
    counts = count_steps(con, "SELECT * FROM synthetic", KINDS)
    reads = [t for t in TOOLS if KINDS[t] == "read"]
    bindings = {
        "args": {t: {"calls": 100, "passed": {"id": 100}} for t in reads},
        "sources": [
            {
                "tool": t,
                "arg": "id",
                "values": 100,
                "found": [
                    {"source": s, "path": "$.items[*].id", "count": 10} for s in TOOLS if s != t
                ][:8],
            }
            for t in reads
        ],
        "agreed": {t: [[60, 80], [15, 20]] for t in reads},
        # ids as the synthetic results hold them: `<tool>-<up to 6 digits>`
        "shapes": [
            {
                "tool": t,
                "arg": "id",
                "values": 100,
                "classes": ["digit", "lower"],
                "symbols": "-_",
                "length": [3, 24],
            }
            for t in reads
        ],
    }
    return build_flow(
        domain="bench",
        kinds=KINDS,
        docs={},
        contracts={},
        habit=counts.habit,
        reach=counts.reach,
        sites=counts.sites,
        alpha_fit=fit_alpha(counts.prequential, len(TOOLS) + 2),
        sources=["bench"],
        episodes=sessions,
        steps=counts.steps,
        bindings=bindings,
    )


def with_arbiter(flow: dict, model: str) -> dict:
    """The flow with an arbiter of fixed weights asking `model` (what is timed is asking and
    judging, whatever the weights)."""
    from stretto.oracle.arbiter import Fold, new_arbiter
    from stretto.oracle.scores import Rates

    fold = Fold([1.0, 0.6, 0.4, -0.2, 0.5], Rates(), 100)
    return {**flow, "arbiter": new_arbiter(model=model, folds=[fold]).to_json()}


def serve_sessions(flow: dict, args, oracle=None) -> tuple[list[float], list[float], int, int]:
    """Serve the sessions (seeded: every call the same each time): the ms of each run after a
    call, the ms of each decision that asked a question, the lookups made, the questions
    asked. `oracle`: for the arbiter decider."""
    from stretto.oracle.judge import ArbiterJudge
    from stretto.oracle.state import Conversation

    dists = FlowDistributions(flow)
    decider = Decider(flow, "arbiter" if oracle is not None else None)
    rng = random.Random(7)
    canned = {t: [result_for(rng, t) for _ in range(50)] for t in TOOLS}
    times, asking, lookups, questions = [], [], 0, 0
    for n in range(args.sessions):
        judge = None
        view = SessionView(transcript=Conversation() if oracle is not None else None)
        if oracle is not None:
            judge = ArbiterJudge(flow, oracle, session=f"bench-{n}")
        tool, made = None, 0
        for call in range(args.calls):
            tool = next_tool(rng, tool)
            view.sent(tool, {"id": f"given-{call}"}, call)
            view.came_back(tool, False, rng.choice(canned[tool]), call)
            chosen = {}

            def decide(address, prev, failed, chosen=chosen, view=view, judge=judge):
                last = dists.tools[prev] if prev < len(dists.tools) else None
                started = time.perf_counter_ns()
                decision = decider.decide(
                    list(view.history),
                    (last, bool(failed)),
                    view.state,
                    judge=judge.on(view) if judge is not None else None,
                )
                nonlocal questions
                if decision.asked:
                    asking.append((time.perf_counter_ns() - started) / 1e6)
                    questions += 1
                if not decision.looks_up:
                    return 0
                chosen[address.replace("decide", "outcome")] = decision
                return dists.tool_id(decision.tool)

            def look_up(address, tool_id, chosen=chosen, view=view):
                nonlocal made
                decision = chosen[address]
                made += 1
                view.sent(decision.tool, decision.arguments, f"stretto-{made}")
                view.came_back(
                    decision.tool, False, rng.choice(canned[decision.tool]), f"stretto-{made}"
                )
                return True

            started = time.perf_counter_ns()
            _, trace = run(
                STANDARD_PROGRAM, dists, Execute(decide, look_up), call=tool, call_failed=False
            )
            times.append((time.perf_counter_ns() - started) / 1e6)
            lookups += sum(1 for a, _, _ in trace if a.startswith("outcome"))
    return times, asking, lookups, questions


def arbiter_runs(flow: dict, args) -> None:
    """The arbiter decider asking live oracles, then from the cache."""
    from stretto.oracle.oracle import open_oracle
    from tests.stretto.oracle.apiserver import ApiServer, look_up_first, openai_chat

    rows = []
    with tempfile.TemporaryDirectory() as tmp, ApiServer() as stand_in:
        stand_in.route("POST", "/chat/completions", openai_chat(look_up_first))
        for uri, base in (("simulate://habit", None), ("openai://bench", stand_in.url)):
            served = with_arbiter(flow, uri)
            cache = Path(tmp) / uri.split(":")[0]
            live = open_oracle(uri, cache=cache, base_url=base, timeout=2.0, retries=0)
            live_ms, live_q, _, asked = serve_sessions(served, args, live)
            replayed = open_oracle("replay", cache=cache, replayed=uri)
            cached_ms, cached_q, lookups, again = serve_sessions(served, args, replayed)
            rows.append((uri, live_ms, live_q, cached_ms, cached_q, asked, again, lookups))
    print(f"\n  the arbiter decider ({args.sessions} sessions x {args.calls} calls):\n")
    print(f"  {'':52}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
    for uri, live_ms, live_q, cached_ms, cached_q, asked, again, lookups in rows:
        for label, ms in (
            (f"{uri}, live: a run after a call", live_ms),
            (f"{uri}, live: a decision", live_q),
            (f"{uri}, cached: a run after a call", cached_ms),
            (f"{uri}, cached: a decision", cached_q),
        ):
            print(
                f"  {label:52}{percentile(ms, 0.5):9.3f}{percentile(ms, 0.99):9.3f}"
                f"{statistics.mean(ms):9.3f}"
            )
        added = statistics.median(live_q) - statistics.median(cached_q)
        print(
            f"    {asked} questions asked live, {again} answered from the cache ("
            f"{asked / len(live_ms):.2f} per call); {lookups} lookups; a live question adds "
            f"{added:.3f} ms to a decision (medians)"
        )
    worst = max(percentile(row[4], 0.5) for row in rows)
    print(
        f"\n  goal: a decision's p50 under 1 ms with its answer cached -> {worst:.3f} ms, "
        f"{'met' if worst < 1 else 'NOT met'}"
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--arbiter", action="store_true", help="also time the arbiter decider (see above)"
    )
    args = parser.parse_args()

    flow = learn_flow(60, args.calls)
    dists = FlowDistributions(flow)
    decider = Decider(flow)
    rng = random.Random(7)
    # the server's answers, made before any timing: a lookup's answer costs the proxy nothing
    canned = {t: [result_for(rng, t) for _ in range(50)] for t in TOOLS}
    decide_ms, forward_ms, lookups = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        log = SessionLog(
            tmp, server_command=["bench"], domain="bench", agent_model=None, started=time.time()
        )

        class NoServer:
            def send(self, line: bytes) -> bool:
                return True

        relay = Relay(NoServer(), log, None, host_out_fd=os.open(os.devnull, os.O_WRONLY))
        for _ in range(args.sessions):
            state, history, tool = SessionState(), [], None
            for call in range(args.calls):
                tool = next_tool(rng, tool)
                arguments = {"id": f"given-{call}"}
                request = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": call,
                        "method": "tools/call",
                        "params": {"name": tool, "arguments": arguments},
                    }
                )
                content = rng.choice(canned[tool])
                answer = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": call,
                        "result": {"content": [{"type": "text", "text": content}]},
                    }
                )
                started = time.perf_counter_ns()
                relay.from_host(request.encode() + b"\n")
                relay.from_server(answer.encode() + b"\n")
                forward_ms.append((time.perf_counter_ns() - started) / 1e6)

                state.add_call(tool, arguments)
                history.append(tool)
                state.add_result(tool, True, content)
                chosen = {}

                def decide(address, prev, failed, history=history, state=state, chosen=chosen):
                    last = dists.tools[prev] if prev < len(dists.tools) else None
                    decision = decider.decide(list(history), (last, bool(failed)), state)
                    if not decision.looks_up:
                        return 0
                    chosen[address.replace("decide", "outcome")] = decision
                    return dists.tool_id(decision.tool)

                def look_up(address, tool_id, history=history, state=state, chosen=chosen):
                    decision = chosen[address]
                    state.add_call(decision.tool, decision.arguments)
                    history.append(decision.tool)
                    state.add_result(decision.tool, True, rng.choice(canned[decision.tool]))
                    return True

                started = time.perf_counter_ns()
                _, trace = run(
                    STANDARD_PROGRAM, dists, Execute(decide, look_up), call=tool, call_failed=False
                )
                decide_ms.append((time.perf_counter_ns() - started) / 1e6)
                lookups += sum(1 for a, _, _ in trace if a.startswith("outcome"))
        log.close()
    p50, p99 = percentile(decide_ms, 0.5), percentile(decide_ms, 0.99)
    f50, f99 = percentile(forward_ms, 0.5), percentile(forward_ms, 0.99)
    n = len(decide_ms)
    print(
        f"\nserving a flow of {len(TOOLS)} tools: {args.sessions} sessions x {args.calls} calls "
        f"({lookups} lookups made, {lookups / n:.2f} per call)\n"
    )
    print(f"  {'':34}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
    print(
        f"  {'deciding after a call (ours)':34}{p50:9.3f}{p99:9.3f}"
        f"{statistics.mean(decide_ms):9.3f}"
    )
    print(
        f"  {'forwarding the call (baseline)':34}{f50:9.3f}{f99:9.3f}"
        f"{statistics.mean(forward_ms):9.3f}"
    )
    print(f"\n  ratio deciding/forwarding: p50 {p50 / f50:.1f}x, p99 {p99 / f99:.1f}x")
    print(f"  goal: p50 under 1 ms -> {p50:.3f} ms, {'met' if p50 < 1 else 'NOT met'}")
    if args.arbiter:
        arbiter_runs(flow, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
