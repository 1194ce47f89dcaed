"""The flow's program: the run after each call, kept as data in the flow (formats §3.9).

Only the standard program is accepted for now: a flow carrying any other is refused, since
it would be code the proxy runs.
"""

from __future__ import annotations

import math
from typing import Any

from stretto.vocabulary import RESPOND


def _var(name: str) -> dict:
    return {"op": "var", "name": name}


STANDARD_PROGRAM: dict[str, Any] = {
    "fugue_program": 1,
    "body": [
        {"stmt": "let", "var": "prev", "value": _var("call")},
        {"stmt": "let", "var": "failed", "value": _var("call_failed")},
        {
            "stmt": "for",
            "var": "i",
            "start": {"op": "int", "value": 0},
            "end": _var("max_lookups"),
            "body": [
                {
                    "stmt": "sample",
                    "var": "d",
                    "addr": {"name": "decide", "index": _var("i")},
                    "dist": {"name": "Decide", "args": [_var("prev"), _var("failed")]},
                },
                {
                    "stmt": "if",
                    "cond": {"op": "eq", "lhs": _var("d"), "rhs": {"op": "int", "value": 0}},
                    "then": [{"stmt": "break"}],
                },
                {
                    "stmt": "sample",
                    "var": "ok",
                    "addr": {"name": "outcome", "index": _var("i")},
                    "dist": {"name": "Outcome", "args": [_var("d")]},
                },
                {"stmt": "assign", "var": "prev", "value": _var("d")},
                {"stmt": "assign", "var": "failed", "value": {"op": "not", "arg": _var("ok")}},
            ],
        },
    ],
    "ret": _var("prev"),
}


def is_standard(program: Any) -> bool:
    return program == STANDARD_PROGRAM


# --- the distributions ------------------------------------------------------------------


class FlowDistributions:
    """`Decide(prev, failed)` and `Outcome(tool)` of a flow (../shared/spec/algorithms.md §8),
    from the habit's level-1 counts. Tool ids: 0 = respond (hand back), then the flow's reads,
    then its other tools."""

    def __init__(self, flow: dict) -> None:
        reads = flow["sites"]["reads"]
        others = sorted(t for t in flow["manifest"]["tools"] if t not in reads)
        self.tools = [RESPOND, *reads, *others]
        self.ids = {t: i for i, t in enumerate(self.tools)}
        self.reads = reads
        level1 = {tuple(e["history"]): e for e in flow["habit"]["levels"][1]}
        self.followed = {}
        for tool in self.tools[1:]:
            for failed in (False, True):
                entry = level1.get((tool + (" (error)" if failed else ""),))
                self.followed[(tool, failed)] = (
                    (entry["counts"], entry["total"]) if entry else ({}, 0.0)
                )
        self.offered = {
            (s["after"], s["failed"]): sorted(s["lookups"]) for s in flow["sites"]["next"]
        }

    def tool_id(self, tool: str) -> int:
        return self.ids.get(tool, len(self.tools))

    def decide(self, prev: int, failed: bool) -> dict[int, float]:
        """option id -> probability; lookups not offered at the site are absent (p = 0)."""
        tool = self.tools[prev] if prev < len(self.tools) else None
        offered = self.offered.get((tool, bool(failed)), []) if tool else []
        counts, total = self.followed.get((tool, bool(failed)), ({}, 0.0))
        looked = [round(counts.get(t, 0.0)) for t in offered]
        entries = [max(0, round(total) - sum(looked)), *looked]
        denominator = sum(entries) + len(entries)
        options = [0, *(self.ids[t] for t in offered)]
        return {o: (c + 1) / denominator for o, c in zip(options, entries, strict=True)}

    def outcome(self, tool: int) -> float:
        """P(the lookup succeeds)."""
        name = self.tools[tool] if tool < len(self.tools) else None
        ok = round(self.followed.get((name, False), ({}, 0.0))[1])
        failed = round(self.followed.get((name, True), ({}, 0.0))[1])
        return (ok + 1) / (ok + failed + 2)


