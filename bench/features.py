"""Would a result feature be learned? (issue 19; ../shared/spec/algorithms.md §1.3)

The spec adds a field of a step's result to its name (the flow's `map`) only when it makes the
next step more predictable on held-out tasks: the sum over 5 folds (by task, FNV-1a 64 mod 5) of
the log-likelihood of the successful training episodes' next actions, each fold predicted by the
order-2 back-off model (α the flow's) learned from the other folds, must grow by at least
`MIN_GAIN` = 5 nats. This measures that criterion for the result class (empty, one item, many;
a failed call is `tool (error)` already) of each tool, alone and all at once, and the same
for reach (the log-likelihood of each read's use before the next write, a Bernoulli per read
at every step).

    .venv/bin/python bench/features.py [--domain retail]
    .venv/bin/python bench/features.py --domain retail --replay "get_order_details:Len(items)"

With `--replay`, the field's effect on decisions: reach at θ 0.3 with the step names carrying
it against without, both counted here, judged by the paired bootstrap (replay_with).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.quality import domain as load  # noqa: E402
from bench.quality import our_flow  # noqa: E402
from bench.tau2data import add_option, choose  # noqa: E402
from stretto.logs.episode import Assistant, ToolResult, User  # noqa: E402
from stretto.model.binding import parse_output  # noqa: E402
from stretto.model.habit import BackoffModel, contexts  # noqa: E402
from stretto.vocabulary import FOLDS, RESPOND, RESPOND_END, fold_of  # noqa: E402

MIN_GAIN = 5.0


def result_class(content: str) -> str:
    """empty, one or many: the top-level array's items, or those of an object's only array
    member; another object or a non-empty text is one item."""
    parsed = parse_output(content)
    if isinstance(parsed, dict):
        arrays = [v for v in parsed.values() if isinstance(v, list)]
        parsed = arrays[0] if len(arrays) == 1 else parsed or None
    if isinstance(parsed, list):
        return "empty" if not parsed else "one" if len(parsed) == 1 else "many"
    return "empty" if parsed in (None, "") else "one"


def length_fields(content: str) -> dict[str, str]:
    """The spec's `Len` candidates of a result: each top-level array member's length (`0`,
    `1`, `2+`), keyed by the member's name (`""` for a top-level array)."""
    parsed = parse_output(content)
    if isinstance(parsed, list):
        parsed = {"": parsed}
    if not isinstance(parsed, dict):
        return {}
    return {
        k: "0" if not v else "1" if len(v) == 1 else "2+"
        for k, v in parsed.items()
        if isinstance(v, list)
    }


def steps(episode) -> list[tuple[str, str, str | None, str]]:
    """(action, kind, features or None, step name without features) per step; features: the
    result class under `class`, and `Len(key)` for each array member."""
    results = {e.call_key: e for e in episode.events if isinstance(e, ToolResult)}
    out: list[list] = []
    for event in episode.events:
        if isinstance(event, Assistant):
            calls = [c for c in event.calls if not c.by_proxy]
            if not calls and (event.text or "").strip():
                out.append([RESPOND, "reply", None, RESPOND_END])
            for call in calls:
                result = results.get(call.key)
                failed = result is None or result.error
                name = call.name + (" (error)" if failed else "")
                feature = None
                if not failed:
                    feature = {"class": result_class(result.content)}
                    feature.update(
                        {f"Len({k})": n for k, n in length_fields(result.content).items()}
                    )
                out.append([call.name, "tool", feature, name])
        elif isinstance(event, User) and out and out[-1][3] == RESPOND_END:
            out[-1][3] = RESPOND
    return [tuple(s) for s in out]


def named(step, featured: set[tuple[str, str]]) -> str:
    """The step's name with the values of its chosen fields ((tool, field) pairs)."""
    action, _, feature, name = step
    if not feature:
        return name
    values = [f"{f}={feature.get(f, '∅')}" for t, f in sorted(featured) if t == action]
    return f"{name} [{', '.join(values)}]" if values else name


def counts(episodes, featured: set[str], writes: set[str], reads: list[str]):
    habit = defaultdict(lambda: defaultdict(float))
    reach = defaultdict(lambda: defaultdict(float))
    reach_totals = defaultdict(float)
    for episode in episodes:
        ss = steps(episode)
        names = [named(s, featured) for s in ss]
        for t, s in enumerate(ss):
            used = set()
            for later in ss[t:]:
                if later[0] in writes:
                    break
                used.add(later[0])
            for c in contexts(names[:t]):
                habit[c][s[0]] += 1
                reach_totals[c] += 1
                for a in used & set(reads):
                    reach[c][a] += 1
    return habit, reach, reach_totals


def loglik(train, test, featured, alpha, vocab, writes, reads) -> tuple[float, float]:
    habit, reach, totals = counts(train, featured, writes, reads)
    h = BackoffModel(habit, None, alpha, vocab)
    r = BackoffModel(reach, totals, alpha, vocab)
    lh = lr = 0.0
    for episode in test:
        ss = steps(episode)
        names = [named(s, featured) for s in ss]
        for t, s in enumerate(ss):
            history = names[:t]
            lh += math.log(h.prob(s[0], history))
            used = set()
            for later in ss[t:]:
                if later[0] in writes:
                    break
                used.add(later[0])
            for a in reads:
                p = min(max(r.prob(a, history), 1e-9), 1 - 1e-9)
                lr += math.log(p if a in used else 1 - p)
    return lh, lr


