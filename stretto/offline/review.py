"""Reviewing flows like code: `flow-show` (what a flow may do) and `flow-diff` (what changed,
and which changes need a reviewer's eyes) — ../shared/spec/algorithms.md §12."""

from __future__ import annotations

import time

from stretto.model.binding import Rules, smooth
from stretto.model.decide import served_threshold, theta_text
from stretto.model.flow import reach_model
from stretto.model.program import is_standard
from stretto.model.shape import describe, length_change, widening

PROGRAM_TEXT = """let prev = call;
let failed = call_failed;
for i in 0..max_lookups {
    let d <- sample(addr!("decide", i), Decide(prev, failed));
    if d == 0 { break; }
    let ok <- sample(addr!("outcome", i), Outcome(d));
    prev = d;
    failed = !ok;
}
pure(prev)"""


def _site(after: str, failed: bool) -> str:
    return after + (" (error)" if failed else "")


def _site_promotion(flow: dict, site: str) -> dict | None:
    """A site's promotion: None when the flow has no promotion record (it acts everywhere);
    else whether it is promoted, with its evidence (none when the record does not list it)."""
    record = flow.get("promoted")
    if record is None:
        return None
    entry = record["sites"].get(site)
    return {"promoted": bool(entry and entry["promoted"]), "evidence": entry}


def summary(flow: dict, threshold: float | None = None) -> dict:
    """What `flow-show` shows, as data; `threshold`: the one a site without its own is
    judged against, by default the flow's own (`served_threshold`)."""
    threshold = served_threshold(flow, threshold)
    tools = flow["manifest"]["tools"]
    rules = Rules.from_flow(flow["bindings"])
    reach = reach_model(flow)
    level1 = {tuple(e["history"]): e for e in flow["habit"]["levels"][1]}
    sites = []
    for entry in flow["sites"]["next"]:
        name = _site(entry["after"], entry["failed"])
        theta = flow.get("thresholds", {}).get(name, threshold)
        followed = level1.get((name,), {"counts": {}, "total": 0})
        total = followed["total"] or 1
        next_steps = sorted(
            ((a, n / total) for a, n in followed["counts"].items()), key=lambda x: (-x[1], x[0])
        )
        lookups = []
        for tool, seen in sorted(entry["lookups"].items()):
            prob = reach.prob(tool, [name])
            buckets = flow["bindings"].get("agreed", {}).get(tool, [[0, 0], [0, 0]])
            pooled = smooth(buckets[0][0] + buckets[1][0], buckets[0][1] + buckets[1][1])
            required = rules.required.get(tool, [])
            bindable = all(
                rules.sources.get((tool, a))
                or rules.lists.get((tool, a))
                or a in rules.constants.get(tool, {})
                for a in required
            )
            chance = (1.0 if not required else pooled) if bindable else None
            score = None if chance is None else prob * chance
            would = theta <= 1 and score is not None and score >= theta
            if theta > 1:
                verdict = "hands back: switched off"
            elif score is None:
                verdict = "hands back: its arguments cannot be bound from earlier results"
            elif would:
                verdict = f"looks up {tool}: {prob:.2f} × {chance:.2f} = {score:.2f}"
            else:
                verdict = (
                    f"hands back: {prob:.2f} × {chance:.2f} = {score:.2f}, "
                    f"below {theta_text(theta)}"
                )
            acts = acts_at(flow, name)
            if not acts:  # decided and logged as shadow, never looked up
                verdict = f"hands back: not promoted; in shadow, {verdict}"
            lookups.append(
                {
                    "tool": tool,
                    "seen": seen,
                    "reach": prob,
                    "chance": chance,
                    "verdict": verdict,
                    "looks_up": would and acts,  # the verdict's "looks up", as data
                }
            )
        sites.append(
            {
                "site": name,
                "threshold": theta,
                "lookups": lookups,
                "next_in_training": [{"action": a, "share": s} for a, s in next_steps],
                "promotion": _site_promotion(flow, name),
            }
        )
    bindings = []
    for tool, entry in flow["bindings"]["args"].items():
        required = rules.required.get(tool, [])
        buckets = flow["bindings"].get("agreed", {}).get(tool, [[0, 0], [0, 0]])
        sources = {(s["tool"], s["arg"]): s for s in flow["bindings"]["sources"]}
        lists = {(s["tool"], s["arg"]): s for s in flow["bindings"].get("lists", [])}
        shapes = {(e["tool"], e["arg"]): e for e in flow["bindings"].get("shapes", [])}
        args = []
        for arg in required:
            source = lists.get((tool, arg)) or sources.get((tool, arg))
            shape = shapes.get((tool, arg))
            args.append(
                {
                    "arg": arg,
                    "list": (tool, arg) in lists,
                    "values": source["values"] if source else 0,
                    "found": source["found"] if source else [],
                    "shape": describe(shape) if shape else None,
                }
            )
        bindings.append(
            {
                "tool": tool,
                "calls": entry["calls"],
                "required": args,
                "constants": rules.constants.get(tool, {}),
                "chance": {"unnamed": smooth(*buckets[0]), "named": smooth(*buckets[1])},
            }
        )
    return {
        "domain": flow["manifest"]["domain"],
        "reads": sorted(t for t, k in tools.items() if k == "read"),
        "writes": sorted(t for t, k in tools.items() if k == "write"),
        "generic": sorted(t for t, k in tools.items() if k == "generic"),
        "read_by_operator": flow["manifest"].get("read_by_operator", []),
        # the threshold sites are judged against, and the flow's own (null: none, 0.3)
        "threshold": threshold,
        "serving": flow.get("serving"),
        "sites": sites,
        "bindings": bindings,
        "program": "standard" if is_standard(flow["program"]) else "custom",
        "provenance": flow["provenance"],
        "promotion": None
        if flow.get("promoted") is None
        else {
            "bar": flow["promoted"]["bar"],
            "promoted": sorted(s for s, e in flow["promoted"]["sites"].items() if e["promoted"]),
            "scored": len(flow["promoted"]["sites"]),
        },
        "arbiter": _arbiter_summary(flow.get("arbiter")),
    }


