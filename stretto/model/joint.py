"""Joint bindings: arguments bound together from one object (docs/algorithms.md, "Joint
bindings").

A lookup such as `get_flight_status(flight_number, date)` takes both values from the same
element of an earlier result (`$.flights[*]`): picked one argument at a time, the date of the
first flight not yet passed goes with the number of another. A joint rule names the lookup,
the source tool, the path of the objects (ending in `[*]`) and, per argument, the member of
the object it takes. The pick takes, from the most recent output of the source that has one,
the first object (in document order) with a string at every member whose values together
were never passed to the lookup, preferring one the customer named (a value or a sibling of at
least MIN_MENTION characters).

Learned from the bindings' usable sources (no new pass over the sessions): two or more
required arguments of one lookup whose usable sources, in one source tool, are members of one
object path `P[*].member` make a rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

JointRule = tuple[str, tuple, dict[str, str]]  # (source tool, steps of the objects, arg -> member)


def learn_joint(bindings: dict, required: dict[str, list[str]], usable) -> list[dict]:
    """The joint rules of a flow's bindings: `[{tool, source, path, args: {arg: member}}]`.
    `required`: lookup -> its required arguments; `usable(entry)`: a sources entry's usable
    (source, path) pairs, most found first. An argument joins the rule of its most found
    usable source; a rule needs two or more arguments, each from another member."""
    by_object: dict[tuple[str, str, str], dict[str, str]] = {}
    for entry in bindings.get("sources", []):
        tool, arg = entry["tool"], entry["arg"]
        found = usable(entry)
        if arg not in required.get(tool, []) or not found:
            continue
        source, path = found[0]
        head, dot, member = path.rpartition(".")
        if dot and head.endswith("[*]") and member and '"' not in member:
            by_object.setdefault((tool, source, head), {})[arg] = member
    return [
        {"tool": tool, "source": source, "path": head, "args": dict(sorted(args.items()))}
        for (tool, source, head), args in sorted(by_object.items())
        if len(args) >= 2 and len(set(args.values())) == len(args)
    ]


def objects_at(document: Any, steps: Sequence[str | None]) -> list[dict]:
    """The objects at a path (every element for None), in document order."""
    nodes = [document]
    for step in steps:
        following = []
        for node in nodes:
            if step is None:
                if isinstance(node, list):
                    following += node
            elif isinstance(node, dict) and step in node:
                following.append(node[step])
        nodes = following
    return [n for n in nodes if isinstance(n, dict)]


def pick_joint(
    rules: Iterable[JointRule],
    outputs: Iterable[tuple[str, Any]],
    passed: Sequence[dict[str, str]],
    mentions,
    min_mention: int,
) -> tuple[dict[str, str], bool] | None:
    """Values for a rule's arguments from one object, with whether the customer named it;
    None when no output of a source holds an object not passed yet. `outputs`: (tool, parsed)
    most recent first; `passed`: the lookup's earlier calls' arguments as value texts;
    `mentions(text)`: whether the customer named it."""
    rules = list(rules)
    for source_tool, parsed in outputs:
        for rule_tool, steps, members in rules:
            if rule_tool != source_tool:
                continue
            first = None
            for obj in objects_at(parsed, steps):
                values = {arg: obj.get(member) for arg, member in members.items()}
                if not all(isinstance(v, str) for v in values.values()):
                    continue
                if any(all(p.get(a) == v for a, v in values.items()) for p in passed):
                    continue
                named = any(mentions(v) for v in values.values()) or any(
                    isinstance(s, str) and len(s) >= min_mention and mentions(s)
                    for s in obj.values()
                )
                if named:
                    return values, True
                if first is None:
                    first = values
            if first is not None:
                return first, False
    return None
