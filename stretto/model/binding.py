"""Binding a lookup's arguments from earlier results (../shared/spec/algorithms.md §5.2–5.5).

`pick` is the one implementation: the proxy binds its lookups with it and learning replays it
over every training call to measure how often it reproduces the agent's own arguments.
`SessionState` keeps what the pick needs up to date as a session goes on (parsed outputs,
what the customer said, what was passed), so one pick costs the outputs it scans, not the
whole session.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from stretto.model.shape import Shape

REQUIRED_SHARE = 0.9  # an argument passed in this share of a lookup's calls is required
MIN_SOURCE_FOUND = 2  # a source is usable when found this often ...
MIN_SOURCE_SHARE = 0.1  # ... and for this share of the argument's values
MIN_MENTION = 4  # a sibling this long, named by the customer, marks its value as named

PICKED, OTHER, DESCRIBED, NONE = "picked", "other", "described", "none"
# A constant argument: taken in at least this many calls and this share of the lookup's calls.
MIN_CONSTANT_CALLS = 5
MIN_CONSTANT_SHARE = 0.5


def value_text(value: Any) -> str:
    """A JSON string as itself; anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_output(content: str) -> Any:
    """A result as the binding sees it: JSON if it parses; else its non-empty trimmed lines
    when there are two or more; else the text."""
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        lines = [line.strip() for line in content.split("\n") if line.strip()]
        return lines if len(lines) >= 2 else content


Steps = tuple[str | None, ...]  # a compiled path: a member's name, or None for every element


class PathError(ValueError):
    """A binding path that jsonpath-ng cannot read, or that asks for more than a binding
    follows."""


_PARSE = threading.Lock()  # PLY's parser keeps its state on itself while it parses


@cache
def _parser():
    from jsonpath_ng.parser import JsonPathParser  # only a flow with bindings needs it

    return JsonPathParser()


@cache
def compile_path(path: str) -> Steps:
    """A binding path, read by jsonpath-ng, as the steps `values_at` follows: `$.orders[*].id`
    -> ("orders", None, "id"). A binding path is the root followed by members (`.name`,
    `."any key"`) and `[*]` (every element of an array); anything else — an index, a slice,
    `..`, a filter — is refused. Each path is read once per process."""
    # proxy: only a flow with bindings needs jsonpath-ng
    from jsonpath_ng.exceptions import JSONPathError
    from jsonpath_ng.jsonpath import Child, Fields, Root, Wildcard

    try:
        with _PARSE, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated syntax is refused below anyway
            tree = _parser().parse(path)
    except JSONPathError as exc:
        raise PathError(f"cannot read the path {path!r}: {exc}") from None
    nodes, pending = [], [tree]
    while pending:  # Child(left, right) read left to right, without recursion
        node = pending.pop()
        if isinstance(node, Child):
            pending += [node.right, node.left]
        else:
            nodes.append(node)
    steps: list[str | None] = []
    for i, node in enumerate(nodes):
        if i == 0 and isinstance(node, Root):
            continue
        if i > 0 and isinstance(node, Fields) and len(node.fields) == 1:
            steps.append(node.fields[0])
        elif i > 0 and isinstance(node, Wildcard):
            steps.append(None)
        else:
            bare = i == 0 and isinstance(node, Fields | Wildcard)
            what = "it does not start with $" if bare else f"it has `{node}`"
            raise PathError(
                f'{path!r} is not a binding path ($, then steps .name, ."any key" or [*]): {what}'
            )
    return tuple(steps)


def parse_path(path: str) -> list[str | None]:
    """`$.orders[*].id` -> ["orders", None, "id"] (None = every array element)."""
    return list(compile_path(path))


def binding_paths(bindings: dict):
    """(field, path) of every path in a flow's bindings, the field named as in error
    messages (`bindings.sources[3].found[0].path`)."""
    for part in ("sources", "lists"):
        for i, entry in enumerate(bindings.get(part, [])):
            for j, hit in enumerate(entry.get("found", [])):
                yield f"bindings.{part}[{i}].found[{j}].path", hit["path"]


def values_at(document: Any, steps: Sequence[str | None]) -> list[tuple[str, list[str]]]:
    """The string values at a path, in document order, each with its siblings: the other
    string values of the object it belongs to."""
    out: list[tuple[str, list[str]]] = []

    def walk(node: Any, index: int, parent: dict | None) -> None:
        if index == len(steps):
            if isinstance(node, str):
                siblings = (
                    [v for v in parent.values() if isinstance(v, str) and v is not node]
                    if parent is not None
                    else []
                )
                out.append((node, siblings))
            return
        step = steps[index]
        if step is None:
            if isinstance(node, list):
                for item in node:
                    walk(item, index + 1, None)
        elif isinstance(node, dict) and step in node:
            walk(node[step], index + 1, node if index + 1 == len(steps) else None)

    walk(document, 0, None)
    return out