def _arbiter_summary(arbiter: dict | None) -> dict | None:
    """The arbiter part as flow-show shows it: what it asks, its weights by feature (per
    fold), its record."""
    if arbiter is None:
        return None
    folds = arbiter["folds"]
    return {
        "model": arbiter["model"],
        "questions": arbiter["questions"],
        "cases": arbiter["cases"],
        "tasks": arbiter["tasks"],
        "folds": len(folds),
        "sources": arbiter["sources"],
        "dataflow_hints": arbiter["dataflow_hints"],
        "manifest_options": arbiter["manifest_options"],
        "predicates": arbiter["predicates"],
        "weighed": arbiter["weighed"],
        "weights": [dict(zip(arbiter["features"], f["weights"], strict=True)) for f in folds],
        "record": [
            {"agree": f["rates"]["agree"], "cover": f["rates"]["cover"], "cases": f["cases"]}
            for f in folds
        ],
        "sites": folds[0]["rates"]["sites"],
    }


def _arbiter_markdown(a: dict | None) -> list[str]:
    if a is None:
        return []
    how = "one pooled fit" if a["folds"] == 1 else f"{a['folds']} fits cross-fitted by task group"
    taken = f" Taken from {', '.join(a['sources'])}." if a["sources"] else ""
    out = [
        "## Arbiter",
        "",
        f"Decides by asking **{a['model']}** ({a['questions']} questions"
        + (", with dataflow hints" if a["dataflow_hints"] else "")
        + (", offering every read at every site" if a["manifest_options"] else "")
        + f") at each decision and weighing its answers with the habit: {how}, learned from "
        f"{a['cases']} decisions of {a['tasks']} held-out tasks.{taken} The proxy serves a flow "
        "with an arbiter with it unless told otherwise (the site verdicts above are the reach "
        "rule's).",
        "",
        "| feature | " + " | ".join(f"fold {i}" for i in range(a["folds"])) + " |",
        "|---|" + "---|" * a["folds"],
    ]
    for feature in a["weights"][0]:
        out.append(f"| {feature} | " + " | ".join(f"{w[feature]:.3f}" for w in a["weights"]) + " |")
    record = a["record"][0]
    out += [
        "",
        f"Record: the model's pick was the agent's step in {record['agree']:.0%} of the "
        f"decisions fitted on, and the agent's step was an option in {record['cover']:.0%}.",
        "",
        "| site | decisions | the model agreed | the agent's step offered |",
        "|---|---|---|---|",
    ]
    for site, r in a["sites"].items():
        out.append(f"| {site} | {r['decisions']} | {r['agreed']} | {r['covered']} |")
    out.append("")
    if a["predicates"]:
        out += ["Predicates (yes/no questions it asks):", ""]
        for p in a["predicates"]:
            favors = (
                p["favors"] if isinstance(p["favors"], str) else f"lookup {p['favors']['lookup']}"
            )
            weighed = "weighed" if p["id"] in a["weighed"] else "not weighed"
            out.append(f"- `{p['id']}` ({weighed}; a yes favours {favors}): {p['question']}")
        out.append("")
    return out


