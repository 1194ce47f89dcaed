"""The ingest job's drift check over an archive: what it costs when its cache holds the served
flows' values, and when it does not.

bench/archive.py's archive (its sessions over 60 days and 3 domains, the last day held back),
in process, on a home of its own: the `ingest` job over 59 days and each domain's `flow` (the
flows served), then three ingest runs, each with the drift check:

- first: the full ingest's own check, before any flow is served: it scores nothing, but keeps
  every session's facts (the decision points and the steps' tools; its `read`);
- cold: the first half of the new day arrives; the check scores every session under the flows
  just learned (no check has run under them: what bench/archive.py's nightly measures), from
  the facts the first check kept: only the new logs are read;
- warm: the second half arrives, the served flows unchanged (the `nightly_stage` schedule,
  or any ingest before the next relearn): only the new sessions are read and scored;
- relearned: each domain's flow is learned again and served (the `nightly` schedule), then
  an ingest with nothing new: every session is scored again, under the new flows, from the
  facts cache (`read`: the logs read; none here).

Prints each check's seconds (Dagster's step time), the sessions it scored and took from its
cache, and warm / cold.

    .venv/bin/python bench/drift.py [--sessions 3000] [--keep DIR] [--json FILE]

`--sizes 100,400,800,2000`: instead, `stretto drift`'s work (drift.drift) on one session of
about that many calls (tests/stretto/offline/lifecycle/lifecycle.py's shop sessions, a flow
learned from 30 of them), per size: the seconds, against the seconds reading the session alone
(the baseline measured in the same run); with `--old-tree DIR` (a checkout of an older commit,
e.g. `git worktree add /tmp/old main`) also that tree's drift on the same files, in a child
process, for the sizes up to `--old-max-calls`.

`--detection N`: instead, the alarm on N generated help-desk series (write_tickets: a flow
learned from 30 sessions of an agent that looks up each ticket's requester): 12 sessions as
trained then 12 where the agent stops (`no-requester`) or stops on half the tickets (`half`),
and 24 unchanged sessions (also 100 unchanged, and 100 `half` ones: steady, but never as
trained); per kind, how often the command would exit 1 after the last
session, the detection delay (sessions from the change to the first alarm) and alarms on
unchanged series (false alarms), with 100-session unchanged series for the per-session rate.

    .venv/bin/python bench/drift.py --sizes 100,400,800,2000 [--old-tree DIR]
    .venv/bin/python bench/drift.py --detection 200
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.archive import DOMAINS, generate  # noqa: E402


def _check(instance, home: Path) -> dict:
    """One ingest run: the drift check's seconds and per-domain figures."""
    from pipeline.run import execute, failure_message

    started, cpu = time.perf_counter(), time.process_time()
    result = execute("ingest", instance, str(home))
    if not result.success:
        raise SystemExit(f"ingest: {failure_message(result)}")
    seconds = {
        e.step_key: e.event_specific_data.duration_ms / 1000
        for e in result.all_events
        if e.is_step_success and e.step_key
    }
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "drift"]
    domains = evaluation.metadata["domains"].value
    gathered = evaluation.metadata.get("facts gathered (logs read)")
    return {
        "ingest_s": time.perf_counter() - started,
        "ingest_cpu_s": time.process_time() - cpu,
        "drift_s": seconds.get("steps_drift", 0.0),
        "sessions": sum(d["sessions"] for d in domains.values()),
        "scored": sum(d["scored"] for d in domains.values()),
        "read": sum(d.get("logs read", d["scored"]) for d in domains.values())
        + sum(gathered.value.values() if gathered else ()),
    }


def _learn(instance, home: Path) -> None:
    from pipeline.run import execute, failure_message

    for domain in DOMAINS:
        learned = execute("relearn", instance, str(home), domain, assets=["flow"])
        if not learned.success:
            raise SystemExit(f"{domain} flow: {failure_message(learned)}")


