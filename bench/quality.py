"""Learning-quality experiments (issue 19): flow variants against the current flow, judged on
the τ²-bench test episodes by a paired bootstrap over tasks.

Per domain, each variant's flow is learned from the successful training-task episodes (the
logs `stretto compile` writes, learned through the same pipeline code, `learn_folder`), then
the test episodes are replayed from the record (stretto.offline.replay, exploring at ε = 0 so
that every option is scored). Each variant is printed against the baseline (the current flow
served by reach at θ 0.3): share of the read-only ceiling, detours per episode, turns saved %,
utility at the domain's costs, ECE and Brier of the served score, each as the variant's figure
and the paired difference with its 95% interval (one resample of tasks for both), pooled over
agents and per agent. AUC is a point figure. Learned flows are cached under
~/.cache/stretto-quality/ ($STRETTO_QUALITY_CACHE) by what they were learned from, so reruns
replay only.

    .venv/bin/python bench/quality.py [--domain retail] [--variant NAME ...] [--draws 1000]
    .venv/bin/python bench/quality.py --curve [--domain retail] [--variant NAME]
    .venv/bin/python bench/quality.py --list
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
from stretto.logs.tau2 import ResultsFile, load_tools, read_results, read_split  # noqa: E402
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
# the files whose code learns a flow: a change to any of them learns the cached flows again
LEARN_SOURCES = ("warehouse", "assets", "stretto/model", "stretto/logs")


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
        path = CACHE / domain.name / "flows" / f"{self.key}-{digest(sorted(ids))}.flow.json"
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
    from stretto.cli.learnfolder import learn_folder

    key = digest(sorted(ids))
    logs = write_training_logs(domain, ids, CACHE / domain.name / "logs" / key)
    out = CACHE / domain.name / "tmp" / f"ours-{key}.flow.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if learn_folder(logs, domain.name, out, home=str(CACHE / "home"), wait=600) is None:
        raise SystemExit(f"learning the {domain.name} flow from {len(ids)} episodes failed")
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
    threshold: Callable[[Domain], float] = lambda d: THETA


VARIANTS: dict[str, Variant] = {}


def variant(v: Variant) -> Variant:
    VARIANTS[v.name] = v
    return v


def theta_star(domain: Domain) -> float:
    return domain.costs[1] / sum(domain.costs)


def session_events(episode: Episode) -> list[tuple]:
    """An episode's events as the binding's agreement replays them (what
    warehouse.learn.session_events reads from the warehouse): user messages, each LLM turn's
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


def calibrated(inner: Learner, penalty: float | None = None) -> Learner:
    """`inner`'s flow with a calibration map fitted on cross-fitted replays of the training
    episodes of the tasks learned from (stretto.offline.calibrate)."""
    from stretto.offline.calibrate import FOLDS, cross_fitted_rows, fit_map

    def make(domain: Domain, ids: list[str]) -> dict:
        flow = inner(domain, ids)
        chosen = set(ids)
        tasks = {e.task_id for e in domain.train if e.id in chosen}
        every = chosen >= set(domain.train_ok)
        # the chosen episodes and the failed ones of their tasks (of every training task when
        # all are chosen, as `compile --calibrate` replays them), learning from the chosen
        episodes = [
            e
            for e in domain.train
            if e.id in chosen or (not e.succeeded and (every or e.task_id in tasks))
        ]
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
    from stretto.offline.search import Search, with_thresholds

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


variant(Variant("base", "the current flow (main's code; reach at θ 0.3)"))
variant(Variant("habit", "the next-step rule at θ 0.3", decider="habit"))
variant(Variant("ours", "this branch's learning (named_other), uncalibrated", learn=our_flow))

BINDING_CHANGES = {"named": with_named_other}


def parse(spec: str) -> Variant:
    """A variant named by its parts: `named+cal@*` = main's flow with named_other learned,
    calibrated, served at θ*; `@0.2` a threshold; `ra1` reach's α set to 1; `habit` the
    next-step rule; `ours` this branch's learning instead of main's (`cur`: main's at CURRENT);
    `search` per-site thresholds searched on the training episodes (after `cal`). A
    registered name is
    that variant."""
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
        learn = calibrated(learn)
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
    elif theta:
        threshold = lambda d, t=float(theta): t  # noqa: E731
    else:
        threshold = lambda d: THETA  # noqa: E731
    return variant(Variant(spec, spec, learn=learn, decider=decider, threshold=threshold))


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
    parser.add_argument("--against", default="base", help="the variant to judge against")
    parser.add_argument("--curve", action="store_true", help="the learning curve instead")
    parser.add_argument("--list", action="store_true", help="name the variants")
    add_option(parser)
    args = parser.parse_args()
    choose(args.tau2)
    if args.list:
        for v in VARIANTS.values():
            print(f"{v.name}: {v.claim}")
        return
    started = time.time()
    for name in args.domain or DOMAINS:
        domain = load_domain(name)
        if args.curve:
            for vname in args.variant or ["base"]:
                rows = curve(domain, parse(vname), (5, 10, 20, 40, 10**9), 5)
                print(json.dumps(rows))
            continue
        names = [n for n in (args.variant or VARIANTS) if n != args.against]
        print("\n".join(compare(domain, names, args.draws, args.against)) + "\n")
        print(f"{name}: {time.time() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
