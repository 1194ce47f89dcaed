"""What serving a flow costs the proxy: the time it spends deciding after each agent call.

A flow of 30 tools (counts learned by warehouse.learn from synthetic sessions; every read
binds its `id` from earlier results) is served over sessions of 200 agent calls. After each
call, the proxy's own run is timed — stretto.model.program with the Execute handler, the
decider (stretto.model.decide) and the binding (stretto.model.binding), as proxy/serve.py runs
them — with every
lookup answered at once from a canned result, so the server's time is excluded. The
baseline, in the same run: the proxy's plain forwarding of the same call (its request and
its answer through proxy.relay.Relay, recording on). Prints p50 and p99 of both and the
ratio. Goal: p50 under 1 ms.

    .venv/bin/python bench/decide.py [--sessions 20] [--calls 200]
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

from proxy.recorder import SessionLog  # noqa: E402
from proxy.relay import Relay  # noqa: E402
from stretto.model.binding import SessionState  # noqa: E402
from stretto.model.decide import Decider  # noqa: E402
from stretto.model.program import STANDARD_PROGRAM, Execute, FlowDistributions, run  # noqa: E402

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
    from warehouse.learn import count_steps

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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
