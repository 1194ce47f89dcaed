"""Learning-quality experiments (issue 19): flow variants against the current flow, judged on
the τ²-bench test episodes by a paired bootstrap over tasks.

Per domain, each variant's flow is learned from the successful training-task episodes (the logs
`stretto compile` writes, learned through the same pipeline code, `learn_folder`), then the test
episodes are replayed from the record (stretto.offline.reports.replay, exploring at ε = 0 so
that every option is scored). Each variant is printed against the baseline (the current flow
served by reach at θ 0.3): share of the read-only ceiling, detours per episode, turns saved %,
utility at the domain's costs, ECE and Brier of the served score, each as the variant's figure
and the paired difference with its 95% interval (one resample of tasks for both), pooled over
agents and per agent. AUC is a point figure. Learned flows are cached under
~/.cache/stretto-quality/ ($STRETTO_QUALITY_CACHE) by what they were learned from, so reruns
replay only.

    .venv/bin/python bench/quality.py [--domain retail] [--variant NAME ...] [--draws 1000]
    .venv/bin/python bench/quality.py --curve [--domain retail] [--variant NAME]
    .venv/bin/python bench/quality.py --loao [--domain airline] [--variant NAME] [--against NAME]
    .venv/bin/python bench/quality.py --loao --save-runs FILE [--variant NAME]   (at each commit)
    .venv/bin/python bench/quality.py --judge-runs BEFORE AFTER
    .venv/bin/python bench/quality.py --list

With `--loao` (issue 42) each variant (default the served flow, `ours+cal@flow`) is also
judged on agents its flow never saw: per agent with test episodes, a flow learned from the
other agents' successful training episodes only replays that agent's test episodes, beside
the visible flow (learned from every agent's) on the same episodes, per agent and pooled,
with whether the goal (≥ 55% of the read-only ceiling at ≤ 1 detour per episode, airline and
retail) is met; with `--against`, the paired differences on both measures and the verdict
(a change that loses left-out agents is not kept). A change to the learning code itself is
judged across commits: `--save-runs` at each (a checkout of it, the same $STRETTO_QUALITY_CACHE),
then `--judge-runs BEFORE AFTER`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import paired as p  # noqa: E402
from bench.paired import (  # noqa: E402
    BETTER,
    DIGITS,
    MEASURES,
    Run,
    figures,
    paired,
    replayed,
)
from bench.replay import COSTS, THETA, domain_files  # noqa: E402
from bench.tau2data import add_option, choose, tau2  # noqa: E402
from stretto.logs.episode import Episode, episode_from_log  # noqa: E402
from stretto.logs.sessionlog import parse_session_log  # noqa: E402
from stretto.logs.tau2 import ResultsFile, read_results  # noqa: E402
from stretto.logs.tau2_inputs import load_tools, read_split  # noqa: E402
from stretto.model.flow import load_flow, write_flow  # noqa: E402

CACHE = Path(os.environ.get("STRETTO_QUALITY_CACHE", Path.home() / ".cache" / "stretto-quality"))
DOMAINS = ("retail", "airline", "telecom")


# --- the data ---------------------------------------------------------------------------------


@dataclass
class Domain:
    name: str
    costs: tuple[float, float]
    results: list[ResultsFile]  # the converted results files (their logs learn the flows)
    train: list[Episode]  # every training-task episode, in file order
    test: list[tuple[str, Episode]]  # (agent, episode) of every test-task episode
    # the agent whose episodes were taken out of training (`left_out`), when any were
    scope: str | None = None

    @property
    def train_ok(self) -> list[str]:
        """The successful training episodes' session ids: what a flow is learned from."""
        return [e.id for e in self.train if e.succeeded]


_DOMAINS: dict[str, Domain] = {}


def domain(name: str) -> Domain:
    """The domain's data, read once per process."""
    if name not in _DOMAINS:
        _DOMAINS[name] = load_domain(name)
    return _DOMAINS[name]


def load_domain(name: str) -> Domain:
    split = read_split(tau2() / "domains" / name / "split_tasks.json")
    tools = load_tools(tau2() / "domains" / "tau2_tools.json")
    results, train, test = [], [], []
    for path in domain_files(name):
        converted = read_results(path, tools, name)
        results.append(converted)
        solo = " (no user)" if "no-user" in path.name else ""
        for sim in converted.simulations:
            episode = episode_from_log(parse_session_log(sim.text.encode("utf-8"), sim.source))
            if sim.task_id in split["train"]:
                train.append(episode)
            elif sim.task_id in split["test"]:
                test.append((episode.agent_model + solo, episode))
    return Domain(name, COSTS[name], results, train, test)


# --- learning, cached ---------------------------------------------------------------------------


def digest(*parts) -> str:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


MAIN = "5453b57"  # the commit whose flows are "the current flow" (main at this work's first merge)
# the files whose code learns a flow (the offline rules fit its calibration): a change to any
# of them learns the cached flows again
LEARN_SOURCES = ("warehouse", "assets", "stretto/model", "stretto/logs", "stretto/offline")


