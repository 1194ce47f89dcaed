"""The evaluation's report: Markdown, and the Parquet tables (docs/formats.md §5, "Tables")
written with polars. polars is imported by `write_tables` alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from stretto.home import private_dirs, write_private
from stretto.offline.evaluate.estimators import ESTIMATORS, NAMES, WEIGHTED
from stretto.offline.evaluate.labelling import Labelled
from stretto.offline.evaluate.target import METRICS

if TYPE_CHECKING:
    import polars as pl


def _number(value: float) -> str:
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _cell(estimates: dict, name: str, metric: str) -> str:
    """An estimate with its intervals (analytic, then bootstrap), or `refused`."""
    value = estimates[name]
    if value is None:
        return "refused"
    text = _number(value[metric])
    bounds = estimates["intervals"].get(name) or {}
    parts = [
        f"[{_number(b[metric][0])}, {_number(b[metric][1])}]"
        for b in (bounds.get("analytic"), bounds.get("bootstrap"))
        if b is not None
    ]
    return " ".join([text, *parts])


def markdown(results: list[dict]) -> str:
    """The report: the settings, then per target its diagnostics, every estimator in total,
    and doubly robust estimates per site."""
    if not results:
        return "# Evaluation\n\nNo targets.\n"
    s = results[0]["settings"]
    epsilon = ", ".join(f"{e:g}" for e in s["epsilon"]) or "-"
    out = [
        "# Evaluation",
        "",
        f"{s['decisions']} decisions in {s['sessions']} sessions, logged by the "
        f"{s['logging_decider'] or 'unknown'} decider exploring at ε = {epsilon} "
        f"({s['explored']} explored).",
        "",
        "Values are totals over these decisions: the lookups a rule would make, those the agent "
        "made itself before its next write (used), the others (detours), and the turns they "
        "would have saved. Intervals: 95%, normal then bootstrap over sessions "
        f"({s['bootstrap']} draws). Weighted estimates need an effective sample size of "
        f"{s['min_ess']:g}; Switch-DR uses the model where a weight exceeds {s['switch_tau']:g}.",
    ]
    for result in results:
        total = result["total"]
        out += [
            "",
            f"## {result['target']['name']}",
            "",
            f"Looks up at {total['looks']} of {total['decisions']} decisions, the logged choice "
            f"at {total['matched']}; effective sample size {total['ess']:.1f} "
            f"({total['ess_share']:.0%} of the lookups), largest weight "
            f"{total['max_weight']:.2f}, {total['unsupported']} the logging rule could not "
            f"have taken ({total['unsupported_share']:.0%}).",
        ]
        if total["refusal"]:
            out += ["", f"Weighted estimates refused: {total['refusal']}."]
        out += [
            "",
            "| estimator | lookups | used | detours | turns saved |",
            "|---|---|---|---|---|",
        ]
        for name in ESTIMATORS:
            cells = [_cell(total, name, metric) for metric in METRICS]
            out.append(f"| {NAMES[name]} | " + " | ".join(cells) + " |")
        out += [
            "",
            "| site | decisions | looks | ESS | unsupported | used (DR) | turns (DR) | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for site, e in result["sites"].items():
            out.append(
                f"| {site} | {e['decisions']} | {e['looks']} | {e['ess']:.1f} | "
                f"{e['unsupported']} | {_cell(e, 'dr', 'used')} | {_cell(e, 'dr', 'turns')} | "
                f"{e['refusal'] or ''} |"
            )
    return "\n".join(out) + "\n"


def decision_rows(labelled: Labelled) -> tuple[list[dict], list[dict]]:
    """The labelled decisions as two flat tables: one row per decision, one per option."""
    decisions, options = [], []
    for r in labelled.rows:
        decisions.append(
            {
                "session": r["session"],
                "line": r["line"],
                "address": r["address"],
                "after": json.dumps(r["after"]),
                "site": r["site"],
                "action": r["action"],
                "tool": r["tool"],
                "options": len(r["options"]),
                "executed": r["executed"],
                "shadow": r["shadow"],
                "epsilon": r["epsilon"],
                "explored": r["explored"],
                "propensity": r["propensity"],
                "greedy": r["greedy"],
                "greedy_inferred": r["greedy_inferred"],
            }
        )
        for i, (o, label) in enumerate(zip(r["options"], r["labels"], strict=True)):
            options.append(
                {
                    "session": r["session"],
                    "line": r["line"],
                    "site": r["site"],
                    "option": i,
                    "tool": o["tool"],
                    "p": o["p"],
                    "habit": o["habit"],
                    "binding": o["binding"],
                    "arguments": None
                    if o["arguments"] is None
                    else json.dumps(o["arguments"], sort_keys=True, ensure_ascii=False),
                    "unbound": o["unbound"],
                    "taken": r["taken"] == i,
                    "propensity": o["propensity"],
                    **label,
                }
            )
    return decisions, options


DIAGNOSTICS = (
    "decisions",
    "looks",
    "matched",
    "unsupported",
    "unsupported_share",
    "ess",
    "ess_share",
    "max_weight",
    "sum_weights",
    "refusal",
)


def estimate_rows(results: list[dict]) -> tuple[list[dict], list[dict]]:
    """The estimates in long form (one row per target × scope × estimator × metric) and the
    weight diagnostics (one row per target × scope); `site` null = every site."""
    estimates, diagnostics = [], []
    for result in results:
        t = result["target"]
        scopes = [(None, result["total"]), *result["sites"].items()]
        for site, e in scopes:
            head = {"target": t["name"], "decider": t["decider"], "threshold": t["threshold"]}
            diagnostics.append({**head, "site": site, **{k: e[k] for k in DIAGNOSTICS}})
            for name in ESTIMATORS:
                bounds = e["intervals"].get(name) or {}
                analytic, boot = bounds.get("analytic"), bounds.get("bootstrap")
                for metric in METRICS:
                    estimates.append(
                        {
                            **head,
                            "site": site,
                            "estimator": name,
                            "metric": metric,
                            "estimate": None if e[name] is None else e[name][metric],
                            "se": (e["se"].get(name) or {}).get(metric),
                            "analytic_low": analytic[metric][0] if analytic else None,
                            "analytic_high": analytic[metric][1] if analytic else None,
                            "bootstrap_low": boot[metric][0] if boot else None,
                            "bootstrap_high": boot[metric][1] if boot else None,
                            "refusal": e["refusal"]
                            if e[name] is None and name in WEIGHTED
                            else None,
                        }
                    )
    return estimates, diagnostics


def table_schemas() -> dict[str, pl.Schema]:
    """Each table's columns and their types, so that an empty table keeps them."""
    import polars as pl  # heavy: only the tables need polars

    scope = {"target": pl.String, "decider": pl.String, "threshold": pl.Float64, "site": pl.String}
    return {
        "decisions": pl.Schema(
            {
                "session": pl.String,
                "line": pl.Int64,
                "address": pl.String,
                "after": pl.String,
                "site": pl.String,
                "action": pl.String,
                "tool": pl.String,
                "options": pl.Int64,
                "executed": pl.Boolean,
                "shadow": pl.Boolean,
                "epsilon": pl.Float64,
                "explored": pl.Boolean,
                "propensity": pl.Float64,
                "greedy": pl.String,
                "greedy_inferred": pl.Boolean,
            }
        ),
        "options": pl.Schema(
            {
                "session": pl.String,
                "line": pl.Int64,
                "site": pl.String,
                "option": pl.Int64,
                "tool": pl.String,
                "p": pl.Float64,
                "habit": pl.Float64,
                "binding": pl.Float64,
                "arguments": pl.String,
                "unbound": pl.String,
                "taken": pl.Boolean,
                "propensity": pl.Float64,
                "used": pl.Boolean,
                "detour": pl.Boolean,
                "turn": pl.Float64,
                "next": pl.Boolean,
            }
        ),
        "estimates": pl.Schema(
            {
                **scope,
                "estimator": pl.String,
                "metric": pl.String,
                "estimate": pl.Float64,
                "se": pl.Float64,
                "analytic_low": pl.Float64,
                "analytic_high": pl.Float64,
                "bootstrap_low": pl.Float64,
                "bootstrap_high": pl.Float64,
                "refusal": pl.String,
            }
        ),
        "diagnostics": pl.Schema(
            {
                **scope,
                "decisions": pl.Int64,
                "looks": pl.Int64,
                "matched": pl.Int64,
                "unsupported": pl.Int64,
                "unsupported_share": pl.Float64,
                "ess": pl.Float64,
                "ess_share": pl.Float64,
                "max_weight": pl.Float64,
                "sum_weights": pl.Float64,
                "refusal": pl.String,
            }
        ),
    }


def write_tables(labelled: Labelled, results: list[dict], folder: Path | str) -> list[Path]:
    """decisions, options, estimates and diagnostics as Parquet, and the report as Markdown;
    the paths written."""
    import polars as pl  # heavy: only the tables need polars

    folder = private_dirs(Path(folder), own=False)
    decisions, options = decision_rows(labelled)
    estimates, diagnostics = estimate_rows(results)
    tables = {
        "decisions": decisions,
        "options": options,
        "estimates": estimates,
        "diagnostics": diagnostics,
    }
    written = []
    for name, schema in table_schemas().items():
        data = pl.DataFrame(tables[name], schema=schema)
        written.append(write_private(folder / f"{name}.parquet", data.write_parquet))
    written.append(write_private(folder / "report.md", markdown(results)))
    return written
