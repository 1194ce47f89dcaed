"""The nightly relearn over a large archive: a full relearn against one after a new day.

Generates a synthetic archive (bench/synth_logs.py's sessions: by default 1,000,000 of them,
20 calls each, spread evenly over 60 days and 3 domains) and holds its last day back (1/60 of
the sessions, +1.7%). Then, for each executor — in process, and a Dask cluster of 2 worker
processes (pipeline/executor.py) — on a home of its own:

- full: the `ingest` job over the 59 days, then the `flow` of each domain (counting every
  (domain, day) part and summing them), as the nightly chain runs them;
- nightly: the last day's logs arrive; the same runs again (ingesting the new logs only,
  counting the new day's parts only, the others read back).

With `--search` the relearn runs include each domain's `thresholds` after its flow: `changed`
(the asset's own default: searched again only when the flow's counts moved past its
tolerance since the last search), `always` (every relearn searches: `max_age_days` 0, what a
relearn did before), `off` (the flow alone, the default).

`--ingest-only` runs the ingest job alone, full then nightly.

Each executor's runs happen in a process of their own (the Dask side's cluster is started by
it, so its workers are that process's children): its time per phase, and the peak resident
memory of the process tree, sampled. Prints the nightly/full ratio (goal: at most 10%) and
the Dask/in-process ratio side by side.

    .venv/bin/python bench/archive.py [--sessions 1000000] [--calls-per-session 20]
                                      [--days 60] [--result-scale 1.0]
                                      [--keep DIR] [--json FILE] [--generate-only]
                                      [--ingest-only] [--search off|changed|always]
                                      [--executors in_process,dask]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ingest import PeakMemory, tree_rss_bytes  # noqa: E402
from bench.sides import run_side  # noqa: E402

DOMAINS = ("retail", "airline", "telecom")
DAY_MS = 86_400_000
FIRST_DAY_MS = 1_790_000_000_000 // DAY_MS * DAY_MS  # a UTC midnight (2026-09-21)
ARCHIVE_SEED = 11
COMPLETE = "complete"  # written last: a folder without it is an interrupted generation


def generate(
    folder: Path, sessions: int, calls: int, days: int, result_scale: float = 1.0
) -> tuple[int, int]:
    """Write the archive: the first days-1 days under folder/logs/<domain>/, the last under
    folder/new/<domain>/, on every core (each session's draws are seeded by its index, so the
    archive is the same whatever the number of processes). (sessions, bytes) of the last day."""
    import multiprocessing

    for where in ("logs", "new"):
        for domain in DOMAINS:
            (folder / where / domain).mkdir(parents=True, exist_ok=True)
    step = 2_000
    jobs = [
        (folder, start, min(start + step, sessions), sessions, calls, days, result_scale)
        for start in range(0, sessions, step)
    ]
    last, last_bytes = 0, 0
    with multiprocessing.get_context("spawn").Pool(os.cpu_count()) as pool:
        for count, size in pool.imap_unordered(_generate_range, jobs):
            last, last_bytes = last + count, last_bytes + size
    return last, last_bytes


def _generate_range(job: tuple[Path, int, int, int, int, int, float]) -> tuple[int, int]:
    """Sessions start..end-1 of the archive: (sessions, bytes) of them on the last day."""
    from bench.synth_logs import session_lines

    folder, start, end, sessions, calls, days, result_scale = job
    last, last_bytes = 0, 0
    for index in range(start, end):
        rng = random.Random(ARCHIVE_SEED * 10**9 + index)
        day = index * days // sessions  # evenly over the days, in start order
        lines = session_lines(rng, index, calls, 1, result_scale)
        header = json.loads(lines[0])
        domain = DOMAINS[index % len(DOMAINS)]
        started = FIRST_DAY_MS + day * DAY_MS + (index * 997 % DAY_MS)
        header.update(domain=domain, started_unix_ms=started, session=f"s{index:07d}")
        lines[0] = json.dumps(header, separators=(",", ":"))
        where = "new" if day == days - 1 else "logs"
        data = ("\n".join(lines) + "\n").encode()
        (folder / where / domain / f"{header['session']}.jsonl").write_bytes(data)
        if where == "new":
            last, last_bytes = last + 1, last_bytes + len(data)
    return last, last_bytes


class MemoryTimeline(PeakMemory):
    """PeakMemory that also keeps its samples, (unix time, bytes), so each step's own peak
    can be read from the step's start and end in the run's event log."""

    def __init__(self) -> None:
        super().__init__()
        self.samples: list[tuple[float, int]] = []

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            rss = tree_rss_bytes(os.getpid())
            self.samples.append((time.time(), rss))
            self.peak = max(self.peak, rss)

    def step_peaks(self, instance, run_id: str) -> dict[str, float]:
        """Each step's peak resident memory (GB) over the samples taken while it ran."""
        spans: dict[str, list[float]] = {}
        for entry in instance.all_logs(run_id):
            if entry.step_key:
                span = spans.setdefault(entry.step_key, [entry.timestamp, entry.timestamp])
                span[0], span[1] = min(span[0], entry.timestamp), max(span[1], entry.timestamp)
        return {
            key: max((rss for at, rss in self.samples if start <= at <= end), default=0) / 1024**3
            for key, (start, end) in spans.items()
        }