def source_digest() -> str:
    h = hashlib.blake2b(digest_size=8)
    for folder in LEARN_SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".sql", ".json") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def write_training_logs(domain: Domain, ids: list[str], folder: Path) -> Path:
    """The chosen episodes' session logs, as `stretto compile` writes them."""
    from stretto.logs.tau2 import write_logs

    wanted = set(ids)
    for results in domain.results:
        kept = [s for s in results.simulations if s.session in wanted]
        if kept:
            write_logs(replace(results, simulations=kept), folder)
    return folder


@dataclass(frozen=True)
class Learner:
    """How a variant's flow is learned from chosen episodes; `key` names it in the cache."""

    key: str
    make: Callable[[Domain, list[str]], dict]

    def __call__(self, domain: Domain, ids: list[str]) -> dict:
        # a domain without an agent's episodes (`left_out`) learns what depends on more than
        # `ids` (the calibration's failed episodes) from the other agents' only: its own key
        learned = digest(sorted(ids)) if domain.scope is None else digest(sorted(ids), domain.scope)
        path = CACHE / domain.name / "flows" / f"{self.key}-{learned}.flow.json"
        if path.is_file():
            return load_flow(path)
        flow = self.make(domain, ids)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_flow(flow, path)
        return flow


def _main_flow(domain: Domain, ids: list[str], commit: str = MAIN) -> dict:
    """The flow main's code learns (`stretto compile`'s path, learn_folder) from these
    episodes: its source at `commit`, unpacked once, run in a process of its own."""
    import subprocess

    source = CACHE / f"main-{commit}"
    if not (source / "stretto").is_dir():
        source.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    key = digest(sorted(ids))
    logs = write_training_logs(domain, ids, CACHE / domain.name / "logs" / key)
    out = CACHE / domain.name / "tmp" / f"main-{commit}-{key}.flow.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    script = (
        "import sys; from stretto.cli.learning import learn_folder; from pathlib import Path; "
        "sys.exit(learn_folder(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), "
        "home=sys.argv[4], wait=600) is None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(logs), domain.name, str(out), str(CACHE / "home-main")],
        cwd=source,
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"main's learning of {domain.name} failed:\n{done.stderr}")
    return load_flow(out)


def _our_flow(domain: Domain, ids: list[str]) -> dict:
    """The flow this branch's code learns, in this process (the pipeline's learn_folder)."""
    from pipeline.learnfolder import LearnFolderError, learn_folder

    key = digest(sorted(ids))
    logs = write_training_logs(domain, ids, CACHE / domain.name / "logs" / key)
    out = CACHE / domain.name / "tmp" / f"ours-{key}.flow.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        learn_folder(logs, domain.name, out, home=str(CACHE / "home"), wait=600)
    except LearnFolderError as exc:
        raise SystemExit(
            f"learning the {domain.name} flow from {len(ids)} episodes failed: {exc}"
        ) from None
    return load_flow(out)


main_flow = Learner(f"main-{MAIN}", _main_flow)
# main's learning when this round of issue 19 began (`cur`): the served flow's code before it
CURRENT = "b670eec"
current_flow = Learner(
    f"main-{CURRENT}", lambda domain, ids: _main_flow(domain, ids, commit=CURRENT)
)
our_flow = Learner(f"ours-{source_digest()}", _our_flow)


# --- variants -----------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    claim: str  # what it is meant to improve
    learn: Learner = main_flow
    decider: str = "reach"
    # the threshold it is served at; None: the flow's own (`serving`, written with `cal`)
    threshold: Callable[[Domain], float | None] = lambda d: THETA


VARIANTS: dict[str, Variant] = {}


def variant(v: Variant) -> Variant:
    VARIANTS[v.name] = v
    return v


def theta_star(domain: Domain) -> float:
    return domain.costs[1] / sum(domain.costs)


def session_events(episode: Episode) -> list[tuple]:
    """An episode's events as the binding's agreement replays them (what
    warehouse.counts.learn.session_events reads from the warehouse): user messages, each LLM turn's
    calls, results."""
    from stretto.logs.episode import Assistant, ToolResult, User

    out: list[tuple] = []
    for event in episode.events:
        if isinstance(event, User):
            out.append(("user", event.text))
        elif isinstance(event, Assistant):
            calls = [(c.name, c.arguments) for c in event.calls if not c.by_proxy]
            if calls:
                out.append(("turn", calls))
        elif isinstance(event, ToolResult) and not event.by_proxy:
            out.append(("result", event.name, not event.error, event.content))
    return out


def rebound(inner: Learner, name: str, change: Callable[[dict, list], dict]) -> Learner:
    """`inner`'s flow with its bindings changed by `change(bindings, sessions)` (sessions: the
    events of the episodes learned from), and `agreed` replayed again over them
    (stretto.model.binding.agreement)."""
    from stretto.model.binding import Rules, agreement

    def make(domain: Domain, ids: list[str]) -> dict:
        flow = inner(domain, ids)
        chosen = set(ids)
        events = [session_events(e) for e in domain.train if e.id in chosen]
        bindings = change(dict(flow["bindings"]), events)
        reads = {t for t, k in flow["manifest"]["tools"].items() if k == "read"}
        bindings["agreed"] = agreement(Rules.from_flow(bindings), events, reads)
        return {**flow, "bindings": bindings}

    return Learner(f"{inner.key}+{name}", make)


