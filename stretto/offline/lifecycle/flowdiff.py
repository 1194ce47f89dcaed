"""`stretto flow-diff`: what changed between two flows, split into the changes that need a
reviewer's eyes (the new flow can do something the old could not: a new tool, lookup,
binding source or constant, a lower threshold, a site promoted, a gate loosened, an arbiter
added) and the rest (probabilities and counts) — ../shared/spec/algorithms.md §12. Staging,
versions, the relearn job and the console all judge a new flow by this one list; what a
single flow may do is `stretto.offline.lifecycle.flowshow`'s."""

from __future__ import annotations

from stretto.model.decide import served_threshold, site_name, theta_text
from stretto.model.shape import describe, length_change, widening
from stretto.offline.lifecycle.promote import acts_at, promotion_evidence, promotion_summary


def diff(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """(changes that need review: the new flow can do something the old could not; other
    changes: probabilities and counts)."""
    review, other = [], []
    old_reads, new_reads = set(old["sites"]["reads"]), set(new["sites"]["reads"])
    for tool in sorted(new_reads - old_reads):
        review.append(f"a new tool it may call: {tool}")
    old_sites = {site_name(s["after"], s["failed"]): s["lookups"] for s in old["sites"]["next"]}
    for entry in new["sites"]["next"]:
        name = site_name(entry["after"], entry["failed"])
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


def _diff_promotion(old: dict, new: dict, review: list[str], other: list[str]) -> None:
    """A site that now acts where it did not needs review (only sites in both flows: a new
    site's lookups are listed already); a site that no longer acts is listed."""
    old_rec, new_rec = old.get("promoted"), new.get("promoted")
    if old_rec == new_rec:
        return
    sites = {site_name(s["after"], s["failed"]) for s in old["sites"]["next"]} & {
        site_name(s["after"], s["failed"]) for s in new["sites"]["next"]
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
    other.append(f"promotion: {promotion_summary(old_rec)} -> {promotion_summary(new_rec)}")


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
