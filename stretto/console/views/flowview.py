"""A flow as the console shows it: what it would look up at each site at a threshold (the
review's flow-show summary), as a graph, with the replay figures on the recorded sessions of
its domain, and the diff between two flows."""

from __future__ import annotations

import threading
from collections import OrderedDict

from stretto.console import adapter
from stretto.console.threshold import RULE
from stretto.console.views.catalog import Catalog, FlowEntry

REPLAYS_KEPT = 256


def parse_threshold(text: str | None, default: float) -> float:
    """A threshold from a query parameter: a number in [0, 1], or above 1 for "off"."""
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"threshold {text!r}: expected a number, e.g. 0.3") from None
    if not value >= 0 or value != value or value == float("inf"):
        raise ValueError(f"threshold {text!r}: expected {RULE} (above 1: off)")
    return value


def listing(entry: FlowEntry) -> dict:
    flow = entry.flow
    out = {
        "name": entry.name,
        "valid": flow is not None,
        "error": entry.error,
        "modified_unix_ms": entry.modified_unix_ms,
        "role": entry.role,
        "staged_beside": entry.staged_beside,
    }
    if flow is not None:
        out |= {
            "domain": flow["manifest"]["domain"],
            "sites": len(flow["sites"]["next"]),
            "reads": len(flow["sites"]["reads"]),
            "sessions": flow["provenance"]["habit_episodes"],
            "compiled_unix_ms": flow["provenance"]["compiled_unix_ms"],
            "promoted": flow.get("promoted") is not None,
            "thresholds": bool(flow.get("thresholds")),
        }
    return out


def detail(entry: FlowEntry, threshold: float) -> dict:
    """The flow at a threshold: its sites with what each would look up, the graph, its
    bindings and promotion evidence."""
    flow = entry.flow
    assert flow is not None
    summary = adapter.flow_summary(flow, threshold)
    for site in summary["sites"]:
        for lookup in site["lookups"]:
            lookup["score"] = (
                None if lookup["chance"] is None else lookup["reach"] * lookup["chance"]
            )
        promotion = site["promotion"]
        if promotion is not None:
            promotion["text"] = adapter.promotion_evidence(promotion["evidence"])
    return listing(entry) | {
        "threshold": threshold,
        "summary": summary,
        "graph": graph(summary),
        "looked_up": sorted(
            f"{s['site']} → {lk['tool']}"
            for s in summary["sites"]
            for lk in s["lookups"]
            if lk["looks_up"]
        ),
    }


def graph(summary: dict) -> dict:
    """Sites on the left, the lookups they offer on the right; an edge per (site, lookup)
    with its reach probability and whether it is looked up at the threshold."""
    bindings = {b["tool"]: b for b in summary["bindings"]}
    nodes, edges = [], []
    lookups = sorted({lk["tool"] for s in summary["sites"] for lk in s["lookups"]})
    for row, site in enumerate(summary["sites"]):
        nodes.append(
            {"id": f"site:{site['site']}", "label": site["site"], "kind": "site", "row": row}
        )
    for row, tool in enumerate(lookups):
        binding = bindings.get(tool)
        nodes.append(
            {
                "id": f"lookup:{tool}",
                "label": tool,
                "kind": "lookup",
                "row": row,
                "binding": binding_text(binding) if binding else "no arguments learned",
            }
        )
    for site in summary["sites"]:
        for lookup in site["lookups"]:
            edges.append(
                {
                    "id": f"{site['site']}->{lookup['tool']}",
                    "source": f"site:{site['site']}",
                    "target": f"lookup:{lookup['tool']}",
                    "reach": lookup["reach"],
                    "chance": lookup["chance"],
                    "looks_up": lookup["looks_up"],
                    "verdict": lookup["verdict"],
                }
            )
    return {"nodes": nodes, "edges": edges}


def binding_text(binding: dict) -> str:
    parts = []
    for arg in binding["required"]:
        found = ", ".join(f"{f['source']} {f['path']} ({f['count']})" for f in arg["found"])
        parts.append(f"{arg['arg']} ← {found or 'nowhere (the LLM supplies it)'}")
    for arg, value in binding["constants"].items():
        parts.append(f"{arg} = {value!r}")
    chance = binding["chance"]
    parts.append(f"binding chance {chance['unnamed']:.2f} (named {chance['named']:.2f})")
    return "; ".join(parts)


class Replays:
    """Replay figures per (flow version, threshold, sessions), kept: moving the slider back
    and forth replays each setting once."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.lock = threading.Lock()
        self.kept: OrderedDict[tuple, dict] = OrderedDict()

    def figures(self, entry: FlowEntry, threshold: float, costs: tuple[float, float]) -> dict:
        flow = entry.flow
        assert flow is not None
        domain = flow["manifest"]["domain"]
        episodes = self.catalog.episodes(domain)
        key = (
            entry.name,
            entry.modified_unix_ms,
            round(threshold, 4),
            tuple(sorted(e.id for e in episodes)),
        )
        with self.lock:
            known = self.kept.get(key)
        if known is None:
            known = (
                adapter.replay_totals(flow, episodes, threshold)
                if episodes
                else {"episodes": 0, "decider": None}
            )
            with self.lock:
                self.kept[key] = known
                while len(self.kept) > REPLAYS_KEPT:
                    self.kept.popitem(last=False)
        beta, delta = costs
        out = dict(known)
        if episodes:
            out["utility"] = beta * known["turns_saved"] - delta * known["detours"]
        out |= {"threshold": threshold, "costs": {"beta": beta, "delta": delta}}
        out["sessions"] = f"the {len(episodes)} recorded {domain} sessions (no flow served)"
        return out


def diff(old: FlowEntry, new: FlowEntry, threshold: float) -> dict:
    """What changed from `old` to `new`: the review's lists (needs review first), and at the
    threshold the lookups one would make and the other not."""
    assert old.flow is not None and new.flow is not None
    review, other = adapter.flow_diff(old.flow, new.flow)
    before = set(detail(old, threshold)["looked_up"])
    after = set(detail(new, threshold)["looked_up"])
    return {
        "from": old.name,
        "to": new.name,
        "threshold": threshold,
        "needs_review": review,
        "other": other,
        "at_threshold": {
            "new_lookups": sorted(after - before),
            "dropped_lookups": sorted(before - after),
            "unchanged": sorted(after & before),
        },
    }