# --- the interpreter --------------------------------------------------------------------


class Handler:
    """How a `sample` statement gets its value: returns (value, log-probability)."""

    def sample(self, address: str, dist: str, args: list, dists: FlowDistributions):
        raise NotImplementedError


class Simulate(Handler):
    """Draw every value from the flow's distributions."""

    def __init__(self, rng) -> None:
        self.rng = rng

    def sample(self, address, dist, args, dists):
        if dist == "Decide":
            probs = dists.decide(*args)
            options = list(probs)
            weights = [probs[o] for o in options]
            choice = options[self.rng.choices(range(len(options)), weights)[0]]
            return choice, math.log(probs[choice])
        p_ok = dists.outcome(args[0])
        ok = self.rng.random() < p_ok
        return ok, math.log(p_ok if ok else 1 - p_ok)


class Score(Handler):
    """Read every value from a recorded trace (address -> value) and score it."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.trace = trace

    def sample(self, address, dist, args, dists):
        value = self.trace.get(address, 0 if dist == "Decide" else True)
        if dist == "Decide":
            p = dists.decide(*args).get(value, 0.0)
        else:
            p_ok = dists.outcome(args[0])
            p = p_ok if value else 1 - p_ok
        return value, math.log(p) if p > 0 else float("-inf")


class Execute(Handler):
    """The proxy's run: decisions come from a decider (they score 0: not random), outcomes
    from the server (scored under Outcome)."""

    def __init__(self, decide, look_up) -> None:
        self.decide = decide  # (address, prev, failed) -> option id
        self.look_up = look_up  # (address, tool id) -> ok

    def sample(self, address, dist, args, dists):
        if dist == "Decide":
            return self.decide(address, *args), 0.0
        ok = bool(self.look_up(address, args[0]))
        p_ok = dists.outcome(args[0])
        return ok, math.log(p_ok if ok else 1 - p_ok)


class _Break(Exception):
    pass


def run(
    program: dict,
    dists: FlowDistributions,
    handler: Handler,
    *,
    call: str,
    call_failed: bool,
    max_lookups: int = 8,
) -> tuple[Any, list[tuple[str, Any, float]]]:
    """Interpret the program after a call to `call`; the returned value and the trace of its
    samples: (address, value, log-probability)."""
    env: dict[str, Any] = {
        "call": dists.tool_id(call),
        "call_failed": call_failed,
        "max_lookups": max_lookups,
    }
    trace: list[tuple[str, Any, float]] = []

    def value(expr: dict) -> Any:
        op = expr["op"]
        if op == "var":
            return env[expr["name"]]
        if op == "int":
            return expr["value"]
        if op == "eq":
            return value(expr["lhs"]) == value(expr["rhs"])
        if op == "not":
            return not value(expr["arg"])
        raise ValueError(f"unknown operation {op!r}")

    def block(statements: list[dict]) -> None:
        for stmt in statements:
            kind = stmt["stmt"]
            if kind in ("let", "assign"):
                env[stmt["var"]] = value(stmt["value"])
            elif kind == "for":
                for i in range(value(stmt["start"]), value(stmt["end"])):
                    env[stmt["var"]] = i
                    try:
                        block(stmt["body"])
                    except _Break:
                        break
            elif kind == "if":
                block(stmt["then"] if value(stmt["cond"]) else stmt.get("else", []))
            elif kind == "break":
                raise _Break
            elif kind == "sample":
                address = f"{stmt['addr']['name']}#{value(stmt['addr']['index'])}"
                dist = stmt["dist"]["name"]
                args = [value(a) for a in stmt["dist"]["args"]]
                result, logp = handler.sample(address, dist, args, dists)
                trace.append((address, result, logp))
                env[stmt["var"]] = result
            else:
                raise ValueError(f"unknown statement {kind!r}")

    block(program["body"])
    return value(program["ret"]), trace
