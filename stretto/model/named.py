"""`named_other`: how often a value the customer did not name, picked while they had named
another at the same source, was the agent's own (../shared/spec/algorithms.md §5.6;
docs/formats.md §3, bindings).

When the customer named a value at a lookup's source and that value was passed already, the
pick falls to another value there (mention class `other`): usually not what the agent asks
for next. Learning replays the pick after every successful result of the training sessions,
for every lookup the agent made in training; each distinct (lookup, arguments) of class
`other` in a session is one pick, used when a later call of the lookup in that session passed
every bound argument with the same value text. The binding's chance for such a pick is then
(used + 2·c0) / (picks + 2), c0 the unnamed chance.
"""

from __future__ import annotations

from collections.abc import Iterable

from stretto.model.binding import OTHER, Rules, SessionState, pick, same_arguments, value_text


def named_other(rules: Rules, sessions: Iterable[list[tuple]]) -> dict[str, list[int]]:
    """lookup -> [used, picks] over `sessions` (each a session's events as
    stretto.model.binding.agreement takes them); only lookups with a pick."""
    tally: dict[str, list[int]] = {}
    lookups = sorted(rules.calls)
    sources = rules.source_tools()
    for events in sessions:
        state = SessionState(sources)
        later_calls = [(i, c) for i, e in enumerate(events) if e[0] == "turn" for c in e[1]]
        counted: set[tuple[str, str]] = set()
        for index, event in enumerate(events):
            kind = event[0]
            if kind == "user":
                state.add_user(event[1])
            elif kind == "turn":
                for tool, arguments in event[1]:
                    state.add_call(tool, arguments)
            elif event[2]:  # a successful result
                state.add_result(event[1], True, event[3])
                for tool in lookups:
                    chosen = pick(rules, state, tool)
                    if chosen.mention != OTHER or not chosen.arguments:
                        continue
                    key = (tool, value_text(chosen.arguments))
                    if key in counted:
                        continue
                    counted.add(key)
                    entry = tally.setdefault(tool, [0, 0])
                    entry[1] += 1
                    entry[0] += any(
                        name == tool and same_arguments(chosen.arguments, args)
                        for i, (name, args) in later_calls
                        if i > index
                    )
    return {tool: tally[tool] for tool in sorted(tally)}