@dataclass
class Rules:
    """A flow's bindings, prepared for picking."""

    required: dict[str, list[str]]  # lookup -> its required arguments
    sources: dict[tuple[str, str], list[tuple[str, Steps]]]  # (tool, arg) -> usable
    traced: set[tuple[str, str]]  # (tool, arg) that took strings in training
    agreed: dict[str, list[list[int]]]
    bare: dict[str, int]
    calls: dict[str, int]
    constants: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool -> arg -> value
    lists: dict[tuple[str, str], list[tuple[str, Steps]]] = field(default_factory=dict)
    named_other: dict[str, list[int]] = field(default_factory=dict)
    described_read: dict[str, list[int]] = field(default_factory=dict)
    # (tool, arg) -> what its values looked like in training; a value taken from a result
    # that does not look like them is never passed (stretto.model.shape)
    shapes: dict[tuple[str, str], Shape] = field(default_factory=dict)

    def shape_refusal(self, tool: str, arg: str, value: str) -> str | None:
        """Why a value taken from a result may not be passed as `arg`, or None."""
        shape = self.shapes.get((tool, arg))
        if shape is None:
            return f"`{arg}` has no learned shape (a flow learned before shapes: learn it again)"
        return shape.refusal(value)

    def source_tools(self) -> frozenset[str]:
        return frozenset(
            t for rules in (*self.sources.values(), *self.lists.values()) for t, _ in rules
        )

    def deciding(self, tool: str) -> list | None:
        """What of these rules a pick of `tool` reads (pick, _pick_value, _pick_list,
        shape_refusal), as plain data: two rules with the same value for a tool pick the same
        arguments for it in every session state. None for a tool never called in training.
        (The counts behind the rules — `calls`, `bare`, how often a source was found — do not
        decide a pick; `source_tools` only saves keeping results no pick reads.)"""
        if tool not in self.calls:
            return None
        args = []
        for arg in self.required.get(tool, []):
            shape = self.shapes.get((tool, arg))
            args.append(
                [
                    arg,
                    [[t, list(s)] for t, s in self.lists[(tool, arg)]]
                    if (tool, arg) in self.lists
                    else None,
                    (tool, arg) in self.traced,
                    [[t, list(s)] for t, s in self.sources.get((tool, arg), [])],
                    None
                    if shape is None
                    else [
                        sorted(shape.classes),
                        sorted(shape.symbols),
                        shape.shortest,
                        shape.longest,
                        None if shape.roots is None else list(shape.roots),
                    ],
                ]
            )
        constants = self.constants.get(tool, {})
        return [args, sorted([a, value_text(v), type(v).__name__] for a, v in constants.items())]

    def only(self, tools: set[str]) -> Rules:
        """These rules with only `tools` ever called in training: the others are never picked
        (every other rule is kept, so a pick of one of `tools` is unchanged)."""
        return replace(self, calls={t: n for t, n in self.calls.items() if t in tools})

    @classmethod
    def from_flow(cls, bindings: dict) -> Rules:
        """The rules of a flow's bindings; each path is compiled once per process (the flow
        loader has read every path already, and refused a flow with one that does not parse)."""
        required, calls = {}, {}
        for tool, entry in bindings.get("args", {}).items():
            calls[tool] = entry["calls"]
            required[tool] = sorted(
                arg for arg, n in entry["passed"].items() if n >= REQUIRED_SHARE * entry["calls"]
            )
        sources, traced = {}, set()
        for entry in bindings.get("sources", []):
            traced.add((entry["tool"], entry["arg"]))
            sources[(entry["tool"], entry["arg"])] = usable_sources(entry)
        lists = {(e["tool"], e["arg"]): usable_sources(e) for e in bindings.get("lists", [])}
        constants: dict[str, dict[str, Any]] = {}
        for entry in bindings.get("constants", []):
            constants.setdefault(entry["tool"], {})[entry["arg"]] = entry["value"]
        for tool, fixed in constants.items():  # a constant is passed, not looked for
            required[tool] = [a for a in required.get(tool, []) if a not in fixed]
        return cls(
            required,
            sources,
            traced,
            bindings.get("agreed", {}),
            bindings.get("bare", {}),
            calls,
            constants=constants,
            lists=lists,
            named_other=bindings.get("named_other", {}),
            described_read=bindings.get("described_read", {}),
            shapes={(e["tool"], e["arg"]): Shape.from_entry(e) for e in bindings.get("shapes", [])},
        )