def with_named_other(bindings: dict, sessions: list) -> dict:
    from stretto.model.binding import Rules
    from stretto.model.named import named_other

    found = named_other(Rules.from_flow(bindings), sessions)
    return {**bindings, "named_other": found} if found else bindings


def both(*changes):
    def change(bindings: dict, sessions: list) -> dict:
        for c in changes:
            bindings = c(bindings, sessions)
        return bindings

    return change


def calibration_episodes(domain: Domain, ids: list[str]) -> list[Episode]:
    """The training episodes a calibration map learned from `ids` is fitted on: the chosen
    episodes and the failed ones of their tasks (of every training task of `domain` when all
    its successful ones are chosen, as `compile --calibrate` replays them). Of `domain`'s
    training episodes only: a domain without an agent (`left_out`) never hands its failed
    episodes to the map."""
    chosen = set(ids)
    tasks = {e.task_id for e in domain.train if e.id in chosen}
    every = chosen >= set(domain.train_ok)
    return [
        e
        for e in domain.train
        if e.id in chosen or (not e.succeeded and (every or e.task_id in tasks))
    ]


def calibrated(inner: Learner, penalty: float | None = None) -> Learner:
    """`inner`'s flow with a calibration map fitted on cross-fitted replays of the training
    episodes of the tasks learned from (stretto.offline.fits.calibrate)."""
    from stretto.offline.fits.calibrate import cross_fitted_rows, fit_map
    from stretto.vocabulary import FOLDS

    def make(domain: Domain, ids: list[str]) -> dict:
        flow = inner(domain, ids)
        episodes = calibration_episodes(domain, ids)
        rows = cross_fitted_rows(
            episodes, lambda rest: inner(domain, [e.id for e in rest]), decider="reach"
        )
        table = fit_map(rows, penalty)
        if table is None:
            return flow
        table.update(folds=FOLDS, episodes=len(episodes))
        return {**flow, "calibration": {"reach": table}}

    return Learner(f"{inner.key}+cal{penalty or 'cv'}", make)


def searched(inner: Learner) -> Learner:
    """`inner`'s flow with per-site thresholds from `stretto search` (NSGA-II from θ*, at the
    domain's costs) on the successful training episodes it learned from."""
    from stretto.offline.reports.search import Search, with_thresholds

    def make(domain: Domain, ids: list[str]) -> dict:
        flow = inner(domain, ids)
        chosen = set(ids)
        train = [e for e in domain.train if e.id in chosen]
        found = Search(
            flow, train, decider="reach", threshold=theta_star(domain), costs=domain.costs
        ).run()
        return with_thresholds(flow, found.setting)

    return Learner(f"{inner.key}+search", make)


def reach_alpha(inner: Learner, alpha: float) -> Learner:
    """`inner`'s flow with the reach model's α set to `alpha` (the habit's is kept)."""

    def make(domain: Domain, ids: list[str]) -> dict:
        flow = inner(domain, ids)
        return {**flow, "reach": {**flow["reach"], "alpha": alpha}}

    return Learner(f"{inner.key}+ra{alpha:g}", make)


def serving(inner: Learner) -> Learner:
    """`inner`'s flow carrying its serving threshold, the break-even of the domain's costs
    (what `compile --calibrate --costs` writes: stretto.model.decide.serving_part)."""
    from stretto.model.decide import serving_part

    def make(domain: Domain, ids: list[str]) -> dict:
        return {**inner(domain, ids), "serving": serving_part(*domain.costs)}

    return Learner(f"{inner.key}+serving", make)


variant(Variant("base", "the current flow (main's code; reach at θ 0.3)"))
variant(Variant("habit", "the next-step rule at θ 0.3", decider="habit"))
variant(Variant("ours", "this branch's learning (named_other), uncalibrated", learn=our_flow))

BINDING_CHANGES = {"named": with_named_other}


def parse(spec: str) -> Variant:
    """A variant named by its parts: `named+cal@*` = main's flow with named_other learned,
    calibrated, served at θ*; `@0.2` a threshold; `ra1` reach's α set to 1; `habit` the
    next-step rule; `ours` this branch's learning instead of main's (`cur`: main's at CURRENT);
    `search` per-site thresholds searched on the training episodes (after `cal`); `@flow`
    served at the flow's own threshold (`cal` writes the break-even of the domain's costs
    into the flow, as `compile --calibrate` does). A registered name is that variant."""
    if spec in VARIANTS:
        return VARIANTS[spec]
    body, _, theta = spec.partition("@")
    parts = body.split("+") if body else []
    learn, decider = main_flow, "reach"
    if "ours" in parts:
        learn = our_flow
    if "cur" in parts:
        learn = current_flow
    changes = [p for p in parts if p in BINDING_CHANGES]
    if changes:
        learn = rebound(learn, "+".join(changes), both(*(BINDING_CHANGES[c] for c in changes)))
    for part in parts:
        if part.startswith("ra"):
            learn = reach_alpha(learn, float(part[2:]))
    if "cal" in parts:
        learn = serving(calibrated(learn))
    if "search" in parts:
        learn = searched(learn)
    if "habit" in parts:
        decider = "habit"
    unknown = {p for p in parts if not p.startswith("ra")} - {
        "ours",
        "cur",
        "cal",
        "search",
        "habit",
        *BINDING_CHANGES,
    }
    if unknown:
        raise SystemExit(f"unknown variant parts: {', '.join(sorted(unknown))}")
    if theta == "*":
        threshold = theta_star
    elif theta == "flow":
        threshold = lambda d: None  # noqa: E731
    elif theta:
        threshold = lambda d, t=float(theta): t  # noqa: E731
    else:
        threshold = lambda d: THETA  # noqa: E731
    return variant(Variant(spec, spec, learn=learn, decider=decider, threshold=threshold))


