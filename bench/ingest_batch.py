"""Where one ingest batch's CPU goes: each statement of warehouse/sql/ingest.sql, the Python
passes (turns, tool lists) and each table's Parquet write, timed in this process on one
thread through the workers' own `ingest_batch` (warehouse/ingest/batches.py, its `run_step` hook).

Reads the first `--files` session logs of an archive (bench/ingest.py `--keep DIR` leaves one;
without it, a small one is generated), runs the batch `--repeat` times and prints each step's
median CPU seconds and its share of the whole.

    .venv/bin/python bench/ingest_batch.py [--logs DIR] [--files 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def profile_batch(files, layout, tag: str, times: dict[str, list[float]]) -> None:
    """One batch through warehouse.ingest.batches.ingest_batch itself, each step's CPU into
    `times`."""
    from warehouse.ingest import batches as ingest

    def timed(name: str, step: Callable[[], object]) -> None:
        started = cpu_seconds()
        step()
        times[name].append(cpu_seconds() - started)

    started = cpu_seconds()
    ingest.ingest_batch(files, "bench", layout, tag, run_step=timed)
    times["the whole batch"].append(cpu_seconds() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=Path, help="an archive of session logs (else generated)")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from warehouse import store
    from warehouse.ingest.discover import discover
    from warehouse.layout import Layout

    work = Path(tempfile.mkdtemp(prefix="stretto-bench-batch-"))
    try:
        logs = args.logs
        if logs is None:
            from bench.synth_logs import generate

            logs = work / "archive"
            generate(logs, args.files, args.files * 20)
        (work / "home").mkdir()
        (work / "home" / "logs").symlink_to(logs.resolve())
        layout = Layout.at(work / "home")
        files = discover(layout, store.known_state(layout)).read[: args.files]
        if not files:
            print(f"no session logs under {logs}", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = defaultdict(list)
        for rep in range(max(args.repeat, 1)):
            profile_batch(files, layout, f"rep{rep}", times)
        total = statistics.median(times["the whole batch"])
        size = sum(f.size for f in files) / 1e6
        print(
            f"one batch: {len(files)} sessions, {size:.1f} MB; CPU seconds, median of "
            f"{max(args.repeat, 1)}\n"
        )
        for name, values in times.items():
            seconds = statistics.median(values)
            if seconds >= 0.005 or name == "the whole batch":
                print(f"  {name:24s}{seconds:7.2f}  {100 * seconds / total:5.1f}%")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
