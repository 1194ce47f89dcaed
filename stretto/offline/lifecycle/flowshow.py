"""`stretto flow-show`: what a flow may do, for a reviewer — its tools, what it may look up
after each call and why (reach × binding chance against the threshold), where each argument
is bound from, its program and its arbiter (../shared/spec/algorithms.md §12). As data
(`summary`, which the console reads too) and as Markdown (`markdown`). What changed between
two flows is `stretto.offline.lifecycle.flowdiff`'s."""

from __future__ import annotations

import time

from stretto.model.binding import Rules, smooth
from stretto.model.decide import served_threshold, site_name, theta_text
from stretto.model.flow import reach_model
from stretto.model.program import is_standard
from stretto.model.shape import describe
from stretto.offline.lifecycle.promote import acts_at, promotion_evidence, promotion_summary

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
        name = site_name(entry["after"], entry["failed"])
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
            f"**Promotion.** {promotion_summary(flow['promoted'])}. The flow acts only at "
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