# the served configuration (bench/replay.py's): this branch's learning, calibrated, served at
# the break-even the flow carries
SERVED = "ours+cal@flow"


variant(
    replace(
        parse(SERVED),
        claim="the served flow: this branch's learning, calibrated, at the break-even θ* it "
        "carries",
    )
)


def run(domain: Domain, v: Variant, ids: list[str] | None = None) -> Run:
    """The variant's flow, learned from `ids` (every successful training episode by default),
    replaying the test episodes."""
    flow = v.learn(domain, domain.train_ok if ids is None else ids)
    return replayed(domain, flow, v.decider, v.threshold(domain))


def verdict(cmp: dict, claim: str) -> str:
    """Significant gains and losses: the measures whose interval excludes 0."""
    gains, losses = [], []
    for name in MEASURES:
        _, _, d, lo, hi = cmp[name]
        if lo > 0 or hi < 0:
            (gains if np.sign(d) == BETTER[name] else losses).append(name)
    return f"+{','.join(gains) or '-'} / −{','.join(losses) or '-'}"


def cell(name: str, entry) -> str:
    base, value, d, lo, hi = entry
    k = DIGITS[name]
    return f"{value:.{k}f} ({d:+.{k}f} [{lo:+.{k}f}, {hi:+.{k}f}])"


def compare(domain: Domain, names: list[str], draws: int, against: str = "base") -> list[str]:
    base = run(domain, parse(against))
    agents = sorted({a for a, _ in domain.test})
    lines = [
        f"## {domain.name}: variants against {against}: {VARIANTS[against].claim}",
        "",
        "| variant | agents | " + " | ".join(MEASURES) + " | AUC | significant (+ / −) |",
        "|---|---|" + "---|" * (len(MEASURES) + 2),
    ]
    first = paired(base, base, domain.costs, None, 10)
    lines.append(
        f"| {against} | all | "
        + " | ".join(f"{first[m][0]:.{DIGITS[m]}f}" for m in MEASURES)
        + f" | {first['auc'] or 0:.3f} | |"
    )
    for name in names:
        v = parse(name)
        other = run(domain, v)
        for agent in [None, *agents]:
            c = paired(base, other, domain.costs, agent, draws)
            if agent is None:
                bound = [
                    (sum(1 for g, _, _ in r.scores), sum(u for _, _, u in r.scores))
                    for r in (base, other)
                ]
                print(
                    f"{domain.name} {name}: bound options {bound[1][0]} (base {bound[0][0]}), "
                    f"the agent's own {bound[1][1]} (base {bound[0][1]})",
                    file=sys.stderr,
                )
            lines.append(
                f"| {name} | {agent or '**all**'} | "
                + " | ".join(cell(m, c[m]) for m in MEASURES)
                + f" | {c['auc*'] or 0:.3f} | {verdict(c, v.claim)} |"
            )
    return lines


def judge(domain: Domain, spec: str, against: str, draws: int) -> dict:
    """A variant against another, pooled and per agent: `{pooled: paired(...), losses: [(agent,
    measure)], gains: [...], bound: (options bound, the agent's own) for each}`."""
    base, other = run(domain, parse(against)), run(domain, parse(spec))
    out: dict = {
        "pooled": paired(base, other, domain.costs, None, draws),
        "losses": [],
        "gains": [],
    }
    for agent in sorted({a for a, _ in domain.test}):
        c = paired(base, other, domain.costs, agent, draws)
        for name in MEASURES:
            _, _, d, lo, hi = c[name]
            if lo > 0 or hi < 0:
                kind = "gains" if np.sign(d) == BETTER[name] else "losses"
                out[kind].append((agent, name))
    out["bound"] = [(len(r.scores), sum(u for _, _, u in r.scores)) for r in (base, other)]
    return out


# --- leave one agent out (issue 42) -------------------------------------------------------------


def agent_key(model: str) -> str:
    """The agent a results file's model stands for: a provider's prefix (`azure/`,
    `ollama_chat/`) and a release date (`-2025-04-14`) dropped, so that one model named two
    ways or run by two harnesses is one agent (ToolOrchestra's `gpt-4.1-mini-2025-04-14` and
    the trace files' `gpt-4.1-mini`); a fine-tune (`ft:...`) is an agent of its own."""
    if model.startswith("ft:"):
        return model
    return re.sub(r"-\d{4}-\d{2}-\d{2}$", "", model.rsplit("/", 1)[-1])


