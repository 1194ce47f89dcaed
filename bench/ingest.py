"""Ingest throughput: our JSONL -> Parquet ingest against DuckDB's own `read_json` (the floor).

Generates a synthetic archive (bench/synth_logs.py: by default 50,000 sessions and 1M calls,
results of skewed, realistic sizes), then, in one run and alternating, times

- the floor: `COPY (SELECT * FROM read_json(<all files>, format='newline_delimited'))
  TO 'x.parquet'`, DuckDB parsing the same files straight into one Parquet file;
- ours: discovery, ingest into the warehouse's partitioned tables (sessions, messages,
  calls with their LLM turns, context, tools, quarantine) and the registry and views;
- ours, steps: deriving the steps table from those (reported apart).

Each side runs in its own process, so its peak memory (max RSS) is its own. Prints MB/s,
the ratio ours/floor, CPU seconds and peak memory. Goals (issue 41, item 8): within 2.0x of the
floor, under 4 GB.

    .venv/bin/python bench/ingest.py [--sessions 50000] [--calls 1000000] [--repeat 2]
                                     [--keep DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.sides import run_side  # noqa: E402


def side_floor(logs: Path, out: Path) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")  # as ours runs
    started, cpu = time.perf_counter(), cpu_seconds()
    con.execute(
        f"COPY (SELECT * FROM read_json('{logs}/*/*.jsonl', format = 'newline_delimited')) "
        f"TO '{out / 'floor.parquet'}' (FORMAT parquet)"
    )
    return {"seconds": time.perf_counter() - started, "cpu_seconds": cpu_seconds() - cpu}


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the ingest workers):
    what a side costs, however busy the machine is with other work."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def tree_rss_bytes(root: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(rss.get(pid, 0) for pid in tree)


class PeakMemory:
    """Samples this process tree's resident memory every 0.5 s; `peak` in bytes."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, tree_rss_bytes(os.getpid()))

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def side_ours(home: Path) -> dict:
    from warehouse import store
    from warehouse.ingest import workers
    from warehouse.ingest.discover import discover
    from warehouse.ingest.run import ingest_plan
    from warehouse.ingest.steps import derive_steps
    from warehouse.layout import Layout

    layout = Layout.at(home)
    with PeakMemory() as memory:
        started, cpu = time.perf_counter(), cpu_seconds()
        # discovery (hashing), the batches, the atomic moves and the commit, as a run does
        with workers.worker_pool() as pool:
            plan = discover(layout, store.known_state(layout), pool=pool)
            _, stats = ingest_plan(layout, plan, "bench", pool=pool)
        seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
        started = time.perf_counter()
        steps = derive_steps(layout, "bench-steps")
        steps_seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "steps_seconds": steps_seconds,
        "files": stats.files,
        "lines": stats.lines_read,
        "rows": stats.rows,
        "steps": steps,
        "balanced": stats.balanced,
        "tree_peak_gb": memory.peak / 1024**3,
        "workers": workers.WORKERS,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="generate into (or reuse) this folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--side", choices=("floor", "ours"), help=argparse.SUPPRESS)
    parser.add_argument("--logs", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side == "floor":
        print(json.dumps(side_floor(args.logs, args.out)))
        return 0
    if args.side == "ours":
        print(json.dumps(side_ours(args.out)))
        return 0

    from bench.synth_logs import generate

    work = Path(tempfile.mkdtemp(prefix="stretto-bench-ingest-"))
    archive = args.keep or work / "archive"
    try:
        if not (archive.is_dir() and any(archive.iterdir())):
            print(f"generating {args.sessions} sessions, {args.calls} calls ...", file=sys.stderr)
            generate(archive, args.sessions, args.calls)
        size = sum(p.stat().st_size for p in archive.rglob("*.jsonl"))
        floors, ours = [], []
        for rep in range(args.repeat):
            for side in ("floor", "ours") if rep % 2 == 0 else ("ours", "floor"):
                out = work / f"{side}-{rep}"
                out.mkdir()
                if side == "floor":
                    floors.append(
                        run_side(
                            __file__, ["--side", "floor", "--logs", str(archive), "--out", str(out)]
                        )
                    )
                else:
                    (out / "logs").symlink_to(archive.resolve())
                    ours.append(run_side(__file__, ["--side", "ours", "--out", str(out)]))
                shutil.rmtree(out)
                print(f"  rep {rep + 1}: {side} done", file=sys.stderr)
        # ours: sampled over the process and its ingest workers together
        ours = [(o, max(rss, o["tree_peak_gb"])) for o, rss in ours]
        floor_s = min(f[0]["seconds"] for f in floors)
        ours_s = min(o[0]["seconds"] for o in ours)
        steps_s = min(o[0]["steps_seconds"] for o in ours)
        floor_cpu = min(f[0]["cpu_seconds"] for f in floors)
        ours_cpu = min(o[0]["cpu_seconds"] for o in ours)
        detail = ours[0][0]
        mb = size / 1e6
        figures = {
            "archive_mb": round(mb, 1),
            "sessions": detail["files"],
            "lines": detail["lines"],
            "calls": detail["rows"]["calls"],
            "steps": detail["steps"],
            "floor_s": round(floor_s, 2),
            "ours_s": round(ours_s, 2),
            "steps_s": round(steps_s, 2),
            "floor_mb_s": round(mb / floor_s, 1),
            "ours_mb_s": round(mb / ours_s, 1),
            "ratio": round(ours_s / floor_s, 2),
            "ratio_with_steps": round((ours_s + steps_s) / floor_s, 2),
            "floor_cpu_s": round(floor_cpu, 2),
            "ours_cpu_s": round(ours_cpu, 2),
            "cpu_ratio": round(ours_cpu / floor_cpu, 2),
            "floor_peak_gb": round(max(f[1] for f in floors), 2),
            "ours_peak_gb": round(max(o[1] for o in ours), 2),
            "balanced": detail["balanced"],
        }
        print(
            f"\nstretto ingest vs DuckDB read_json (best of {args.repeat}, each side in its own "
            f"process)\narchive: {figures['sessions']} sessions, {figures['lines']} lines, "
            f"{figures['calls']} calls, {mb:.0f} MB\n"
        )
        print(f"  {'':28}{'seconds':>9}{'MB/s':>8}{'peak GB':>9}")
        print(
            f"  {'floor: read_json -> Parquet':28}{floor_s:9.1f}{mb / floor_s:8.1f}"
            f"{figures['floor_peak_gb']:9.2f}"
        )
        print(
            f"  {'ours: ingest -> tables':28}{ours_s:9.1f}{mb / ours_s:8.1f}"
            f"{figures['ours_peak_gb']:9.2f}"
        )
        print(f"  {'ours: + steps':28}{steps_s:9.1f}")
        print(
            f"\n  CPU seconds (all cores; less moved by other work on the machine): floor "
            f"{floor_cpu:.1f}, ours {ours_cpu:.1f} ({ours_cpu / floor_cpu:.2f}x)"
        )
        print(
            f"\n  ratio ours/floor: {figures['ratio']:.2f}x (with steps "
            f"{figures['ratio_with_steps']:.2f}x); goal within 2.0x (issue 41)"
        )
        print(
            f"  peak memory: {figures['ours_peak_gb']:.2f} GB (the main process and "
            f"{detail['workers']} ingest workers, sampled together); goal under 4 GB"
        )
        print(f"  lines read = ingested + quarantined + dropped: {figures['balanced']}")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
