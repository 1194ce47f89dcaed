"""The replay benchmark (../shared/spec/results.md §2 and §4) on τ²-bench's results files
(bench/tau2data.py: --tau2 DIR, else $STRETTO_TAU2, else ../shared/data/tau2), and the goals of
issue 19.

For each domain with a train/test split: learn one flow (`stretto compile --calibrate`, the
same pipeline as `stretto learn`) from the successful training-task episodes of every
available agent; then replay each agent's test episodes "from the record" with the flow
served by reach at the domain's break-even threshold θ* = δ/(β+δ) on the calibrated score
(the served configuration) and by habit at θ 0.3 (the next-step rule, the baseline), scoring
every option for calibration. Per domain and agent: turns saved %, detours per episode, the
share of the read-only ceiling taken, utility at the domain's counted costs, ECE/Brier/AUC of
the served score, each with a 95% interval from bootstrap draws over tasks (one resample
shared by both deciders), the paired reach − habit difference, and the reliability diagram of
the served score (docs/reliability-<domain>.png). Then per-site thresholds searched on the
training episodes and judged on the test episodes, and a threshold sweep pooled per domain.

From bench/quality.py (learned flows cached under ~/.cache/stretto-quality/): the goals of
issue 19 with the figures reached, the served flow on agents it never saw (leave one agent
out, issue 42), every change tried, judged against the current flow (main's
code at bench.quality.MAIN) by a paired bootstrap over tasks, and the learning curve
(docs/learning-curve.png), and where the served flow's missed share goes (bench/missed.py). The
changes tried are recorded in bench/tried.py. Prints the page and writes it to docs/results.md.

With `--oracle URI` each domain's flow also gets an arbiter (`stretto compile --oracle URI`:
fitted on the test tasks' episodes, five folds cross-fitted by task group, so each test
episode is judged by a fold that never saw its task), and each agent gets an arbiter row,
replayed asking the same runner at θ 0.3 (answers cached under the run's temporary folder).
`simulate://habit` shows the machinery end to end without a model; its numbers say nothing
about a model's quality.

    .venv/bin/python bench/replay.py [--draws 1000] [--curve-draws 5] [--no-write]
        [--oracle simulate://habit [--oracle-base-url URL]]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tau2data import add_option, choose, tau2  # noqa: E402
from bench.tried import NOT_KEPT, NOT_TRIED, ROUND1, TRIED  # noqa: E402
from stretto.model.flow import load_flow  # noqa: E402
from stretto.offline.episode_judges import OracleOptions  # noqa: E402

DOCS = ROOT / "docs"
STRETTO = str(Path(sys.executable).parent / "stretto")
THETA = 0.3
SWEEP = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# input tokens of a saved turn (β) and of a detour (δ), counted by the reference
COSTS = {"retail": (5824, 2467), "airline": (7051, 1022), "telecom": (8929, 1178)}
# the reference's figures that travel across agents (results.md §4)
REFERENCE = {"retail": {"reach": 0.864, "habit": 0.762}}
GOALS = {"retail": 90.0, "airline": 60.0}  # share of the ceiling at ≤ 1.0 detours/episode
MAX_DETOURS, MAX_ECE, CURVE_SHARE = 1.0, 0.05, 0.95
# changes judged on agents the flow never saw as well (bench/quality.py --loao): per-site
# thresholds searched on the training episodes, against the served flow
LOAO_CHANGES = (("ours+cal+search@flow", "ours+cal@flow"),)


def domain_files(domain: str) -> list[Path]:
    """The domain's τ²-bench results files listed in MANIFEST.json (a file kept compressed,
    `NAME.gz`, stands for NAME, as in tests/data/tau2)."""
    manifest = json.loads((tau2() / "MANIFEST.json").read_text())["files"]
    paths = [
        tau2() / f["file"]
        for f in manifest
        if f["domain"] == domain and f["file"].startswith("results/")  # τ²-bench, not τ-bench v1
    ]
    return [p if p.exists() else p.with_name(p.name + ".gz") for p in paths]


def compile_flow(
    domain: str, files: list[Path], out: Path, home: Path, oracle: list[str] = ()
) -> dict:
    done = subprocess.run(
        [STRETTO, "compile", "--calibrate", "--domain", domain, "--out", str(out)]
        + ["--home", str(home), *oracle]
        + ["--split", str(tau2() / "domains" / domain / "split_tasks.json")]
        + ["--tools", str(tau2() / "domains" / "tau2_tools.json"), "--results"]
        + [str(f) for f in files],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"compile {domain} failed:\n{done.stderr}")
    print(done.stdout.strip(), file=sys.stderr)
    return load_flow(out)


def theta_star(domain: str) -> float:
    beta, delta = COSTS[domain]
    return delta / (beta + delta)


def fmt(value, interval=None, digits=1, sign=False) -> str:
    if value is None:
        return "n/a"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    text = f.format(value)
    if interval:
        text += f" [{f.format(interval[0])}, {f.format(interval[1])}]"
    return text


def cell(entry, digits, sign=False) -> str:
    value, lo, hi = entry
    return fmt(value, (lo, hi), digits, sign)


def diff(entry, digits) -> str:
    _, _, d, lo, hi = entry
    return fmt(d, (lo, hi), digits, sign=True)


def domain_section(
    name: str, draws: int, tmp: Path, plots: Path, q, oracle: OracleOptions | None = None
) -> tuple[list[str], dict]:
    """The domain's tables, and the figures the goals need (with `oracle`, an arbiter row
    too, and `unanswered`: its decisions the oracle could not answer)."""
    from bench import paired as p
    from stretto.offline.reports.plots import reliability_diagram
    from stretto.offline.reports.reliability import reliability
    from stretto.offline.reports.search import Search, with_thresholds

    domain = q.domain(name)
    files = domain_files(name)
    oracle_args = []
    if oracle is not None:
        oracle_args = ["--oracle", oracle.uri, "--oracle-cache", str(oracle.cache)]
        oracle_args += ["--oracle-base-url", oracle.base_url] if oracle.base_url else []
    flow = compile_flow(name, files, tmp / f"{name}.flow.json", tmp, oracle_args)
    costs, served = COSTS[name], theta_star(name)
    runs = {
        "reach": p.replayed(domain, flow, "reach", served),
        "habit": p.replayed(domain, flow, "habit", THETA),
    }
    if oracle is not None:
        runs["arbiter"] = p.replayed(domain, flow, "arbiter", THETA, oracle)
    table = flow["calibration"]["reach"] if "calibration" in flow else None
    lines = [
        f"## {name}",
        "",
        f"Flow: {flow['provenance']['habit_episodes']} successful training episodes, "
        f"{len(flow['sites']['next'])} sites. Costs β {costs[0]:,}, δ {costs[1]:,} "
        f"(break-even θ* {served:.3f}: the served threshold). "
        + (
            f"Calibration map: {table['options']} options of {table['episodes']} training "
            f"episodes in {table['folds']} folds ({table['used']} made by the agent), penalty "
            f"{table['penalty']:g}, slope {table['slope']:.3f}."
            if table
            else "No calibration map (nothing to fit)."
        )
        + (
            f" Its arbiter fitted on {flow['arbiter']['cases']} decisions of "
            f"{flow['arbiter']['tasks']} test tasks ({len(flow['arbiter']['folds'])} folds)."
            if oracle is not None
            else ""
        ),
        "",
        "| agent | decider | test episodes | turns saved % | detours / episode | "
        "share of ceiling % | utility / episode | ECE | Brier | AUC |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    agents = sorted({a for a, _ in domain.test})
    figures: dict = {}
    gaps = []
    for agent in [*agents, None]:
        episodes = sum(1 for a, _ in domain.test if agent is None or a == agent)
        for d in runs:
            c = p.intervals(runs[d], costs, agent, draws)
            label = "**all agents**" if agent is None else agent
            what = f"reach at θ* {served:.3f}" if d == "reach" else f"{d} at {THETA:g}"
            lines.append(
                f"| {label} | {what} | {episodes} | {cell(c['saved %'], 1)} | "
                f"{cell(c['detours/ep'], 2)} | {cell(c['ceiling %'], 1)} | "
                f"{cell(c['utility/ep'], 0)} | {cell(c['ece'], 3)} | {c['brier'][0]:.3f} | "
                f"{fmt(c['auc'], None, 3)} |"
            )
            if agent is None:
                figures[d] = c
        gap = p.paired(runs["habit"], runs["reach"], costs, agent, draws)
        gaps.append((agent, gap))
    pooled_gap = gaps[-1][1]
    figures["gap"] = pooled_gap
    figures["unanswered"] = runs["arbiter"].unanswered if oracle is not None else 0
    lines += [
        "",
        "Reach − habit (paired, all agents): share of ceiling "
        f"{diff(pooled_gap['ceiling %'], 1)} points, detours/episode "
        f"{diff(pooled_gap['detours/ep'], 2)}, utility {diff(pooled_gap['utility/ep'], 0)}. "
        "Share of ceiling per agent: "
        + "; ".join(f"{a} {diff(g['ceiling %'], 1)}" for a, g in gaps[:-1])
        + ".",
    ]
    if name in REFERENCE:
        ref = REFERENCE[name]
        lines.append(
            f"The reference (nine other agents): reach {100 * ref['reach']:.1f}%, habit "
            f"{100 * ref['habit']:.1f}% of the ceiling; ours/reference: reach "
            f"{figures['reach']['ceiling %'][0] / (100 * ref['reach']):.2f}, habit "
            f"{figures['habit']['ceiling %'][0] / (100 * ref['habit']):.2f}."
        )
    scores = [(s, u) for _, s, u in runs["reach"].scores]
    plot = plots / f"reliability-{name}.png"
    reliability_diagram(
        reliability([s for s, _ in scores], [u for _, u in scores]),
        plot,
        title=f"{name}: the served score (reach at θ* {served:.3f}), test episodes",
        what="made by the agent before its next write",
    )
    lines += ["", f"Reliability of the served score: ![{name}]({plot.name})"]
    # Per-site thresholds searched on the training episodes, judged on the test ones.
    train = [e for e in domain.train if e.succeeded]
    chosen = Search(flow, train, decider="reach", threshold=served, costs=costs).run()
    tuned = p.figures(
        sum(
            p.replayed(domain, with_thresholds(flow, chosen.setting), "reach", served).rows.values()
        ),
        costs,
    )
    base = {k: v[0] for k, v in figures["reach"].items() if isinstance(v, tuple)}
    changed = {s: t for s, t in chosen.setting.items() if t != served}
    lines += [
        "",
        f"Search (`stretto search` on the {len(train)} successful training episodes from θ*, at "
        f"these costs), replayed on the test episodes: reach with the searched thresholds saves "
        f"{float(tuned['saved %']):.1f}% of turns (at θ* everywhere: {base['saved %']:.1f}%), "
        f"{float(tuned['detours/ep']):.2f} detours per episode ({base['detours/ep']:.2f}), "
        f"utility {float(tuned['utility/ep']):.0f} tokens per episode "
        f"({base['utility/ep']:.0f}). Thresholds changed: "
        + (", ".join(f"{s} {t:g}" for s, t in sorted(changed.items())) or "none")
        + ".",
        "",
        f"Threshold sweep ({name}, all agents' test episodes; reach on the calibrated score):",
        "",
        "| θ | reach: saved % | reach: detours / ep | reach: ceiling % | "
        "habit: saved % | habit: detours / ep | habit: ceiling % |",
        "|---|---|---|---|---|---|---|",
    ]
    for theta in SWEEP:
        row = [f"{theta:g}"]
        for d in ("reach", "habit"):
            r = p.figures(sum(p.replayed(domain, flow, d, theta).rows.values()), costs)
            row += [fmt(float(r["saved %"])), fmt(float(r["detours/ep"]), None, 2)]
            row.append(fmt(float(r["ceiling %"])))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    return lines, figures


def tried_section(draws: int, q) -> tuple[list[str], dict]:
    lines = [
        "## What was tried",
        "",
        "Each change judged on the test episodes by a paired bootstrap over tasks "
        f"({draws} draws) against the flow before it, pooled over agents; *losses* names "
        "every agent with a significant loss (its 95% interval below 0) in any measure. "
        "bench/quality.py prints the full tables, per agent. This round's changes are "
        f"judged against `cur+cal@*`, the flow main's code at {q.CURRENT} serves "
        "(calibrated, at θ*). The first round's rows follow as they were printed then, "
        f"against main's code at {q.MAIN} (reach at θ 0.3): its flows predate the binding's "
        "learned shapes, which the binding now needs to bind from results, so they cannot "
        "be replayed again.",
        "",
        "| change | against | domain | Δ share of ceiling | Δ detours / ep | Δ ECE | "
        "Δ utility / ep | significant losses | kept |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    judged = {}
    for label, spec, against, kept, why in TRIED:
        for name in ("retail", "airline", "telecom"):
            j = q.judge(q.domain(name), spec, against, draws)
            judged[(spec, name)] = j
            p = j["pooled"]
            losses = "; ".join(f"{a}: {m}" for a, m in j["losses"]) or "none"
            lines.append(
                f"| {label} | {against} | {name} | {diff(p['ceiling %'], 1)} | "
                f"{diff(p['detours/ep'], 2)} | {diff(p['ece'], 3)} | {diff(p['utility/ep'], 0)}"
                f" | {losses} | {kept}{': ' + why if why and name == 'retail' else ''} |"
            )
    lines += ["", "First round (as printed then):", ""]
    lines += ROUND1.read_text().splitlines()
    lines += [
        "",
        "Not kept (their code was removed) or not built (a measurement said it would not "
        "pay); figures from bench/quality.py, bench/features.py and bench/missed.py during "
        "this work:",
        "",
        "| change | measured | decision |",
        "|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in NOT_KEPT]
    lines += ["", "Not tried:", ""] + [f"- {t}" for t in NOT_TRIED]
    return lines + [""], judged


def curve_section(draws: int, plots: Path, q) -> tuple[list[str], dict]:
    from stretto.offline.reports.plots import learning_curve

    sizes = (5, 10, 20, 40, 10**9)
    lines = [
        "## Learning curve",
        "",
        f"Flows learned from n successful training episodes drawn at random ({draws} draws per "
        "n; all of them once), each replayed on every test episode of its domain. *Saving* = "
        "turns saved %; *of all* = the mean saving at n over the saving from every training "
        "episode. The served flow (calibrated on the n episodes' own cross-fitted replays, "
        "reach at θ*) against the same learning uncalibrated (reach at 0.3). Plot: "
        "![learning curve](learning-curve.png)",
        "",
        "| domain | flow | n | saving % (mean; range) | of all | share of ceiling % | "
        "detours / ep |",
        "|---|---|---|---|---|---|---|",
    ]
    curves: dict = {}
    ratios: dict = {}
    for name in ("retail", "airline", "telecom"):
        domain = q.domain(name)
        for label, spec in (("served", "ours+cal@*"), ("uncalibrated", "ours")):
            rows = q.curve(domain, q.parse(spec), sizes, draws)
            curves[f"{name}, {label}"] = rows
            full = [r for r in rows if r["n"] == max(x["n"] for x in rows)][0]["saved %"]
            for n in sorted({r["n"] for r in rows}):
                at = [r for r in rows if r["n"] == n]
                mean = sum(r["saved %"] for r in at) / len(at)
                ratio = mean / full if full else 0.0
                if n == 10:
                    ratios[(name, label)] = ratio
                lines.append(
                    f"| {name} | {label} | {n} | {mean:.1f}; {min(r['saved %'] for r in at):.1f}"
                    f"–{max(r['saved %'] for r in at):.1f} | {100 * ratio:.0f}% | "
                    f"{sum(r['ceiling %'] for r in at) / len(at):.1f} | "
                    f"{sum(r['detours/ep'] for r in at) / len(at):.2f} |"
                )
    learning_curve(curves, plots / "learning-curve.png", title="Learning from n sessions")
    return lines + [""], ratios


def goals_section(figures: dict, ratios: dict, judged: dict) -> list[str]:
    lines = [
        "## Goals (issue 19)",
        "",
        "The served configuration: the flow `stretto compile --calibrate` learns (named_other, "
        "the calibration map), reach at the domain's θ*; figures over every agent's test "
        "episodes with their 95% intervals.",
        "",
        "| goal | reached | met |",
        "|---|---|---|",
    ]
    for name, target in GOALS.items():
        r = figures[name]["reach"]
        met = r["ceiling %"][0] >= target and r["detours/ep"][0] <= MAX_DETOURS
        lines.append(
            f"| {name}: ≥ {target:g}% of the ceiling at ≤ {MAX_DETOURS:g} detours / episode | "
            f"{cell(r['ceiling %'], 1)}% at {cell(r['detours/ep'], 2)} | "
            f"{'yes' if met else 'no'} |"
        )
    g = figures["telecom"]["gap"]
    better = g["ceiling %"][3] > 0 and g["utility/ep"][3] > 0
    worse = g["detours/ep"][3] > 0  # the interval of the detours' difference above 0
    verdict = "no" if not better else "partly: more detours" if worse else "yes"
    lines.append(
        "| telecom: better than the next-step rule | reach − habit: share "
        f"{diff(g['ceiling %'], 1)} points, utility {diff(g['utility/ep'], 0)}, detours "
        f"{diff(g['detours/ep'], 2)} | {verdict} |"
    )
    for name in ("retail", "airline", "telecom"):
        e = figures[name]["reach"]["ece"]
        lines.append(
            f"| {name}: ECE of the served score ≤ {MAX_ECE:g} | {cell(e, 3)} "
            f"(plot: ![{name}](reliability-{name}.png)) | {'yes' if e[0] <= MAX_ECE else 'no'} |"
        )
    for name in ("retail", "airline", "telecom"):
        ratio = ratios.get((name, "served"))
        current = ratios.get((name, "uncalibrated"))
        if ratio is None:
            continue
        lines.append(
            f"| {name}: 10 episodes give ≥ {100 * CURVE_SHARE:.0f}% of the saving from all | "
            f"{100 * ratio:.0f}% (uncalibrated: {100 * current:.0f}%) | "
            f"{'yes' if ratio >= CURVE_SHARE else 'no'} |"
        )
    losses = [
        f"{name}: {a} ({m})"
        for name in ("retail", "airline", "telecom")
        for a, m in judged.get(("ours+cal@*", name), {}).get("losses", [])
    ]
    lines.append(
        "| nothing worse elsewhere (the served flow against main's, per domain and "
        f"agent) | significant losses: {'; '.join(losses) or 'none'} | "
        f"{'no' if losses else 'yes'} |"
    )
    return lines + [""]


NOTES = [
    "## Reading these tables",
    "",
    "- In retail only ToolOrchestra's orchestrator (labelled by its model, gpt-4.1-mini) ran "
    "the training tasks, so the retail flow is learned from one agent and replayed on two it "
    "never saw; the gpt-4.1-mini rows are its own held-out tasks. Airline's flow is learned "
    "from four agents (whissle, gpt-4o, qwen2.5-7b, ToolOrchestra) and replayed on three more.",
    "- The calibration map is fitted on replays of the training agents; where the test agents "
    "use a lookup differently (airline's get_flight_status: 6% of training options used, 36% "
    "of test options), no map fitted on training can be calibrated for them.",
    "- Telecom has 17 successful training episodes of 5 tasks by one agent against the "
    "reference's thousands; some test agents loop on one lookup (up to 96 calls of one "
    "get_details_by_id), which the ceiling counts.",
    "- The ceiling and the replay follow results.md §2.2–2.3, except that the calls of one "
    "LLM turn go out together (as through the proxy), so lookups made after the first of them "
    "answer only later turns.",
]

MODEL_NOTE = [
    "",
    "## What was measured with a real model",
    "",
    "Nothing. No System-One model was reachable where these numbers were made (no Ollama "
    "server, no API key). The arbiter rows, when present, were made with `simulate://habit`: "
    "seeded draws from the flow's own habit, half their mass on one drawn option — they show "
    "that learning, cross-fitting, asking, caching and judging run end to end on τ²-bench, and "
    "say nothing about how a model would do. The runners for real models (ollama://, claude://, "
    "openai://, jev://) are tested against local servers speaking their APIs "
    "(tests/stretto/oracle/), "
    "which checks the requests and the reading of answers, not a model's judgement.",
    "",
    "What the proxy itself costs a host (start-up, per call, throughput, big lines): "
    "[performance.md](performance.md).",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument(
        "--curve-draws", type=int, default=5, help="draws per n (default 5; 0: no curve)"
    )
    parser.add_argument("--no-write", action="store_true", help="print; leave docs/ alone")
    parser.add_argument("--oracle", metavar="URI", help="also an arbiter row, asking this runner")
    parser.add_argument("--oracle-base-url", metavar="URL", help="the runner's server")
    add_option(parser)
    args = parser.parse_args()
    choose(args.tau2)
    from bench import missed
    from bench import quality as q

    started = time.time()
    head = [
        "# Results: the replay benchmark",
        "",
        "Written by `bench/replay.py` (the protocol of ../shared/spec/results.md §4). Flows are "
        "learned per domain with `stretto compile --calibrate` from the successful "
        "training-task episodes of every agent in ../shared/data/tau2/; each agent's test-task "
        "episodes are replayed from the record with `stretto replay` (8 lookups per call, 40 "
        "per episode). *reach* = use before the next write (the set rule), served on the "
        "calibrated score at the domain's break-even θ* = δ/(β+δ); *habit* = the next-step "
        f"rule at θ {THETA:g}. Brackets: 95% intervals from {args.draws} bootstrap draws over "
        "tasks. Utility in input tokens per episode at the domain's counted costs (β per saved "
        "turn, δ per detour). docs/algorithms.md describes the methods.",
        "",
    ]
    if args.oracle:
        head += [
            f"*arbiter* = the next-step rule on the arbiter's probabilities, its answers from "
            f"`{args.oracle}`: fitted by `stretto compile --oracle {args.oracle}` on the test "
            "tasks' episodes, five folds cross-fitted by task group (each test episode is judged "
            "by a fold that never saw its task).",
            "",
        ]
    body: list[str] = []
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        plots = Path(tmp) if args.no_write else DOCS  # the plots go where the page goes
        oracle = None
        if args.oracle:
            oracle = OracleOptions(
                uri=args.oracle, cache=Path(tmp) / "oracle-cache", base_url=args.oracle_base_url
            )
        for name in ("retail", "airline", "telecom"):
            lines, figures[name] = domain_section(name, args.draws, Path(tmp), plots, q, oracle)
            body += lines
            print(f"{name}: done ({time.time() - started:.0f} s)", file=sys.stderr)
        loao, _ = q.loao_section(("retail", "airline", "telecom"), args.draws, changes=LOAO_CHANGES)
        print(f"leave one agent out: done ({time.time() - started:.0f} s)", file=sys.stderr)
        tried, judged = tried_section(args.draws, q)
        print(f"tried: done ({time.time() - started:.0f} s)", file=sys.stderr)
        tried += missed.section(q)
        curve, ratios = curve_section(args.curve_draws, plots, q) if args.curve_draws else ([], {})
        print(f"curve: done ({time.time() - started:.0f} s)", file=sys.stderr)
    if args.oracle:
        unanswered = sum(f["unanswered"] for f in figures.values())
        body.append(
            f"Arbiter decisions handed back unanswered (no answer from `{args.oracle}`): "
            f"{unanswered}."
        )
    from bench.live import kept_section  # the live benchmark's section, written by bench/live.py

    page = DOCS / "results.md"
    live = kept_section(page.read_text()) if page.exists() else []
    lines = (
        head
        + goals_section(figures, ratios, judged)
        + loao
        + tried
        + curve
        + body
        + live
        + NOTES
        + MODEL_NOTE
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        (DOCS / "results.md").write_text(text)
        print("wrote docs/results.md", file=sys.stderr)


if __name__ == "__main__":
    main()