def tested_agents(domain: Domain) -> list[str]:
    """The agents with test-task episodes."""
    return sorted({agent_key(e.agent_model) for _, e in domain.test})


def left_out(domain: Domain, agent: str) -> Domain:
    """The domain as a flow that never saw `agent` learns and is judged on it: the training
    episodes of every other agent (and of the results files only their simulations, so no
    log of `agent` is written for learning), and `agent`'s test episodes."""
    train = [e for e in domain.train if agent_key(e.agent_model) != agent]
    kept = {e.id for e in train}
    results = [
        replace(r, simulations=[s for s in r.simulations if s.session in kept])
        for r in domain.results
    ]
    return replace(
        domain,
        results=[r for r in results if r.simulations],
        train=train,
        test=[(a, e) for a, e in domain.test if agent_key(e.agent_model) == agent],
        scope=agent if len(train) < len(domain.train) else None,
    )


@dataclass
class Held:
    """One agent left out: what its flow learned from, and its replay (None: no other agent
    ran a training task, so there is nothing to learn a flow from)."""

    agent: str
    labels: list[str]  # its test episodes' labels in `Domain.test` (with and without a user)
    episodes: int  # its test episodes
    learned: list[str]  # the successful training episodes its flow learned from
    by: list[str]  # their agents
    run: Run | None
    scope: str | None  # `left_out`'s: None when the agent ran no training task at all


def hold_out(domain: Domain, v: Variant) -> list[Held]:
    """Per agent with test episodes: the variant's flow learned from the successful training
    episodes of every other agent only, replaying that agent's test episodes."""
    out = []
    for agent in tested_agents(domain):
        split = left_out(domain, agent)
        labels = sorted({a for a, _ in split.test})
        by = sorted({agent_key(e.agent_model) for e in split.train if e.succeeded})
        r = None
        if split.train_ok:
            flow = v.learn(split, split.train_ok)
            r = replayed(split, flow, v.decider, v.threshold(split))
        out.append(Held(agent, labels, len(split.test), split.train_ok, by, r, split.scope))
    return out


def only(r: Run, labels) -> Run:
    """The run's rows of these agents' labels."""
    wanted = set(labels)
    return Run(
        rows={k: v for k, v in r.rows.items() if k[0] in wanted},
        scores=[s for s in r.scores if s[0] in wanted],
        checks=[c for c in r.checks if c[0] in wanted],
    )


def merged(runs: list[Run]) -> Run:
    """Runs of disjoint agents as one."""
    out = Run()
    for r in runs:
        out.rows.update(r.rows)
        out.scores += r.scores
        out.checks += r.checks
    return out


LOAO_GOAL = {"share": 55.0, "detours": 1.0, "domains": ("airline", "retail")}
MET = {True: "met", False: "not met", None: "not measurable"}
SHOWN = ("ceiling %", "detours/ep", "saved %")


def loao_figures(domain: Domain, v: Variant, draws: int) -> dict:
    """The variant's visible (the flow learned from every agent's training tasks) and
    left-out figures on the same test episodes: per agent held out and pooled over those with
    a flow, `paired(visible, left out)`; with the runs, for comparisons."""
    visible = run(domain, v)
    held = hold_out(domain, v)
    measured = [h for h in held if h.run is not None]
    labels = [lab for h in measured for lab in h.labels]
    pooled = merged([h.run for h in measured if h.run is not None])
    out: dict = {"visible": visible, "held": held, "labels": labels, "pooled": pooled}
    out["agents"] = {
        h.agent: p.paired(only(visible, h.labels), h.run, domain.costs, None, draws)
        for h in measured
        if h.run is not None
    }
    if measured:
        out["all"] = p.paired(only(visible, labels), pooled, domain.costs, None, draws)
        out["intervals"] = p.intervals(pooled, domain.costs, None, draws)
    return out


def _vs(entry, k: int) -> str:
    base, value, d, lo, hi = entry
    if np.isnan(base):
        return "n/a"
    return f"{base:.{k}f} → {value:.{k}f} ({d:+.{k}f} [{lo:+.{k}f}, {hi:+.{k}f}])"


def goal(f: dict) -> tuple[bool | None, str]:
    """Whether issue 42's goal is met on the pooled left-out agents (point figures, as the
    goals of issue 19), and the figures with their intervals; None: no agent had a flow."""
    g = LOAO_GOAL
    if "all" not in f:
        return None, "no agent could be left out (no other agent ran a training task)"
    share, detours = (f["intervals"][m] for m in ("ceiling %", "detours/ep"))
    short = [
        *([f"share below {g['share']:g}%"] if share[0] < g["share"] else []),
        *([f"detours above {g['detours']:g}"] if detours[0] > g["detours"] else []),
    ]
    missing = [h.agent for h in f["held"] if h.run is None]
    measured = len(f["held"]) - len(missing)
    return not short, (
        f"{share[0]:.1f} [{share[1]:.1f}, {share[2]:.1f}]% of the ceiling at {detours[0]:.2f} "
        f"[{detours[1]:.2f}, {detours[2]:.2f}] detours per episode"
        + (f" ({', '.join(short)})" if short else "")
        + (
            f"; {measured} of {len(f['held'])} agents: {', '.join(missing)} cannot be left "
            "out (no other agent ran a training task)"
            if missing
            else ""
        )
    )