def _relearn(
    home: Path,
    instance,
    run_config: dict,
    timings: dict,
    phase: str,
    memory: MemoryTimeline,
    flows: bool = True,
    search: str = "off",
) -> None:
    """The ingest run, then (with `flows`) each domain's flow run (and its thresholds, unless
    `search` is off): their seconds into timings[phase]."""
    from pipeline.run import execute, failure_message

    started = time.perf_counter()
    ingested = execute("ingest", instance, str(home), run_config=run_config)
    if not ingested.success:
        raise SystemExit(f"{phase} ingest: {failure_message(ingested)}")
    ingest_s = time.perf_counter() - started
    steps = _step_seconds(ingested)
    peaks = memory.step_peaks(instance, ingested.run_id)
    for domain in DOMAINS if flows else ():
        assets, config = ["flow"], run_config
        if search != "off":
            assets.append("thresholds")
            searching = {"max_age_days": 0.0} if search == "always" else {}
            config = {**run_config, "ops": {"thresholds": {"config": searching}}}
        learned = execute("relearn", instance, str(home), domain, run_config=config, assets=assets)
        if not learned.success:
            raise SystemExit(f"{phase} {domain} flow: {failure_message(learned)}")
        for key, seconds in _step_seconds(learned).items():
            steps[key] = steps.get(key, 0.0) + seconds
        for key, gb in memory.step_peaks(instance, learned.run_id).items():
            peaks[key] = max(peaks.get(key, 0.0), gb)
    timings[phase] = {
        "ingest_s": ingest_s,
        "learn_s": time.perf_counter() - started - ingest_s,
        "seconds": time.perf_counter() - started,
        # the ingest job's `drift` check (each domain's newest sessions, under the served flow)
        "drift_s": steps.get("steps_drift", 0.0),
        "search_s": steps.get("thresholds", 0.0),
        "steps": steps,
        "step_peak_gb": peaks,
    }


def _step_seconds(result) -> dict[str, float]:
    """Each step's own duration in a run, as Dagster measured it."""
    return {
        e.step_key: e.event_specific_data.duration_ms / 1000
        for e in result.all_events
        if e.is_step_success and e.step_key
    }


def side(executor: str, work: Path, archive: Path, flows: bool = True, search: str = "off") -> dict:
    """One executor's full relearn then nightly relearn (without `flows`: the ingest job
    alone), on a home of its own."""
    import dagster as dg

    home, dagster_home = work / "home", work / "dagster"
    dagster_home.mkdir(parents=True)
    shutil.copy(ROOT / "pipeline/dagster.yaml", dagster_home)
    shutil.copytree(archive / "logs", home / "logs", copy_function=_link)
    timings: dict = {}
    with MemoryTimeline() as memory, dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        if executor == "dask":
            import dask
            import distributed

            from pipeline.executor import dask_run_config

            # workers that may start processes: ingest spreads its batches over a pool
            with dask.config.set({"distributed.worker.daemon": False}):
                cluster = distributed.LocalCluster(
                    n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
                )
            run_config = dask_run_config(cluster.scheduler_address)
        else:
            cluster, run_config = None, {}
        try:
            _relearn(home, instance, run_config, timings, "full", memory, flows, search)
            full_peak = memory.peak
            shutil.copytree(archive / "new", home / "logs", copy_function=_link, dirs_exist_ok=True)
            _relearn(home, instance, run_config, timings, "nightly", memory, flows, search)
        finally:
            if cluster is not None:
                cluster.close()
    figures = {**timings, "full_peak_gb": full_peak / 1024**3, "peak_gb": memory.peak / 1024**3}
    if flows:
        learned = [json.loads((home / f"flows/{d}.flow.json").read_text()) for d in DOMAINS]
        figures["habit_episodes"] = sum(f["provenance"]["habit_episodes"] for f in learned)
        figures["steps"] = sum(f["provenance"]["steps"] for f in learned)
    return figures


