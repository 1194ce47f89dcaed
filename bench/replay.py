"""The replay benchmark (../shared/spec/results.md §2 and §4) on the τ²-bench results in
../shared/data/tau2/.

For each domain with a train/test split: learn one flow (`stretto compile`, the same pipeline
as `stretto learn`) from the successful training-task episodes of every available agent; then
replay each agent's test episodes "from the record" with the flow served by reach (use before
the next write) and by habit (the next-step rule, the baseline) at θ = 0.3, scoring every
option for calibration. Per domain and agent: turns saved %, detours per episode, the share
of the read-only ceiling taken, utility at the domain's counted costs, ECE/Brier/AUC, each
with a 95% interval from 1,000 bootstrap draws over tasks (one resample shared by both
deciders), and the paired reach − habit difference in share of ceiling. Then per-site
thresholds searched on the training episodes (`stretto search` at the domain's costs) and
judged on the test episodes, and a threshold sweep (0.1–0.8) pooled per domain. Prints the
tables with the reach/habit ratios and writes them to docs/results.md.

With `--oracle URI` each domain's flow also gets an arbiter (`stretto compile --oracle URI`:
fitted on the test tasks' episodes, five folds cross-fitted by task group, so each test
episode is judged by a fold that never saw its task), and each agent gets an arbiter row,
replayed asking the same runner (answers cached under the run's temporary folder).
`simulate://habit` shows the machinery end to end without a model; its numbers say nothing
about a model's quality.

    .venv/bin/python bench/replay.py [--draws 1000] [--no-write] [--oracle simulate://habit]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stretto.logs.tau2 import episodes_from_results, read_split  # noqa: E402
from stretto.model.flow import load_flow  # noqa: E402
from stretto.offline.judging import OracleOptions  # noqa: E402
from stretto.offline.replay import calibration, replay, totals  # noqa: E402
from stretto.offline.search import Search, with_thresholds  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "tau2"
STRETTO = str(Path(sys.executable).parent / "stretto")
THETA = 0.3
SWEEP = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# input tokens of a saved turn (β) and of a detour (δ), counted by the reference
COSTS = {"retail": (5824, 2467), "airline": (7051, 1022), "telecom": (8929, 1178)}
# the reference's figures that travel across agents (results.md §4)
REFERENCE = {"retail": {"reach": 0.864, "habit": 0.762}}


NOTES = [
    "",
    "## Reading these tables",
    "",
    "- In retail only ToolOrchestra's orchestrator (labelled by its model, gpt-4.1-mini) ran "
    "the training tasks, so the retail flow is learned from one agent and replayed on two it "
    "never saw; the gpt-4.1-mini rows are its own held-out tasks. Airline's flow is learned "
    "from four agents (whissle, gpt-4o, qwen2.5-7b, ToolOrchestra).",
    "- Telecom has 17 successful training episodes against the reference's thousands: its "
    "reach counts are too thin to be calibrated (ECE about 0.25), and the next-step rule does "
    "better there. Retail and airline show the reference's shape: reach takes more of the "
    "ceiling than the next step, with more detours, and is better calibrated.",
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
    "openai://, jev://) are tested against local servers speaking their APIs (tests/oracle/), "
    "which checks the requests and the reading of answers, not a model's judgement.",
    "",
    "What the proxy itself costs a host (start-up, per call, throughput, big lines): "
    "[performance.md](performance.md).",
]


def domain_files(domain: str) -> list[Path]:
    manifest = json.loads((DATA / "MANIFEST.json").read_text())["files"]
    return [
        DATA / f["file"]
        for f in manifest
        if f["domain"] == domain and f["file"].startswith("results/")  # τ²-bench, not τ-bench v1
    ]


def compile_flow(
    domain: str, files: list[Path], out: Path, home: Path, oracle: list[str] = ()
) -> dict:
    done = subprocess.run(
        [STRETTO, "compile", "--domain", domain, "--out", str(out), "--home", str(home)]
        + list(oracle)
        + ["--split", str(DATA / "domains" / domain / "split_tasks.json")]
        + ["--tools", str(DATA / "domains" / "tau2_tools.json"), "--results"]
        + [str(f) for f in files],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"compile {domain} failed:\n{done.stderr}")
    print(done.stdout.strip(), file=sys.stderr)
    return load_flow(out)


def measures(checks: list, beta: float, delta: float) -> dict:
    t = totals(checks)
    n = t["episodes"]
    c = calibration([o for e in checks for o in e.options])
    return {
        "episodes": n,
        "turns": t["turns"],
        "ceiling": t["ceiling"],
        "saved %": 100 * t["turns_saved_share"],
        "detours/ep": t["detours"] / n if n else 0.0,
        "ceiling %": 100 * t["ceiling_share"],
        "utility/ep": (beta * t["turns_saved"] - delta * t["detours"]) / n if n else 0.0,
        "ece": c["ece"],
        "brier": c["brier"],
        "auc": c["auc"],
    }


def bootstrap(by_task: dict[str, dict[str, list]], draws: int, costs, seed: int = 7) -> dict:
    """95% intervals over tasks for each decider's measures and the reach − habit gap in share
    of ceiling; one resample of tasks serves every decider."""
    rng = random.Random(seed)
    tasks = sorted(by_task)
    deciders = list(next(iter(by_task.values())))
    samples: dict[str, dict[str, list]] = {d: {} for d in deciders}
    samples["gap"] = {"ceiling %": []}
    for _ in range(draws):
        drawn = [tasks[rng.randrange(len(tasks))] for _ in tasks]
        m = {}
        for d in deciders:
            m[d] = measures([e for t in drawn for e in by_task[t][d]], *costs)
            for k, v in m[d].items():
                if isinstance(v, float):
                    samples[d].setdefault(k, []).append(v)
        samples["gap"]["ceiling %"].append(m["reach"]["ceiling %"] - m["habit"]["ceiling %"])
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for d, per in samples.items():
        out[d] = {}
        for k, values in per.items():
            values.sort()
            out[d][k] = (values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1])
    return out


def fmt(value, interval=None, digits=1) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    if interval:
        text += f" [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true", help="print; leave docs/ alone")
    parser.add_argument("--oracle", metavar="URI", help="also an arbiter row, asking this runner")
    parser.add_argument("--oracle-base-url", metavar="URL", help="the runner's server")
    args = parser.parse_args()
    deciders = ("reach", "habit", "arbiter") if args.oracle else ("reach", "habit")
    started = time.time()
    lines = [
        "# Results: the replay benchmark",
        "",
        "Written by `bench/replay.py` (the protocol of ../shared/spec/results.md §4). Flows are "
        "learned per domain with `stretto compile` from the successful training-task episodes "
        "of every agent in ../shared/data/tau2/; each agent's test-task episodes are replayed "
        "from the record with `stretto replay` (θ = 0.3, 8 lookups per call, 40 per episode). "
        "*reach* = use before the next write (the set rule); *habit* = the next-step rule. "
        "Brackets: 95% intervals from "
        f"{args.draws} bootstrap draws over tasks. Utility in input tokens per episode at the "
        "domain's counted costs (β per saved turn, δ per detour).",
        "",
    ]
    if args.oracle:
        lines += [
            f"*arbiter* = the next-step rule on the arbiter's probabilities, its answers from "
            f"`{args.oracle}`: fitted by `stretto compile --oracle {args.oracle}` on the test "
            "tasks' episodes, five folds cross-fitted by task group (each test episode is judged "
            "by a fold that never saw its task).",
            "",
        ]
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "oracle-cache"
        oracle_args: list[str] = []
        oracle = None
        if args.oracle:
            oracle_args = ["--oracle", args.oracle, "--oracle-cache", str(cache)]
            if args.oracle_base_url:
                oracle_args += ["--oracle-base-url", args.oracle_base_url]
            oracle = OracleOptions(uri=args.oracle, cache=cache, base_url=args.oracle_base_url)
        unanswered = 0
        for domain in ("retail", "airline", "telecom"):
            split = read_split(DATA / "domains" / domain / "split_tasks.json")
            files = domain_files(domain)
            flow = compile_flow(
                domain, files, Path(tmp) / f"{domain}.flow.json", Path(tmp), oracle_args
            )
            costs = COSTS[domain]
            lines += [
                f"## {domain}",
                "",
                f"Flow: {flow['provenance']['habit_episodes']} successful training episodes, "
                f"{len(flow['sites']['next'])} sites. Costs β {costs[0]:,}, δ {costs[1]:,} "
                f"(break-even θ {costs[1] / sum(costs):.3f}).",
                "",
                "| agent | decider | test episodes | turns saved % | detours / episode | "
                "share of ceiling % | utility / episode | ECE | Brier | AUC |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            if args.oracle:
                a = flow["arbiter"]
                lines[-4] = lines[-4][:-1] + (
                    f"; its arbiter fitted on {a['cases']} decisions of {a['tasks']} test tasks "
                    f"({len(a['folds'])} folds)."
                )
            by_file = {path: episodes_from_results([path]) for path in files}  # converted once
            pooled: dict[str, list] = {d: [] for d in deciders}
            pooled_episodes = []
            gaps = []
            for path in files:
                episodes = [e for e in by_file[path] if e.task_id in split["test"]]
                if not episodes:
                    continue
                pooled_episodes += episodes
                agent = episodes[0].agent_model + (" (no user)" if "no-user" in path.name else "")
                by_task: dict[str, dict[str, list]] = {}
                for d in deciders:
                    result = replay(
                        flow, episodes, decider=d, threshold=THETA, explore=0.0, oracle=oracle
                    )
                    pooled[d] += result.episodes
                    unanswered += result.total()["unanswered"]
                    for check in result.episodes:
                        by_task.setdefault(check.task_id, {x: [] for x in deciders})[d].append(
                            check
                        )
                ci = bootstrap(by_task, args.draws, costs)
                for d in deciders:
                    m = measures([c for t in by_task.values() for c in t[d]], *costs)
                    lines.append(
                        f"| {agent} | {d} | {m['episodes']} | "
                        f"{fmt(m['saved %'], ci[d].get('saved %'))} | "
                        f"{fmt(m['detours/ep'], ci[d].get('detours/ep'), 2)} | "
                        f"{fmt(m['ceiling %'], ci[d].get('ceiling %'))} | "
                        f"{fmt(m['utility/ep'], ci[d].get('utility/ep'), 0)} | "
                        f"{fmt(m['ece'], ci[d].get('ece'), 3)} | {fmt(m['brier'], None, 3)} | "
                        f"{fmt(m['auc'], None, 3)} |"
                    )
                gaps.append((agent, ci["gap"]["ceiling %"]))
            by_pool: dict[str, dict[str, list]] = {}
            for d in deciders:
                for check in pooled[d]:
                    key = f"{check.task_id}"
                    by_pool.setdefault(key, {x: [] for x in deciders})[d].append(check)
            ci = bootstrap(by_pool, args.draws, costs)
            m = {d: measures(pooled[d], *costs) for d in deciders}
            for d in deciders:
                lines.append(
                    f"| **all agents** | {d} | {m[d]['episodes']} | "
                    f"{fmt(m[d]['saved %'], ci[d].get('saved %'))} | "
                    f"{fmt(m[d]['detours/ep'], ci[d].get('detours/ep'), 2)} | "
                    f"{fmt(m[d]['ceiling %'], ci[d].get('ceiling %'))} | "
                    f"{fmt(m[d]['utility/ep'], ci[d].get('utility/ep'), 0)} | "
                    f"{fmt(m[d]['ece'], ci[d].get('ece'), 3)} | {fmt(m[d]['brier'], None, 3)} | "
                    f"{fmt(m[d]['auc'], None, 3)} |"
                )
            gap = m["reach"]["ceiling %"] - m["habit"]["ceiling %"]
            ratio = (
                m["reach"]["ceiling %"] / m["habit"]["ceiling %"] if m["habit"]["ceiling %"] else 0
            )
            lines += [
                "",
                f"Reach − habit, share of ceiling (all agents): {gap:+.1f} points "
                f"[{ci['gap']['ceiling %'][0]:+.1f}, {ci['gap']['ceiling %'][1]:+.1f}]; "
                f"ratio reach/habit {ratio:.2f}. Per agent: "
                + "; ".join(f"{a} [{lo:+.1f}, {hi:+.1f}]" for a, (lo, hi) in gaps)
                + ".",
            ]
            if domain in REFERENCE:
                ref = REFERENCE[domain]
                lines.append(
                    f"The reference (nine other agents): reach {100 * ref['reach']:.1f}%, "
                    f"habit {100 * ref['habit']:.1f}% of the ceiling; ours/reference: reach "
                    f"{m['reach']['ceiling %'] / (100 * ref['reach']):.2f}, habit "
                    f"{m['habit']['ceiling %'] / (100 * ref['habit']):.2f}."
                )
            # Per-site thresholds searched on the training episodes, judged on the test ones.
            train = [
                e
                for episodes in by_file.values()
                for e in episodes
                if e.task_id in split["train"] and e.succeeded
            ]
            search = Search(flow, train, decider="reach", threshold=THETA, costs=costs)
            chosen = search.run()
            tuned = measures(
                replay(
                    with_thresholds(flow, chosen.setting), pooled_episodes, decider="reach"
                ).episodes,
                *costs,
            )
            base = m["reach"]
            changed = {s: t for s, t in chosen.setting.items() if t != THETA}
            lines += [
                "",
                f"Search (`stretto search` on the {len(train)} successful training episodes, at "
                f"these costs), replayed on the test episodes: reach with the searched thresholds "
                f"saves {tuned['saved %']:.1f}% of turns (at 0.3 everywhere: {base['saved %']:.1f}"
                f"%), {tuned['detours/ep']:.2f} detours per episode ({base['detours/ep']:.2f}), "
                f"utility {tuned['utility/ep']:.0f} tokens per episode ({base['utility/ep']:.0f}; "
                f"ratio {tuned['utility/ep'] / base['utility/ep'] if base['utility/ep'] else 0:.3f}"
                "). Thresholds changed: "
                + (", ".join(f"{s} {t:g}" for s, t in sorted(changed.items())) or "none")
                + ".",
            ]
            lines += [
                "",
                f"Threshold sweep ({domain}, all agents' test episodes):",
                "",
                "| θ | reach: saved % | reach: detours / ep | reach: ceiling % | "
                "habit: saved % | habit: detours / ep | habit: ceiling % |",
                "|---|---|---|---|---|---|---|",
            ]
            for theta in SWEEP:
                row = [f"{theta:g}"]
                for d in ("reach", "habit"):
                    r = measures(
                        replay(flow, pooled_episodes, decider=d, threshold=theta).episodes, *costs
                    )
                    row += [fmt(r["saved %"]), fmt(r["detours/ep"], None, 2), fmt(r["ceiling %"])]
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
            print(f"{domain}: done ({time.time() - started:.0f} s)", file=sys.stderr)
        if args.oracle:
            lines.append(
                f"Arbiter decisions handed back unanswered (no answer from `{args.oracle}`): "
                f"{unanswered}."
            )
    lines += NOTES
    lines += MODEL_NOTE
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        (ROOT / "docs" / "results.md").write_text(text)
        print("wrote docs/results.md", file=sys.stderr)


if __name__ == "__main__":
    main()
