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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--calls-per-session", type=int, default=20)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
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