def markdown(flow: dict, threshold: float | None = None) -> str:
    own = flow.get("serving")
    threshold = served_threshold(flow, threshold)
    s = summary(flow, threshold)
    p = s["provenance"]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(p["compiled_unix_ms"] / 1000))
    agents = ", ".join(p["sources"]) or "no agent named"
    arbiter = s["arbiter"]
    said = (
        f"an arbiter asking {arbiter['model']} ({arbiter['cases']} decisions)"
        if arbiter
        else "no arbiter"
    )
    out = [
        f"# The {s['domain']} flow",
        "",
        f"Learned from {p['habit_episodes']} sessions ({agents}) by stretto {p['stretto']} "
        f"on {when}; α = {flow['habit']['alpha']:.3f}; {said}.",
        "",
        "## Tools",
        "",
        f"- **May call** (reads): {', '.join(s['reads']) or 'none'}",
        f"- **Never calls** (writes): {', '.join(s['writes']) or 'none'}",
        f"- **Never calls** (no readOnlyHint): {', '.join(s['generic']) or 'none'}",
        *(
            [
                "- **Reads on the operator's word** (the manifest says read; training's listings "
                "did not mark them readOnlyHint: true): " + ", ".join(s["read_by_operator"])
            ]
            if s["read_by_operator"]
            else []
        ),
        "",
        "The proxy calls a read only when the server's own tools/list in the session marks "
        "it readOnlyHint: true (a tool without the hint: only when the operator named it, "
        "in the manifest or --flow-tools) and its input contract is unchanged.",
        "",
        "## Sites",
        "",
        f"After each call, what the flow may look up (reach × binding chance against the "
        f"threshold, {theta_text(threshold)} unless the site has its own).",
        "",
    ]
    if own is not None:
        beta, delta = own["costs"]["saved_turn"], own["costs"]["detour"]
        out += [
            f"**Served at {theta_text(own['threshold'])}** unless told otherwise: the break-even "
            f"δ/(β+δ) of the costs it was learned with (a saved turn β = {beta:g}, a detour "
            f"δ = {delta:g}).",
            "",
        ]
    if s["promotion"] is not None:
        out += [
            f"**Promotion.** {_promotion_summary(flow['promoted'])}. The flow acts only at "
            "promoted sites; at the others the proxy decides as usual and logs the decision as "
            "shadow, never looking it up.",
            "",
        ]
    for site in s["sites"]:
        out.append(f"### After `{site['site']}`")
        out.append("")
        nexts = ", ".join(f"{n['action']} {n['share']:.0%}" for n in site["next_in_training"][:5])
        out.append(f"What the agent did next in training: {nexts or 'nothing recorded'}.")
        out.append("")
        promotion = site["promotion"]
        if promotion is not None:
            verdict = "Promoted" if promotion["promoted"] else "Not promoted (shadow)"
            out.append(f"{verdict}: {promotion_evidence(promotion['evidence'])}.")
            out.append("")
        out.append("| lookup | seen | reach | binding chance | verdict |")
        out.append("|---|---|---|---|---|")
        for lookup in site["lookups"]:
            chance = "—" if lookup["chance"] is None else f"{lookup['chance']:.2f}"
            out.append(
                f"| {lookup['tool']} | {lookup['seen']} | {lookup['reach']:.2f} | "
                f"{chance} | {lookup['verdict']} |"
            )
        out.append("")
    out += ["## Bindings", ""]
    for binding in s["bindings"]:
        out.append(f"### `{binding['tool']}` ({binding['calls']} calls in training)")
        out.append("")
        for arg in binding["required"]:
            kind = "list " if arg["list"] else ""
            found = (
                "; ".join(
                    f"{f['source']} `{f['path']}` ({f['count']} of {arg['values']})"
                    for f in arg["found"]
                )
                or "nowhere: the LLM supplies it"
            )
            out.append(f"- {kind}`{arg['arg']}` from {found}")
            out.append(
                f"  - passed only when it looks like training's values: {arg['shape']}"
                if arg["shape"]
                else "  - no learned shape: never bound from a result (learn the flow again)"
            )
        for arg, value in binding["constants"].items():
            out.append(f"- `{arg}` always {value!r} (a constant)")
        if not binding["required"] and not binding["constants"]:
            out.append("- no arguments")
        chance = binding["chance"]
        out.append(
            f"- chance the binding is the agent's own: {chance['unnamed']:.2f} when the "
            f"customer did not name the value, {chance['named']:.2f} when they did"
        )
        out.append("")
    out += [
        "## Program",
        "",
        "```",
        PROGRAM_TEXT if s["program"] == "standard" else "(a custom program)",
        "```",
        "",
    ]
    out += _arbiter_markdown(arbiter)
    return "\n".join(out)