def _link(source: str, target: str) -> None:
    """Hard-link an archive log into a home (no copy of the bytes; ingest only reads them)."""
    Path(target).hardlink_to(source)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1_000_000)
    parser.add_argument("--calls-per-session", type=int, default=20)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument(
        "--result-scale",
        type=float,
        default=1.0,
        help="multiply every result's size (a smaller archive for a smaller disk)",
    )
    parser.add_argument("--executors", default="in_process,dask")
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--generate-only", action="store_true", help="write the archive (into --keep) and stop"
    )
    parser.add_argument(
        "--ingest-only", action="store_true", help="run the ingest job alone (no flow runs)"
    )
    parser.add_argument(
        "--search",
        choices=("off", "changed", "always"),
        default="off",
        help="also run each domain's thresholds: when the counts moved (the asset's default), "
        "or on every relearn",
    )
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--archive", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side:
        figures = side(args.side, args.work, args.archive, not args.ingest_only, args.search)
        print(json.dumps(figures))
        return 0

    if args.generate_only and not args.keep:
        parser.error("--generate-only needs --keep DIR")
    work = Path(tempfile.mkdtemp(prefix="stretto-bench-archive-"))
    archive = args.keep or work / "archive"
    try:
        if not (archive / COMPLETE).is_file():
            print(
                f"generating {args.sessions} sessions x {args.calls_per_session} calls over "
                f"{args.days} days ...",
                file=sys.stderr,
            )
            started = time.perf_counter()
            shutil.rmtree(archive / "logs", ignore_errors=True)  # an interrupted one
            shutil.rmtree(archive / "new", ignore_errors=True)
            generate(archive, args.sessions, args.calls_per_session, args.days, args.result_scale)
            (archive / COMPLETE).write_text(
                f"{args.sessions} sessions, result scale {args.result_scale}\n"
            )
            print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr)
        if args.generate_only:
            return 0
        size = sum(p.stat().st_size for p in archive.rglob("*.jsonl"))
        new = sum(1 for _ in (archive / "new").rglob("*.jsonl"))
        total = sum(1 for _ in archive.rglob("*.jsonl"))
        results = {}
        for executor in args.executors.split(","):
            print(f"  {executor}: full relearn, then nightly ...", file=sys.stderr)
            figures, rss = run_side(
                __file__,
                ["--side", executor, "--work", str(work / executor), "--archive", str(archive)]
                + ["--ingest-only"] * args.ingest_only
                + ["--search", args.search],
            )
            figures["peak_gb"] = max(figures["peak_gb"], rss)
            results[executor] = figures
            shutil.rmtree(work / executor, ignore_errors=True)
        report = {
            "sessions": total,
            "new_day_sessions": new,
            "calls": total * args.calls_per_session,
            "archive_gb": round(size / 1e9, 2),
            "result_scale": args.result_scale,
            "days": args.days,
            "domains": len(DOMAINS),
            "ingest_only": args.ingest_only,
            "search": args.search,
            "executors": results,
        }
        _print(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _no_drift(result: dict, phase: str) -> float:
    return result[phase]["seconds"] - result[phase]["drift_s"]


def _print(report: dict) -> None:
    results, new = report["executors"], report["new_day_sessions"]
    print(
        f"\nrelearn over an archive: {report['sessions']:,} sessions, {report['calls']:,} calls, "
        f"{report['archive_gb']} GB (results x{report['result_scale']}) over {report['days']} days "
        f"and {report['domains']} domains; "
        f"the new day: {new:,} sessions (+{100 * new / (report['sessions'] - new):.1f}%)\n"
    )
    names = list(results)
    print(f"  {'':34}" + "".join(f"{n:>14}" for n in names))
    for phase in ("full", "nightly"):
        for part, label in (
            ("ingest_s", "ingest"),
            ("drift_s", "  of which the drift check"),
            (
                "learn_s",
                "counts + flows" + (" + search" if report.get("search", "off") != "off" else ""),
            ),
            ("search_s", "  of which the search"),
            ("seconds", "total"),
        ):
            row = "".join(f"{results[n][phase][part]:13.1f}s" for n in names)
            print(f"  {phase + ': ' + label:34}{row}")
    ratios = "".join(
        f"{results[n]['nightly']['seconds'] / results[n]['full']['seconds']:13.1%} " for n in names
    )
    print(f"  {'nightly / full (goal <= 10%)':34}{ratios}")
    ratios = "".join(
        f"{_no_drift(r, 'nightly') / _no_drift(r, 'full'):13.1%} " for r in results.values()
    )
    print(f"  {'  the same without the drift check':34}{ratios}")
    print(
        f"  {'peak memory, full (GB)':34}"
        + "".join(f"{results[n]['full_peak_gb']:14.2f}" for n in names)
    )
    print(
        f"  {'peak memory, both (GB)':34}"
        + "".join(f"{results[n]['peak_gb']:14.2f}" for n in names)
    )
    for name in names:
        for phase in ("full", "nightly"):
            top = sorted(results[name][phase]["step_peak_gb"].items(), key=lambda kv: -kv[1])[:4]
            listed = ", ".join(f"{key} {gb:.2f}" for key, gb in top)
            print(f"  {name}, {phase}: the steps' peak memory (GB): {listed}")
    if "in_process" in results and "dask" in results:
        base, dask = results["in_process"], results["dask"]
        for phase in ("full", "nightly"):
            print(
                f"  dask / in process, {phase}: "
                f"{dask[phase]['seconds'] / base[phase]['seconds']:.2f}x"
            )
        if "steps" in base:
            same = all(base[key] == dask[key] for key in ("habit_episodes", "steps"))
            print(f"  same flows' sessions and steps on both: {same}")


if __name__ == "__main__":
    sys.exit(main())