def run(archive: Path, work: Path) -> dict:
    import dagster as dg

    home, dagster_home = work / "home", work / "dagster"
    dagster_home.mkdir(parents=True)
    shutil.copy(ROOT / "pipeline/dagster.yaml", dagster_home)
    shutil.copytree(archive / "logs", home / "logs", copy_function=_link)
    new = sorted((archive / "new").rglob("*.jsonl"))
    halves = new[0::2], new[1::2]
    out: dict = {}
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        ingested = sum(1 for _ in (archive / "logs").rglob("*.jsonl"))
        out["first"] = {**_check(instance, home), "new": ingested}
        _learn(instance, home)
        for name, half in zip(("cold", "warm"), halves, strict=True):
            for path in half:
                target = home / "logs" / path.relative_to(archive / "new")
                target.parent.mkdir(parents=True, exist_ok=True)
                _link(str(path), str(target))
            out[name] = {**_check(instance, home), "new": len(half)}
        _learn(instance, home)
        out["relearned"] = {**_check(instance, home), "new": 0}
    return out


def _link(source: str, target: str) -> None:
    Path(target).hardlink_to(source)


# --- --sizes: drift's time against the session's calls ---------------------------------------

CALLS_PER_CUSTOMER = 4.55  # lifecycle.customer's calls on average (usual habit)

_OLD = """
import json, sys, time
from pathlib import Path
from stretto.logs.merged import read_episodes
from stretto.offline.lifecycle.drift import drift
flow = json.loads(Path(sys.argv[1]).read_text())
episodes = read_episodes(sys.argv[2])
started = time.perf_counter()
drift(flow, episodes)
print(time.perf_counter() - started)
"""