# --- flow-diff ---------------------------------------------------------------------------


def diff(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """(changes that need review: the new flow can do something the old could not; other
    changes: probabilities and counts)."""
    review, other = [], []
    old_reads, new_reads = set(old["sites"]["reads"]), set(new["sites"]["reads"])
    for tool in sorted(new_reads - old_reads):
        review.append(f"a new tool it may call: {tool}")
    old_sites = {_site(s["after"], s["failed"]): s["lookups"] for s in old["sites"]["next"]}
    for entry in new["sites"]["next"]:
        name = _site(entry["after"], entry["failed"])
        before = old_sites.get(name, {})
        for tool, count in sorted(entry["lookups"].items()):
            if tool not in before:
                review.append(f"a new lookup after {name}: {tool}")
            elif before[tool] != count:
                other.append(f"after {name}: {tool} seen {before[tool]} -> {count} times")
    for key in ("sources", "lists"):
        old_found = {
            (s["tool"], s["arg"], f["source"], f["path"])
            for s in old["bindings"].get(key, [])
            for f in s["found"]
        }
        for s in new["bindings"].get(key, []):
            for f in s["found"]:
                if (s["tool"], s["arg"], f["source"], f["path"]) not in old_found:
                    review.append(
                        f"a new source for {s['tool']}.{s['arg']}: {f['source']} `{f['path']}`"
                    )
    old_constants = {
        (c["tool"], c["arg"]): c["value"] for c in old["bindings"].get("constants", [])
    }
    for c in new["bindings"].get("constants", []):
        if old_constants.get((c["tool"], c["arg"]), object()) != c["value"]:
            review.append(f"a new constant: {c['tool']}.{c['arg']} = {c['value']!r}")
    old_shapes = {(e["tool"], e["arg"]): e for e in old["bindings"].get("shapes", [])}
    for e in new["bindings"].get("shapes", []):
        before = old_shapes.get((e["tool"], e["arg"]))
        wider = [f"a new shape ({describe(e)})"] if before is None else widening(before, e)
        name = f"{e['tool']}.{e['arg']}"
        if wider:
            review.append(f"{name} takes other characters from results: {'; '.join(wider)}")
        moved = None if before is None else length_change(before, e)
        if moved:
            other.append(f"{name}: the values' {moved}")
    for tool in sorted(
        set(new["manifest"].get("read_by_operator", []))
        - set(old["manifest"].get("read_by_operator", []))
    ):
        review.append(f"a read on the operator's word (no readOnlyHint: true): {tool}")
    if old["program"] != new["program"]:
        review.append("the program changed: it is code the proxy runs")
    old_t, new_t = old.get("thresholds", {}), new.get("thresholds", {})
    old_served, new_served = served_threshold(old), served_threshold(new)
    if new_served < old_served:
        review.append(
            f"a lower serving threshold: {theta_text(old_served)} -> {theta_text(new_served)}"
        )
    elif new_served > old_served:
        other.append(
            f"a higher serving threshold: {theta_text(old_served)} -> {theta_text(new_served)}"
        )
    for site in sorted(set(old_t) | set(new_t)):
        # a site with no threshold of its own is served at the flow's (served_threshold)
        before = old_t.get(site, old_served)
        after = new_t.get(site, new_served)
        if before > 1 and after <= 1:
            review.append(f"a site switched on: {site}")
        elif after < before:
            review.append(
                f"a lower threshold at {site}: {theta_text(before)} -> {theta_text(after)}"
            )
        elif after > 1 and before <= 1:
            other.append(f"a site switched off: {site}")
        elif after > before:
            other.append(
                f"a higher threshold at {site}: {theta_text(before)} -> {theta_text(after)}"
            )
    _diff_promotion(old, new, review, other)
    _diff_calibration(old, new, review, other)
    _diff_surprise(old.get("surprise"), new.get("surprise"), review, other)
    _diff_arbiter(old.get("arbiter"), new.get("arbiter"), review, other)
    if old["habit"]["alpha"] != new["habit"]["alpha"]:
        other.append(f"α {old['habit']['alpha']:.3f} -> {new['habit']['alpha']:.3f}")
    old_ep, new_ep = old["provenance"]["habit_episodes"], new["provenance"]["habit_episodes"]
    if old_ep != new_ep:
        other.append(f"learned from {old_ep} -> {new_ep} sessions")
    for key, what in (("agreed", "binding agreement"), ("named_other", "named-other picks")):
        before, after = old["bindings"].get(key, {}), new["bindings"].get(key, {})
        for tool in sorted(set(before) | set(after)):
            if before.get(tool) != after.get(tool):
                other.append(f"{tool}'s {what} {before.get(tool)} -> {after.get(tool)}")
    if old["habit"]["levels"] != new["habit"]["levels"]:
        other.append("habit counts changed")
    if old["reach"]["levels"] != new["reach"]["levels"]:
        other.append("reach counts changed")
    return review, other


def acts_at(flow: dict, site: str) -> bool:
    """Whether the flow's promotion lets it act at a site: it has no promotion record, or the
    record promotes the site (elsewhere it decides in shadow)."""
    record = flow.get("promoted")
    return record is None or bool(record["sites"].get(site, {}).get("promoted"))


def promotion_evidence(entry: dict | None) -> str:
    """A site's promotion evidence in words."""
    if not entry:
        return "not scored"
    if not entry["lookups"]:
        return f"{entry['decisions']} decisions, no lookup it would make"
    return (
        f"the agent later made {entry['used']} of the {entry['lookups']} lookups it would make "
        f"({entry['used'] / entry['lookups']:.0%}), lower bound {entry['lower']:.2f}, "
        f"{entry['tasks']} tasks"
    )


def _promotion_summary(record: dict | None) -> str:
    if record is None:
        return "no promotion record (acts at every site)"
    bar = record["bar"]
    promoted = sorted(s for s, e in record["sites"].items() if e["promoted"])
    return (
        f"{len(promoted)} of {len(record['sites'])} sites promoted"
        + (f" ({', '.join(promoted)})" if promoted else "")
        + f" at threshold {theta_text(bar['threshold'])}, used ≥ {bar['min_used']:g}, "
        f"lower bound ≥ {bar['min_lower']:g}, ≥ {bar['min_tasks']} tasks"
    )


def _diff_promotion(old: dict, new: dict, review: list[str], other: list[str]) -> None:
    """A site that now acts where it did not needs review (only sites in both flows: a new
    site's lookups are listed already); a site that no longer acts is listed."""
    old_rec, new_rec = old.get("promoted"), new.get("promoted")
    if old_rec == new_rec:
        return
    sites = {_site(s["after"], s["failed"]) for s in old["sites"]["next"]} & {
        _site(s["after"], s["failed"]) for s in new["sites"]["next"]
    }
    entries = (new_rec or {}).get("sites", {})
    for site in sorted(sites):
        before, after = acts_at(old, site), acts_at(new, site)
        if after and not before:
            if new_rec is None:
                review.append(f"a site acts again (the promotion record was removed): {site}")
            else:
                review.append(f"a site promoted: {site} ({promotion_evidence(entries.get(site))})")
        elif before and not after:
            other.append(f"a site not promoted: {site} ({promotion_evidence(entries.get(site))})")
    other.append(f"promotion: {_promotion_summary(old_rec)} -> {_promotion_summary(new_rec)}")


RAISED = 1.0  # an offset raised by this much (log-odds: ×2.7) can make the flow act anew


def _diff_calibration(old: dict, new: dict, review: list[str], other: list[str]) -> None:
    """A calibration map added or removed changes every decision: review. A changed map: its
    intercept and slope, and every offset, listed; an offset raised by RAISED or more (a
    lookup now served at higher odds there) needs review."""
    before, after = old.get("calibration") or {}, new.get("calibration") or {}
    for decider in sorted(set(before) | set(after)):
        was, now = before.get(decider), after.get(decider)
        if was == now:
            continue
        if now is None:
            review.append(
                f"the calibration map for {decider} removed: probability × binding chance "
                "decides again"
            )
            continue
        if was is None:
            review.append(
                f"a calibration map for {decider} added (fitted on {now['options']} options): "
                "it decides in place of probability × binding chance"
            )
            continue
        other.append(
            f"{decider} calibration: intercept {was['intercept']:.3f} -> {now['intercept']:.3f},"
            f" slope {was['slope']:.3f} -> {now['slope']:.3f} (fitted on {was['options']} -> "
            f"{now['options']} options)"
        )
        for part, words in (("sites", "after"), ("mentions", "bound as")):
            old_part, new_part = was.get(part, {}), now.get(part, {})
            for outer in sorted(set(old_part) | set(new_part)):
                old_in, new_in = old_part.get(outer, {}), new_part.get(outer, {})
                for inner in sorted(set(old_in) | set(new_in)):
                    a, b = old_in.get(inner, 0.0), new_in.get(inner, 0.0)
                    if a == b:
                        continue
                    where = f"{inner} {words} {outer}" if part == "sites" else f"{outer} {words}"
                    where += "" if part == "sites" else f" {inner}"
                    line = f"{decider} calibration offset of {where}: {a:+.2f} -> {b:+.2f}"
                    (review if b - a >= RAISED else other).append(line)


def _gate_text(gate: dict) -> str:
    return f"above {theta_text(gate['threshold'])} nats per step over {gate['window']} steps"


def _diff_surprise(old: dict | None, new: dict | None, review: list[str], other: list[str]) -> None:
    """The surprise gate hands back once the agent leaves its habit: a gate removed, raised
    or widened trips later or never, so the flow acts where it did not (review); one added,
    lowered or narrowed only hands back sooner."""
    if old == new:
        return
    if new is None:
        assert old is not None
        review.append(
            f"the surprise gate was removed (it handed back {_gate_text(old)}): the flow keeps "
            "acting after the agent leaves its habit"
        )
    elif old is None:
        other.append(f"a surprise gate was added: it hands back {_gate_text(new)}")
    elif new["threshold"] > old["threshold"] or new["window"] > old["window"]:
        review.append(f"the surprise gate may trip later: {_gate_text(old)} -> {_gate_text(new)}")
    elif (new["threshold"], new["window"]) != (old["threshold"], old["window"]):
        other.append(f"the surprise gate trips sooner: {_gate_text(old)} -> {_gate_text(new)}")
    else:  # the same gate, learned again
        other.append(
            f"the surprise gate learned again from {old.get('sessions')} -> "
            f"{new.get('sessions')} sessions (quantile {old.get('quantile')} -> "
            f"{new.get('quantile')})"
        )


def _diff_arbiter(old: dict | None, new: dict | None, review: list[str], other: list[str]) -> None:
    """An arbiter added, a different model asked, or every read offered at every site changes
    what the flow may do: review. Refitted weights, records and predicates are listed."""
    if old == new:
        return
    if new is None:
        other.append(f"the arbiter was removed (it asked {old['model']})")  # type: ignore[index]
        return
    if old is None:
        review.append(
            f"an arbiter added: it asks {new['model']} at each decision and decides with its "
            "answers (the proxy's default decider for this flow)"
        )
        return
    if old["model"] != new["model"]:
        review.append(f"the arbiter asks another model: {old['model']} -> {new['model']}")
    if new["manifest_options"] and not old["manifest_options"]:
        review.append("the arbiter offers every read tool at every site (--manifest-options)")
    if [f["weights"] for f in old["folds"]] != [f["weights"] for f in new["folds"]]:
        other.append(
            f"the arbiter's weights changed ({len(old['folds'])} -> {len(new['folds'])} "
            f"fits, {old['cases']} -> {new['cases']} decisions)"
        )
    if old["predicates"] != new["predicates"] or old["weighed"] != new["weighed"]:
        other.append(
            "the arbiter's predicates changed: "
            f"{', '.join(p['id'] for p in old['predicates']) or 'none'} -> "
            f"{', '.join(p['id'] for p in new['predicates']) or 'none'}"
        )


def diff_markdown(review: list[str], other: list[str]) -> str:
    out = ["# Flow changes", ""]
    out += ["## Needs review", ""] + ([f"- {r}" for r in review] or ["- nothing"]) + [""]
    out += ["## Changed (no review needed)", ""] + ([f"- {o}" for o in other] or ["- nothing"])
    return "\n".join(out) + "\n"