def goal_line(domain: Domain, f: dict) -> str:
    met, said = goal(f)
    g = LOAO_GOAL
    if domain.name not in g["domains"]:
        said = re.sub(r" \((share below|detours above)[^)]*\)", "", said)
        return f"Left-out agents pooled ({domain.name}, no goal set): {said}."
    return (
        f"Goal ({domain.name}, left-out agents pooled: ≥ {g['share']:g}% of the read-only "
        f"ceiling at ≤ {g['detours']:g} detour per episode): {MET[met]} — {said}."
    )


def loao_table(domain: Domain, v: Variant, f: dict) -> list[str]:
    lines = [
        f"### {domain.name}: `{v.name}`" + (f" ({v.claim})" if v.claim != v.name else ""),
        "",
        "| agent left out | test episodes | left-out flow learned from | "
        + " | ".join(f"{m}: visible → left out (Δ [95%])" for m in SHOWN)
        + " |",
        "|---|---|---|" + "---|" * len(SHOWN),
    ]
    for h in f["held"]:
        if h.run is None:
            learned = "nothing: no other agent ran a training task"
            seen = p.figures(sum(only(f["visible"], h.labels).rows.values()), domain.costs)
            cells = [f"{float(seen[m]):.{DIGITS[m]}f} → n/a" for m in SHOWN]
        else:
            learned = (
                f"{len(h.learned)} episodes of {', '.join(h.by)}"
                if h.scope is not None
                else f"{len(h.learned)} episodes of {', '.join(h.by)} (= the visible flow: "
                "this agent ran no training task)"
            )
            c = f["agents"][h.agent]
            cells = [_vs(c[m], DIGITS[m]) for m in SHOWN]
        lines.append(f"| {h.agent} | {h.episodes} | {learned} | " + " | ".join(cells) + " |")
    if "all" in f:
        n = sum(h.episodes for h in f["held"] if h.run is not None)
        lines.append(
            f"| **pooled** (agents with a flow) | {n} | | "
            + " | ".join(_vs(f["all"][m], DIGITS[m]) for m in SHOWN)
            + " |"
        )
    return lines + ["", goal_line(domain, f), ""]


def significant(c: dict) -> tuple[list[str], list[str]]:
    """The measures of a paired comparison whose interval excludes 0: (gains, losses)."""
    gains, losses = [], []
    for name in MEASURES:
        _, _, d, lo, hi = c[name]
        if lo > 0 or hi < 0:
            (gains if np.sign(d) == BETTER[name] else losses).append(name)
    return gains, losses


def keep_rule(visible: dict[str, dict], held: dict[str, dict]) -> str:
    """Kept or not by issue 42's rule, from paired comparisons (variant − against) keyed
    `all` (pooled) and by agent, on the visible and on the left-out measure: a change that
    loses left-out agents is not kept, however it does on the visible ones."""

    def tally(cs: dict[str, dict]) -> tuple[set[str], list[str]]:
        gains, losses = set(), []
        for who, c in cs.items():
            g, lost = significant(c)
            gains |= set(g) if who == "all" else set()
            losses += [f"{'pooled' if who == 'all' else who}: {m}" for m in lost]
        return gains, losses

    vg, vl = tally(visible)
    hg, hl = tally(held)
    if hl:
        won = (
            " (wins on the visible agents)"
            if vg and not vl
            else " (and the visible ones)"
            if vl
            else ""
        )
        return f"not kept: loses left-out agents{won}: " + "; ".join(hl)
    if vl:
        return "not kept: loses on the visible agents: " + "; ".join(vl)
    if not vg and not hg:
        return "not kept: no significant gain"
    return (
        f"kept: gains visible {','.join(sorted(vg)) or '-'}, left out "
        f"{','.join(sorted(hg)) or '-'}; no significant loss"
    )


def loao_compare(domain: Domain, spec: str, against: str, draws: int) -> dict:
    """`spec` against `against` on both measures: the paired difference pooled and per agent
    on the visible flows and on the left-out ones (`visible`, `held`: keyed `all` and by
    agent), the verdict (keep_rule) and the printed `lines`."""
    a, b = loao_figures(domain, parse(against), draws), loao_figures(domain, parse(spec), draws)
    visible = {"all": p.paired(a["visible"], b["visible"], domain.costs, None, draws)}
    held = {}
    for h in a["held"]:
        if h.run is None:
            continue
        other = next(x.run for x in b["held"] if x.agent == h.agent)
        visible[h.agent] = p.paired(
            only(a["visible"], h.labels), only(b["visible"], h.labels), domain.costs, None, draws
        )
        held[h.agent] = p.paired(h.run, other, domain.costs, None, draws)
    if "all" in a:
        held["all"] = p.paired(a["pooled"], b["pooled"], domain.costs, None, draws)
    lines = [
        f"### {domain.name}: {spec} − {against}",
        "",
        "| agents | measure | "
        + " | ".join(f"Δ {m} [95%]" for m in SHOWN)
        + " | significant (+ / −) |",
        "|---|---|" + "---|" * (len(SHOWN) + 1),
    ]
    for who in ["all", *(k for k in held if k != "all")]:
        for label, cs in (("visible", visible), ("left out", held)):
            if who not in cs:
                continue
            c = cs[who]
            g, lost = significant(c)
            lines.append(
                f"| {'**pooled**' if who == 'all' else who} | {label} | "
                + " | ".join(
                    f"{c[m][2]:+.{DIGITS[m]}f} [{c[m][3]:+.{DIGITS[m]}f}, {c[m][4]:+.{DIGITS[m]}f}]"
                    for m in SHOWN
                )
                + f" | +{','.join(g) or '-'} / −{','.join(lost) or '-'} |"
            )
    said = keep_rule(visible, held)
    lines += ["", f"Verdict ({domain.name}, {spec} against {against}): {said}", ""]
    return {"lines": lines, "verdict": said, "visible": visible, "held": held}