def sizes(targets: list[int], old_tree: Path | None, old_max: int) -> list[dict]:
    import os
    import subprocess

    from stretto.logs.merged import read_episodes
    from stretto.offline.lifecycle.drift import drift
    from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions

    work = Path(tempfile.mkdtemp(prefix="stretto-bench-drift-sizes-"))
    rows = []
    try:
        write_sessions(work / "train", ["usual"] * 30, seed=1)
        flow = learn_folder(work / "train", work / "shop.flow.json", work / "home")
        for target in targets:
            folder = work / f"calls-{target}"
            customers = max(1, round(target / CALLS_PER_CUSTOMER))
            (path,) = write_sessions(folder, ["usual"], seed=3, customers=customers, start=9000)
            calls = path.read_text().count('"tools/call"')
            started = time.perf_counter()
            episodes = read_episodes(folder)
            read_s = time.perf_counter() - started
            started = time.perf_counter()
            result = drift(flow, episodes)
            drift_s = time.perf_counter() - started
            row = {
                "calls": calls,
                "decisions": result.sessions[0]["decisions"],
                "read_s": read_s,
                "drift_s": drift_s,
            }
            if old_tree is not None and target <= old_max:
                env = {**os.environ, "PYTHONPATH": str(old_tree)}
                done = subprocess.run(
                    [sys.executable, "-c", _OLD, str(work / "shop.flow.json"), str(folder)],
                    env=env,
                    cwd=old_tree,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row["old_s"] = float(done.stdout.split()[-1])
            rows.append(row)
            _size_row(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _size_row(row: dict) -> None:
    old = f"{row['old_s']:9.2f}s" if "old_s" in row else f"{'—':>10}"
    print(
        f"  {row['calls']:6,}{row['decisions']:10,}{row['read_s']:9.3f}s{row['drift_s']:9.3f}s"
        f"{row['drift_s'] / row['read_s']:9.1f}×{old}",
        flush=True,
    )


# --- --detection: the alarm on generated help-desk series -----------------------------------

BEFORE = AFTER = 12


def detection(series: int) -> dict:
    from stretto.logs.merged import read_episodes
    from stretto.offline.lifecycle.drift import Settings, drift
    from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_tickets

    work = Path(tempfile.mkdtemp(prefix="stretto-bench-drift-detect-"))
    out: dict = {}
    try:
        write_tickets(work / "train", ["requester"] * 30, seed=1)
        flow = learn_folder(work / "train", work / "desk.flow.json", work / "home", domain="desk")
        kinds = {
            "no-requester": ["requester"] * BEFORE + ["no-requester"] * AFTER,
            "half": ["requester"] * BEFORE + ["half"] * AFTER,
            "unchanged": ["requester"] * (BEFORE + AFTER),
            "unchanged-100": ["requester"] * 100,
            "steady-half-100": ["half"] * 100,  # no change, but unlike training throughout
        }
        for kind, habits in kinds.items():
            sounding = alarmed = false_sessions = sessions = 0
            delays: list[int] = []
            for seed in range(series):
                folder = work / kind / str(seed)
                write_tickets(folder, habits, seed=10_000 + seed, start=1000)
                result = drift(flow, read_episodes(folder), settings=Settings())
                shutil.rmtree(folder)
                sounding += result.sounding
                changed = kind in ("no-requester", "half")
                first = next((a for a in result.alarms if not changed or a["at"] >= BEFORE), None)
                if first is not None:
                    alarmed += 1
                    if changed:
                        delays.append(first["at"] - BEFORE)
                false_sessions += sum(
                    r["change"] >= 0.5 for r in result.sessions[: BEFORE if changed else None]
                )
                sessions += BEFORE if changed else len(habits)
            out[kind] = {
                "series": series,
                "sounding_at_end": sounding,
                "alarmed": alarmed,
                "delays": delays,
                "false_alarm_sessions": false_sessions,
                "sessions_watched": sessions,
            }
            _detection_row(kind, out[kind])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _detection_row(kind: str, f: dict) -> None:
    delays = sorted(f["delays"])
    if delays:
        median = delays[len(delays) // 2]
        p90 = delays[min(len(delays) - 1, int(0.9 * len(delays)))]
        delay = f"{median:>6}{p90:>5}{max(delays):>5}"
    else:
        delay = f"{'—':>6}{'—':>5}{'—':>5}"
    print(
        f"  {kind:15}{f['series']:7}{f['sounding_at_end']:9}{f['alarmed']:9}{delay}"
        f"{f['false_alarm_sessions']:8}/{f['sessions_watched']}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", help="comma-separated calls per session: time drift on them")
    parser.add_argument("--old-tree", type=Path, help="with --sizes: also time this tree's drift")
    parser.add_argument("--old-max-calls", type=int, default=800)
    parser.add_argument("--detection", type=int, metavar="N", help="the alarm on N series each")
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--calls-per-session", type=int, default=20)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.sizes:
        print("\n`stretto drift` on one session, in process\n")
        print(f"  {'calls':>6}{'decisions':>10}{'read':>10}{'drift':>10}{'/ read':>10}{'old':>10}")
        rows = sizes([int(n) for n in args.sizes.split(",")], args.old_tree, args.old_max_calls)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        return 0
    if args.detection:
        print(f"\nthe alarm on generated help-desk series ({BEFORE} + {AFTER} sessions)\n")
        print(
            f"  {'series':16}{'count':>6}{'exit 1':>9}{'alarmed':>9}{'delay':>6}{'p90':>5}"
            f"{'max':>5}  false-alarm sessions (before the change)"
        )
        figures = detection(args.detection)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1) + "\n")
        return 0
    work = Path(tempfile.mkdtemp(prefix="stretto-bench-drift-"))
    archive = args.keep or work / "archive"
    try:
        if not (archive / "logs").is_dir():
            generate(archive, args.sessions, args.calls_per_session, args.days)
        figures = run(archive, work / "run")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nthe drift check over {figures['cold']['sessions']:,}+ sessions, in process\n")
    print(
        f"  {'':12}{'new':>6}{'scored':>8}{'read':>7}{'drift check':>13}{'ingest job':>12}"
        f"{'(CPU)':>9}"
    )
    for name, f in figures.items():
        print(
            f"  {name:12}{f['new']:6}{f['scored']:8}{f['read']:7}{f['drift_s']:12.2f}s"
            f"{f['ingest_s']:11.1f}s"
            f"{f['ingest_cpu_s']:8.1f}s"
        )
    print(f"  warm / cold: {figures['warm']['drift_s'] / figures['cold']['drift_s']:.1%}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
