"""The bindings' replays over the training sessions, kept per part and per lookup: the
agreement (stretto.model.binding.agreement) and the picks beside named values
(stretto.model.named.named_other).

Both replay the pick of each lookup over a part's sessions, and a lookup's outcome depends
only on the rules that decide its own pick (Rules.deciding): not on the counts behind them,
which grow every night, nor on other lookups' rules. So each part keeps, per lookup, the
digest of the rules its tally was replayed under and the tally:

    warehouse/counts/<domain>/<day>/<sessions>.replays.json
        {"agreed": {tool: [rules digest, tally or null]}, "named": {...}}

A relearn replays, per part, only the lookups whose deciding rules it has no tally for: a new
part every lookup, an old part none while the rules stand, and only the lookups whose rules
changed when some do. The tallies are sums over sessions, so the flow's are the parts' sums.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from stretto.model.binding import Rules, agreement
from stretto.model.named import named_other
from warehouse.counts.daycounts import PartStore, digest
from warehouse.counts.partcount import Plan, set_wanted
from warehouse.layout import Layout

REPLAY_VERSION = 1  # bump when a replay's tally changes meaning
KINDS = ("agreed", "named")


def session_events(con):
    """Each wanted session's events for the binding replay (stretto.model.binding.agreement), as
    (part, events): user messages, the calls of each LLM turn, and results, in log order."""
    rows = con.execute("""
        SELECT part, session, session_order, seq, 0 AS sub, 'user' AS kind, content AS text,
               NULL AS turn, NULL AS tool, NULL AS arguments, NULL AS ok
        FROM wanted_context JOIN wanted USING (session) WHERE role = 'user'
        UNION ALL
        SELECT part, session, session_order, sent_seq, sent_sub, 'call', NULL, turn, tool,
               arguments::VARCHAR, NULL
        FROM wanted_calls JOIN wanted USING (session)
        UNION ALL
        SELECT part, session, session_order, answered_seq, 0, 'result', result_text, NULL, tool,
               NULL, status = 'ok'
        FROM wanted_calls JOIN wanted USING (session) WHERE answered_seq IS NOT NULL
        ORDER BY part, session_order, seq, sub
    """).fetchall()
    events: list[tuple]  # ("user", text), ("result", tool, ok, text) or ("turn", calls)
    current, events, turn_of, part_of = None, [], None, None
    for part, session, _, _, _, kind, text, turn, tool, arguments, ok in rows:
        if session != current:
            if current is not None:
                yield part_of, events
            current, events, turn_of, part_of = session, [], None, part
        if kind == "user":
            events.append(("user", text or ""))
        elif kind == "result":
            events.append(("result", tool, bool(ok), text or ""))
        elif events and events[-1][0] == "turn" and turn_of == turn:
            events[-1][1].append((tool, json.loads(arguments)))
        else:
            events.append(("turn", [(tool, json.loads(arguments))]))
            turn_of = turn
    if current is not None:
        yield part_of, events


def tool_digests(rules: Rules, reads: set[str]) -> dict[str, dict[str, str]]:
    """kind -> lookup -> the digest of what decides its replayed tally: the agreement replays
    the lookups that are reads, the named picks every lookup called in training."""
    deciding = {t: rules.deciding(t) for t in sorted(rules.calls)}
    return {
        "agreed": {
            t: digest([REPLAY_VERSION, "agreed", d]) for t, d in deciding.items() if t in reads
        },
        "named": {t: digest([REPLAY_VERSION, "named", d]) for t, d in deciding.items()},
    }


def replayed(
    con,
    layout: Layout,
    plan: Plan,
    bindings: dict,
    reads: set[str],
    say: Callable[[str], None],
) -> tuple[dict[str, list[list[int]]], dict[str, list[int]]]:
    """(agreed, named_other) of the bindings over every session of the plan: each part's
    tally of a lookup read back when replayed before under the same deciding rules, else
    replayed now; the tallies add up."""
    rules = Rules.from_flow(bindings)
    wanted = tool_digests(rules, reads)
    store = PartStore(layout)
    kept: dict[str, dict] = {}
    stale: dict[str, dict[str, set[str]]] = {}  # part -> kind -> lookups to replay
    for part in plan.parts:
        data = store.load(part, plan.keys[part], "replays")
        if not isinstance(data, dict) or set(data) != set(KINDS):
            data = {kind: {} for kind in KINDS}
        kept[part] = data
        todo = {
            kind: {t for t, d in wanted[kind].items() if (data[kind].get(t) or [None])[0] != d}
            for kind in KINDS
        }
        if any(todo.values()):
            stale[part] = todo
    if stale:
        replays = sum(len(todo["agreed"] | todo["named"]) for todo in stale.values())
        say(
            f"replaying the bindings' picks in {len(stale)} of {len(plan.parts)} parts "
            f"({replays} of {len(plan.parts) * len(rules.calls)} lookups by part)"
        )
        for chunk in plan.chunks(stale):  # a few days' events in memory at a time
            _replay_chunk(con, plan, {p: stale[p] for p in chunk}, rules, reads, wanted, kept)
            for part in chunk:
                store.save(part, plan.keys[part], "replays", kept[part])
    agreed: dict[str, list[list[int]]] = {}
    named: dict[str, list[int]] = {}
    for part in plan.parts:
        for tool, (_, tally) in kept[part]["agreed"].items():
            if tool in wanted["agreed"] and tally is not None:
                sums = agreed.setdefault(tool, [[0, 0], [0, 0]])
                for bucket, (hit, tried) in enumerate(tally):
                    sums[bucket][0] += hit
                    sums[bucket][1] += tried
        for tool, (_, tally) in kept[part]["named"].items():
            if tool in wanted["named"] and tally is not None:
                pair = named.setdefault(tool, [0, 0])
                pair[0] += tally[0]
                pair[1] += tally[1]
    return {t: agreed[t] for t in sorted(agreed)}, {t: named[t] for t in sorted(named)}


def _replay_chunk(con, plan: Plan, stale: dict, rules: Rules, reads, wanted, kept) -> None:
    """Replay the lookups `stale` names in its parts, into `kept`'s entries for them."""
    set_wanted(con, plan.rows_of(stale), plan.merged, ["calls", "context"])
    by_part: dict[str, list] = {p: [] for p in stale}
    for part, events in session_events(con):
        by_part[part].append(events)
    for part, todo in stale.items():
        tallies: dict[str, dict] = {
            "agreed": agreement(rules.only(todo["agreed"]), by_part[part], reads)
            if todo["agreed"]
            else {},
            "named": named_other(rules.only(todo["named"]), by_part[part]) if todo["named"] else {},
        }
        data = kept[part]
        for kind in KINDS:
            data[kind] = {
                t: [d, tallies[kind].get(t) if t in todo[kind] else data[kind][t][1]]
                for t, d in wanted[kind].items()
            }