def overall(verdicts: dict[str, str]) -> str:
    """Issue 42's rule over domains: kept when some domain gains and none loses."""
    kept = any(v.startswith("kept") for v in verdicts.values()) and not any(
        v.startswith("not kept: loses") for v in verdicts.values()
    )
    return "kept" if kept else "not kept"


def loao_section(
    names, draws: int, variants=(SERVED,), changes: tuple[tuple[str, str], ...] = ()
) -> tuple[list[str], dict]:
    """docs/results.md's "Leave one agent out" section: per domain the variants' tables and
    the goal lines; then each change (spec, against) judged on both measures, pooled."""
    lines = [
        "## Leave one agent out",
        "",
        "Generalisation to agents the flow never saw (issue 42). For each agent with test-task "
        "episodes, a flow is learned (the same learning, calibration and serving threshold) "
        "from the successful training-task episodes of every *other* agent only, and replays "
        "that agent's test-task episodes; *visible* is the flow learned from every agent's "
        "training tasks (the protocol above) on the same episodes. An agent is its model with "
        "the provider's prefix and release date dropped (gpt-4.1-mini-2025-04-14 and "
        "gpt-4.1-mini are one agent; a fine-tune is its own); its runs with and without a "
        f"user are one agent. Brackets: paired 95% intervals over tasks ({draws} draws). "
        "`bench/quality.py --loao` prints these tables.",
        "",
    ]
    figures = {}
    for name in names:
        d = domain(name)
        for spec in variants:
            f = loao_figures(d, parse(spec), draws)
            figures[(name, spec)] = f
            lines += loao_table(d, VARIANTS[spec], f)
    for spec in variants:
        said = {n: goal(figures[(n, spec)]) for n in LOAO_GOAL["domains"] if (n, spec) in figures}
        if said:
            met = all(m for m, _ in said.values())
            lines += [
                f"**Leave-one-agent-out goal ({', '.join(said)}; {spec}): "
                f"{'met' if met else 'not met'}** — "
                + "; ".join(f"{n}: {MET[m]}, {w}" for n, (m, w) in said.items())
                + ".",
                "",
            ]
    if changes:
        lines += [
            "Changes judged on both measures (the paired difference pooled over the visible "
            "flow's test episodes and over the left-out agents'; per agent: `bench/quality.py "
            "--loao --variant SPEC --against SPEC`). Not kept when a left-out figure, pooled or "
            "of one agent, loses significantly, however the change does on the visible agents.",
            "",
            "| change | against | domain | Δ share of ceiling: visible | left out | "
            "Δ detours / ep: visible | left out | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for spec, against in changes:
        verdicts = {}
        for name in names:
            c = loao_compare(domain(name), spec, against, draws)
            verdicts[name] = c["verdict"]
            cells = [
                (
                    f"{x[m][2]:+.{DIGITS[m]}f} [{x[m][3]:+.{DIGITS[m]}f}, {x[m][4]:+.{DIGITS[m]}f}]"
                    if x is not None
                    else "n/a"
                )
                for m in ("ceiling %", "detours/ep")
                for x in (c["visible"]["all"], c["held"].get("all"))
            ]
            lines.append(
                f"| `{spec}` | `{against}` | {name} | " + " | ".join(cells) + f" | {c['verdict']} |"
            )
        lines += ["", f"`{spec}` against `{against}`: **{overall(verdicts)}**.", ""]
    return lines, figures


def save_runs(names, spec: str, path: Path) -> None:
    """The variant's leave-one-agent-out runs per domain (visible, each agent held out,
    pooled), pickled to `path`: one commit's side of a before − after comparison
    (`judge_runs`), when the code that learns the flow is what changed."""
    import pickle

    out = {}
    for name in names:
        f = loao_figures(domain(name), parse(spec), 10)
        held = {h.agent: (h.labels, h.run) for h in f["held"]}
        out[name] = {"visible": f["visible"], "held": held, "pooled": f.get("pooled")}
    path.write_bytes(pickle.dumps(out))


def judge_runs(before: Path, after: Path, draws: int) -> list[str]:
    """Two commits' `save_runs` files judged by issue 42's rule: per domain the paired
    difference (after − before) pooled and per agent on the visible and the left-out flows,
    the verdict (keep_rule) and the verdict over domains (overall)."""
    import pickle

    a, b = pickle.loads(before.read_bytes()), pickle.loads(after.read_bytes())
    measures = ("ceiling %", "detours/ep", "utility/ep", "ece")
    lines = [
        "| domain | agents | flows | "
        + " | ".join(f"{m}: before → after (Δ [95%])" for m in measures)
        + " | significant (+ / −) |",
        "|---|---|---|" + "---|" * (len(measures) + 1),
    ]
    verdicts = {}
    for name in [n for n in a if n in b]:
        d, x, y = domain(name), a[name], b[name]
        visible = {"all": p.paired(x["visible"], y["visible"], d.costs, None, draws)}
        held = {}
        for agent, (labels, run) in x["held"].items():
            if run is None:
                continue
            mine = y["held"][agent][1]
            visible[agent] = p.paired(
                only(x["visible"], labels), only(y["visible"], labels), d.costs, None, draws
            )
            held[agent] = p.paired(run, mine, d.costs, None, draws)
        if x["pooled"] is not None:
            held["all"] = p.paired(x["pooled"], y["pooled"], d.costs, None, draws)
        for label, cs in (("visible", visible), ("left out", held)):
            for who, c in cs.items():
                gains, losses = significant(c)
                lines.append(
                    f"| {name} | {'**pooled**' if who == 'all' else who} | {label} | "
                    + " | ".join(_vs(c[m], DIGITS[m]) for m in measures)
                    + f" | +{','.join(gains) or '-'} / −{','.join(losses) or '-'} |"
                )
        verdicts[name] = keep_rule(visible, held)
    lines += [""] + [f"Verdict ({n}): {v}" for n, v in verdicts.items()]
    return lines + [f"Verdict over {', '.join(verdicts)}: {overall(verdicts)}"]


# --- the learning curve ---------------------------------------------------------------------


def curve(domain: Domain, v: Variant, sizes, draws: int, seed: int = 19) -> list[dict]:
    """Flows learned from random draws of n successful training episodes; each replayed on
    every test episode."""
    everyone = domain.train_ok
    rows = []
    for n in sizes:
        for d in range(1 if n >= len(everyone) else draws):
            ids = (
                everyone
                if n >= len(everyone)
                else random.Random(f"{seed}/{n}/{d}").sample(everyone, n)
            )
            r = run(domain, v, ids)
            total = figures(sum(r.rows.values()), domain.costs)
            rows.append(
                {"n": min(n, len(everyone)), "draw": d, **{k: float(total[k]) for k in MEASURES}}
            )
            print(f"  {domain.name} {v.name} n={n} draw {d}: {rows[-1]}", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", action="append", choices=DOMAINS)
    parser.add_argument("--variant", action="append", help="variants to compare (default all)")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument(
        "--against", help="the variant to judge against (default base; with --loao: none)"
    )
    parser.add_argument(
        "--loao",
        action="store_true",
        help=f"leave one agent out: each --variant (default {SERVED}) on the agents its flow "
        "never saw, beside the visible figures; with --against, compared on both",
    )
    parser.add_argument("--curve", action="store_true", help="the learning curve instead")
    parser.add_argument("--list", action="store_true", help="name the variants")
    parser.add_argument(
        "--save-runs",
        type=Path,
        metavar="FILE",
        help="with --loao: pickle the variant's runs (one commit's side of --judge-runs)",
    )
    parser.add_argument(
        "--judge-runs",
        type=Path,
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="two --save-runs files (two commits' code) judged against each other, both measures",
    )
    add_option(parser)
    args = parser.parse_args()
    choose(args.tau2)
    if args.list:
        for v in VARIANTS.values():
            print(f"{v.name}: {v.claim}")
        return
    started = time.time()
    if args.judge_runs:
        before, after = args.judge_runs
        print("\n".join(judge_runs(before, after, args.draws)))
        return
    if args.loao and args.save_runs:
        save_runs(args.domain or DOMAINS, (args.variant or [SERVED])[0], args.save_runs)
        print(f"wrote {args.save_runs}: {time.time() - started:.0f} s", file=sys.stderr)
        return
    if args.loao:
        names = args.domain or DOMAINS
        specs = args.variant or [SERVED]
        lines, _ = loao_section(names, args.draws, specs)
        print("\n".join(lines))
        for spec in specs if args.against else []:
            verdicts = {}
            for name in names:
                c = loao_compare(domain(name), spec, args.against, args.draws)
                verdicts[name] = c["verdict"]
                print("\n".join(c["lines"]))
            print(
                f"Verdict ({spec} against {args.against}, {', '.join(names)}): "
                + overall(verdicts)
                + "".join(f"; {n}: {v}" for n, v in verdicts.items())
            )
        print(f"leave one agent out: {time.time() - started:.0f} s", file=sys.stderr)
        return
    args.against = args.against or "base"
    for name in args.domain or DOMAINS:
        data = domain(name)
        if args.curve:
            for vname in args.variant or ["base"]:
                rows = curve(data, parse(vname), (5, 10, 20, 40, 10**9), 5)
                print(json.dumps(rows))
            continue
        names = [n for n in (args.variant or VARIANTS) if n != args.against]
        print("\n".join(compare(data, names, args.draws, args.against)) + "\n")
        print(f"{name}: {time.time() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