@dataclass
class Pick:
    arguments: dict[str, str] | None  # None when it cannot bind
    mention: str = NONE
    error: str | None = None


@dataclass
class SessionState:
    """What the pick knows of a session so far. Results are parsed only when a pick reads
    them, and only results of tools that are some binding's source are kept."""

    source_tools: frozenset[str] | None = None  # None: keep every result
    customer: str = ""
    outputs: list[list] = field(default_factory=list)  # [tool, content, parsed or _UNPARSED]
    used: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # tool -> (arg, value)
    called: set[str] = field(default_factory=set)

    def add_user(self, text: str) -> None:
        self.customer += text.lower() + "\n"

    def add_call(self, tool: str, arguments: dict) -> None:
        self.called.add(tool)
        used = self.used.setdefault(tool, set())
        for arg, value in arguments.items():
            used.add((arg, value_text(value)))

    def add_result(self, tool: str, ok: bool, content: str) -> None:
        if ok and (self.source_tools is None or tool in self.source_tools):
            self.outputs.append([tool, content, _UNPARSED])

    def recent_outputs(self):
        """(tool, parsed result), the most recent first."""
        for output in reversed(self.outputs):
            if output[2] is _UNPARSED:
                output[2] = parse_output(output[1])
            yield output[0], output[2]

    def mentions(self, value: str) -> bool:
        text = value.strip().lower()
        if not text:
            return False
        return text in self.customer or (
            text.startswith("#") and text[1:] != "" and text[1:] in self.customer
        )


_UNPARSED = object()


def pick(
    rules: Rules, state: SessionState, tool: str, also: Sequence[tuple[str, dict]] = ()
) -> Pick:
    """Bind `tool`'s arguments from the session so far; `also` = calls already sent in this
    turn (they count as made)."""
    if tool not in rules.calls:
        return Pick(None, error="never called in training")
    used = set(state.used.get(tool, set()))
    called = tool in state.called
    for other, arguments in also:
        if other == tool:
            called = True
            used |= {(a, value_text(v)) for a, v in arguments.items()}
    required = rules.required.get(tool, [])
    constants = rules.constants.get(tool, {})
    if not required:
        if called:
            return Pick(None, error="already looked up")
        return Pick(dict(constants), PICKED)
    bound: dict[str, Any] = {}
    all_mentioned, other_named = True, False
    for arg in required:
        if (tool, arg) in rules.lists:
            chosen_list = _pick_list(rules.lists[(tool, arg)], state, arg, used)
            if isinstance(chosen_list, str):
                return Pick(None, error=chosen_list)
            for item in chosen_list:
                refused = rules.shape_refusal(tool, arg, item)
                if refused:
                    return Pick(None, error=refused)
            bound[arg] = chosen_list
            continue
        if (tool, arg) not in rules.traced:
            return Pick(None, error=f"`{arg}` never took a string in training")
        usable = rules.sources.get((tool, arg), [])
        if not usable:
            return Pick(None, error=f"no source for `{arg}` (the LLM supplies it)")
        chosen = _pick_value(usable, state, arg, used)
        if chosen is None:
            return Pick(None, error=f"nothing left to pass as `{arg}`")
        value, named, any_mentioned = chosen
        refused = rules.shape_refusal(tool, arg, value)
        if refused:
            return Pick(None, error=refused)
        bound[arg] = value
        all_mentioned &= named
        other_named |= not named and any_mentioned
    mention = PICKED if all_mentioned else OTHER if other_named else NONE
    return Pick({**constants, **bound}, mention)


def _pick_value(usable, state: SessionState, arg: str, used: set) -> tuple[str, bool, bool] | None:
    """The value to pass as `arg`: the first value at a usable source (most recent result
    first, then document order) that the customer named, else the first; not one already
    passed. With whether it was named, and whether any value there was. None if none is left.

    The scan stops as soon as the answer cannot change: at a named value, or at the first
    value when the customer has said nothing."""
    first: str | None = None
    seen: set[str] = set()
    any_mentioned = False
    can_name = bool(state.customer)
    for source_tool, parsed in state.recent_outputs():
        for rule_tool, steps in usable:
            if rule_tool != source_tool:
                continue
            for value, siblings in values_at(parsed, steps):
                named = can_name and (
                    state.mentions(value)
                    or any(len(s) >= MIN_MENTION and state.mentions(s) for s in siblings)
                )
                any_mentioned |= named
                if value in seen or (arg, value) in used:
                    continue
                seen.add(value)
                if named:
                    return value, True, True
                if first is None:
                    first = value
                    if not can_name:
                        return first, False, False
    return None if first is None else (first, False, any_mentioned)


