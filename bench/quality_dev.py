"""Choosing a learning change on the training episodes alone (issue 42), so that the test
episodes judge only the change that was chosen.

bench/quality.py judges a change on the test episodes. Choosing among several candidates by
those same figures makes the winner's margin optimistic (the test episodes have then been
used to choose). This script gives the figures to choose by: each domain's training episodes
are split by task into the calibration's folds (stretto.vocabulary: FNV-1a of the task id
modulo FOLDS) and, where several agents ran training tasks, by agent as well. For each fold
(and agent) the variant's flow (its learning, calibration and serving threshold, as
bench/quality.py learns it) is learned from the successful training episodes of the other
folds (and of the other agents) only, and replays that fold's (that agent's) training
episodes from the record. Every figure is of tasks the flow never saw and, where a domain has
several training agents, of an agent it never saw.

    .venv/bin/python bench/quality_dev.py --domain airline --variant SPEC --against SPEC
    .venv/bin/python bench/quality_dev.py --domain airline --save-runs FILE   (at each commit)
    .venv/bin/python bench/quality_dev.py --judge-runs BEFORE AFTER

SPEC is a bench/quality.py variant (default its served flow, `ours+cal@flow`). A change to
the learning code is judged across commits: `--save-runs` at each (the same
$STRETTO_QUALITY_CACHE), then `--judge-runs`. Printed per domain: the figures of `--against`
(or BEFORE), the paired differences with their 95% intervals over tasks (1000 draws), and the
significant gains and losses, pooled and per held-out agent.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import paired as p  # noqa: E402
from bench import quality as q  # noqa: E402
from bench.tau2data import add_option, choose  # noqa: E402
from stretto.vocabulary import FOLDS, fold_of  # noqa: E402

SHOWN = ("ceiling %", "detours/ep", "utility/ep", "brier", "ece")


def dev_splits(domain: q.Domain) -> list[q.Domain]:
    """The domain cut into (fold, agent) parts of its training episodes: each a domain whose
    `train` is every training episode of the other folds and other agents, whose `test` is
    the part's own, labelled by agent. With one training agent, by fold only."""
    agents = sorted({q.agent_key(e.agent_model) for e in domain.train if e.succeeded})
    by_agent = len(agents) > 1
    out = []
    for fold in range(FOLDS):
        for agent in agents if by_agent else [None]:

            def held(e, fold=fold, agent=agent) -> bool:
                return fold_of(e.task_id) == fold and (
                    agent is None or q.agent_key(e.agent_model) == agent
                )

            def other(e, fold=fold, agent=agent) -> bool:
                return fold_of(e.task_id) != fold and (
                    agent is None or q.agent_key(e.agent_model) != agent
                )

            test = [e for e in domain.train if held(e)]
            train = [e for e in domain.train if other(e)]
            if not test or not any(e.succeeded for e in train):
                continue
            kept = {e.id for e in train}
            results = [
                replace(r, simulations=[s for s in r.simulations if s.session in kept])
                for r in domain.results
            ]
            out.append(
                replace(
                    domain,
                    results=[r for r in results if r.simulations],
                    train=train,
                    test=[(q.agent_key(e.agent_model), e) for e in test],
                    # the learned flows' cache key: what they were learned from
                    scope=f"dev-fold{fold}-{agent or 'all'}",
                )
            )
    return out


def dev_run(domain: q.Domain, spec: str) -> p.Run:
    """The variant's replays of every part, each by the flow that never saw it."""
    v = q.parse(spec)
    runs = []
    for part in dev_splits(domain):
        flow = v.learn(part, part.train_ok)
        runs.append(p.replayed(part, flow, v.decider, v.threshold(part)))
    return q.merged(runs)


def compare(name: str, before: p.Run, after: p.Run, draws: int) -> list[str]:
    """The paired differences (after − before), pooled and per agent, as table rows."""
    d = q.domain(name)
    agents = sorted({agent for agent, _ in before.rows})
    lines = []
    for who in [None, *agents] if len(agents) > 1 else [None]:
        b = before if who is None else q.only(before, [who])
        a = after if who is None else q.only(after, [who])
        c = p.paired(b, a, d.costs, None, draws)
        gains, losses = q.significant(c)
        lines.append(
            f"| {name} | {'**pooled**' if who is None else who} | "
            + " | ".join(q._vs(c[m], q.DIGITS[m]) for m in SHOWN)
            + f" | +{','.join(gains) or '-'} / −{','.join(losses) or '-'} |"
        )
    return lines


HEADER = [
    "| domain | held-out part | "
    + " | ".join(f"{m}: before → after (Δ [95%])" for m in SHOWN)
    + " | significant (+ / −) |",
    "|---|---|" + "---|" * (len(SHOWN) + 1),
]


def read_runs(parser: argparse.ArgumentParser, path: Path) -> dict[str, p.Run]:
    """A --save-runs file, or the parser's error (exit 2) naming what is wrong with it."""
    try:
        runs = pickle.loads(path.read_bytes())
    except OSError as exc:
        parser.error(f"{path}: {exc.strerror}")
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError):
        parser.error(f"{path}: not a file --save-runs wrote")
    if not isinstance(runs, dict) or not all(isinstance(r, p.Run) for r in runs.values()):
        parser.error(f"{path}: not a file --save-runs wrote (a domain → runs table)")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--domain", choices=q.DOMAINS, action="append", help="repeatable (default: all three)"
    )
    parser.add_argument(
        "--variant",
        default=q.SERVED,
        help="the change, a bench/quality.py variant (default %(default)s: the served flow)",
    )
    parser.add_argument("--against", metavar="VARIANT", help="the variant it is judged against")
    parser.add_argument("--draws", type=int, default=1000, help="bootstrap draws (%(default)s)")
    parser.add_argument(
        "--save-runs",
        type=Path,
        metavar="FILE",
        help="pickle --variant's replays (one commit's side of --judge-runs)",
    )
    parser.add_argument(
        "--judge-runs",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="two --save-runs files (two commits' code) judged against each other",
    )
    add_option(parser)
    args = parser.parse_args()
    names = args.domain or list(q.DOMAINS)
    if args.judge_runs:
        before, after = (read_runs(parser, f) for f in args.judge_runs)
        choose(args.tau2)
        lines = list(HEADER)
        for name in [n for n in before if n in after]:
            lines += compare(name, before[name], after[name], args.draws)
        print("\n".join(lines))
        return
    choose(args.tau2)
    if args.save_runs:
        runs = {name: dev_run(q.domain(name), args.variant) for name in names}
        args.save_runs.write_bytes(pickle.dumps(runs))
        print(f"wrote {args.save_runs}", file=sys.stderr)
        return
    if not args.against:
        parser.error("give --against SPEC, --save-runs FILE or --judge-runs BEFORE AFTER")
    lines = list(HEADER)
    for name in names:
        d = q.domain(name)
        lines += compare(name, dev_run(d, args.against), dev_run(d, args.variant), args.draws)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