def held_out(episodes, featured, alpha, vocab, writes, reads) -> tuple[float, float]:
    fold = {e.id: fold_of(e.task_id or e.id) for e in episodes}
    total_h = total_r = 0.0
    for k in range(FOLDS):
        test = [e for e in episodes if fold[e.id] == k]
        train = [e for e in episodes if fold[e.id] != k]
        if test and train:
            lh, lr = loglik(train, test, featured, alpha, vocab, writes, reads)
            total_h, total_r = total_h + lh, total_r + lr
    return total_h, total_r


def levels(counts_by_history, totals=None) -> list[list[dict]]:
    """Counts as a flow's `habit`/`reach` levels (docs/formats.md §3)."""
    out: list[list[dict]] = [[], [], []]
    for history, counts in sorted(counts_by_history.items()):
        total = totals[history] if totals is not None else sum(counts.values())
        out[len(history)].append(
            {"history": list(history), "counts": dict(sorted(counts.items())), "total": total}
        )
    return out


def with_counts(flow: dict, episodes, featured, writes, reads) -> dict:
    """The flow with its habit and reach counts made here (the step names with the chosen
    fields), α kept."""
    habit, reach, totals = counts(episodes, featured, writes, reads)
    return {
        **flow,
        "habit": {**flow["habit"], "levels": levels(habit)},
        "reach": {**flow["reach"], "levels": levels(reach, totals)},
    }


def replay_with(name: str, field: tuple[str, str], draws: int) -> None:
    """Reach at θ 0.3 (uncalibrated) with and without the field in the step names, both
    counted here from the successful training episodes, replayed on the test episodes and
    judged by the paired bootstrap over tasks (bench/paired.py). The decider's history gets
    the field by the same rule as training (SessionView.came_back, wrapped here only)."""
    from bench.paired import MEASURES, paired, replayed
    from bench.quality import THETA, current_flow
    from stretto.model import session

    d = load(name)
    flow = current_flow(d, d.train_ok)
    kinds = flow["manifest"]["tools"]
    writes = {t for t, k in kinds.items() if k == "write"}
    reads = sorted(t for t, k in kinds.items() if k == "read")
    episodes = [e for e in d.train if e.succeeded]
    base = replayed(d, with_counts(flow, episodes, set(), writes, reads), "reach", THETA)
    original = session.SessionView.came_back

    def came_back(self, tool, failed, content, call_id=None):
        original(self, tool, failed, content, call_id)
        if not failed and tool == field[0]:
            features = {"class": result_class(content)}
            features.update({f"Len({k})": n for k, n in length_fields(content).items()})
            step = (tool, "tool", features, self.history[-1])
            self.history[-1] = named(step, {field})

    session.SessionView.came_back = came_back  # type: ignore[method-assign]
    try:
        other = replayed(d, with_counts(flow, episodes, {field}, writes, reads), "reach", THETA)
    finally:
        session.SessionView.came_back = original  # type: ignore[method-assign]
    agents = sorted({a for a, _ in d.test})
    first = paired(base, other, d.costs, None, 10)
    print(f"\n## {name}: reach at θ {THETA} with {field[0]} {field[1]} against without\n")
    print(
        "without: "
        + ", ".join(f"{m} {first[m][0]:.3f}" for m in MEASURES)
        + f"; options {len(base.scores)} (with it: {len(other.scores)})\n"
    )
    print("| agents | " + " | ".join(MEASURES) + " |\n|---|" + "---|" * len(MEASURES))
    for agent in [None, *agents]:
        c = paired(base, other, d.costs, agent, draws)
        cells = [f"{c[m][2]:+.3f} [{c[m][3]:+.3f}, {c[m][4]:+.3f}]" for m in MEASURES]
        print(f"| {agent or 'all'} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", action="append")
    parser.add_argument("--replay", metavar="TOOL:FIELD", help="replay with this field")
    parser.add_argument("--draws", type=int, default=1000)
    add_option(parser)
    args = parser.parse_args()
    choose(args.tau2)
    if args.replay:
        tool, _, field = args.replay.partition(":")
        for name in args.domain or ["retail"]:
            replay_with(name, (tool, field), args.draws)
        return
    for name in args.domain or ["retail", "airline", "telecom"]:
        d = load(name)
        flow = our_flow(d, d.train_ok)
        kinds = flow["manifest"]["tools"]
        writes = {t for t, k in kinds.items() if k == "write"}
        reads = sorted(t for t, k in kinds.items() if k == "read")
        alpha, vocab = flow["habit"]["alpha"], len(flow["actions"]) + 1
        episodes = [e for e in d.train if e.succeeded]
        base = held_out(episodes, set(), alpha, vocab, writes, reads)
        fields = sorted({(s[0], f) for e in episodes for s in steps(e) if s[2] for f in s[2]})
        print(f"\n## {name}: held-out log-likelihood gain (nats) of result features")
        print(f"\nwithout features: habit {base[0]:.1f}, reach {base[1]:.1f}\n")
        print("| tool | field | values seen | habit gain | reach gain | selected (≥ 5) |")
        print("|---|---|---|---|---|---|")
        classes = {x for x in fields if x[1] == "class"}
        for tool, field in [*fields, ("every tool", "class")]:
            featured = classes if tool == "every tool" else {(tool, field)}
            seen = sorted(
                {
                    s[2].get(f, "∅")
                    for e in episodes
                    for s in steps(e)
                    if s[2]
                    for t, f in featured
                    if t == s[0]
                }
            )
            if len(seen) < 2 and tool != "every tool":
                continue  # one value everywhere: the same names as without it
            gain = held_out(episodes, featured, alpha, vocab, writes, reads)
            gh, gr = gain[0] - base[0], gain[1] - base[1]
            print(
                f"| {tool} | {field} | {', '.join(seen)} | {gh:+.1f} | {gr:+.1f} | "
                f"{'yes' if gh >= MIN_GAIN else 'no'} |"
            )


if __name__ == "__main__":
    main()