def bare_lookups(args: dict[str, dict], empty: dict[str, int]) -> dict[str, int]:
    """Lookups with no required argument that the agent sometimes called with some
    argument: how often it called them with none (their binding's chance)."""
    out = {}
    for tool, entry in args.items():
        required = [a for a, n in entry["passed"].items() if n >= REQUIRED_SHARE * entry["calls"]]
        if not required and empty.get(tool, 0) < entry["calls"]:
            out[tool] = empty.get(tool, 0)
    return dict(sorted(out.items()))


def learn_constants(
    calls: dict[str, int], single_valued: list[tuple[str, str, Any, int]], found: set
) -> list[dict]:
    """Arguments the agent always passes the same way (§5.4): one value in every call that
    passed it, in at least 5 calls and half of the lookup's calls, never found in an earlier
    result, and not a string with a digit or an @ in it (an id or an email)."""
    out = []
    for tool, arg, value, n in single_valued:
        if n < MIN_CONSTANT_CALLS or n < MIN_CONSTANT_SHARE * calls.get(tool, 0):
            continue
        if (tool, arg) in found:
            continue
        if isinstance(value, str) and any(ch.isdigit() or ch == "@" for ch in value):
            continue
        out.append({"tool": tool, "arg": arg, "value": value})
    return sorted(out, key=lambda e: (e["tool"], e["arg"]))


def usable_sources(entry: dict) -> list[tuple[str, Steps]]:
    """A `sources` or `lists` entry's sources found often enough to bind from."""
    return [
        (f["source"], compile_path(f["path"]))
        for f in entry["found"]
        if f["count"] >= MIN_SOURCE_FOUND and f["count"] >= MIN_SOURCE_SHARE * entry["values"]
    ]


def _pick_list(usable, state: SessionState, arg: str, used: set) -> list[str] | str:
    """Every string at a usable source of the most recent output that has some, unless that
    very list was passed already; else the reason it cannot."""
    if not usable:
        return f"no source for the list `{arg}` (the LLM supplies it)"
    for source_tool, parsed in state.recent_outputs():
        for rule_tool, steps in usable:
            if rule_tool != source_tool:
                continue
            values = [v for v, _ in values_at(parsed, steps)]
            if values and (arg, value_text(values)) not in used:
                return values
    return f"no list left to pass as `{arg}`"


def smooth(agreed: int, tried: int) -> float:
    return (agreed + 1) / (tried + 2)


def chance(rules: Rules, tool: str, result: Pick) -> float:
    """How likely the bound arguments are the agent's own (§5.3)."""
    if result.arguments is None:
        return 0.0
    if not result.arguments:
        if tool in rules.bare:
            return smooth(rules.bare[tool], rules.calls.get(tool, 0))
        return 1.0
    buckets = rules.agreed.get(tool, [[0, 0], [0, 0]])
    c0 = smooth(*buckets[0])
    if result.mention == PICKED:
        return smooth(*buckets[1])
    shrink = {OTHER: rules.named_other, DESCRIBED: rules.described_read}.get(result.mention)
    if shrink and tool in shrink:
        used, picks = shrink[tool]
        return (used + 2 * c0) / (picks + 2)
    return c0


def same_arguments(bound: dict[str, str], agent: dict) -> bool:
    return all(arg in agent and value_text(agent[arg]) == value for arg, value in bound.items())


def agreement(rules: Rules, sessions, reads: set[str]) -> dict[str, list[list[int]]]:
    """Replay the pick at every read call of the training sessions (§5.5): per lookup,
    [[agreed, tried] where the customer had not named the pick, [agreed, tried] where they had].

    `sessions` yields each session's events in order: ("user", text), ("turn", [(tool,
    arguments), ...]) for the calls of one LLM turn, ("result", tool, ok, content).
    """
    tally: dict[str, list[list[int]]] = {}
    sources = rules.source_tools()
    for events in sessions:
        state = SessionState(sources)
        for event in events:
            kind = event[0]
            if kind == "user":
                state.add_user(event[1])
            elif kind == "result":
                state.add_result(event[1], event[2], event[3])
            else:
                calls = event[1]
                for j, (tool, arguments) in enumerate(calls):
                    if tool not in reads:
                        continue
                    result = pick(rules, state, tool, calls[:j])
                    if not result.arguments:
                        continue
                    bucket = 1 if result.mention == PICKED else 0
                    counts = tally.setdefault(tool, [[0, 0], [0, 0]])[bucket]
                    counts[0] += same_arguments(result.arguments, arguments)
                    counts[1] += 1
                for tool, arguments in calls:
                    state.add_call(tool, arguments)
    return {tool: tally[tool] for tool in sorted(tally)}
