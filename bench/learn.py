"""Learning throughput: a flow's counts from Parquet steps, DuckDB against a plain Python
dict counter over the same rows, and against a bare DuckDB window and group-by.

Generates synthetic steps (sessions of about 20 steps over 30 tools, a third of them writes,
replies now and then) as Parquet, 1M and 10M rows by default. For each size, in one run:

- ours: the habit, reach and sites counts (warehouse/sql/counts.sql, DuckDB from the Parquet
  file) and the α fit (stretto.model.habit), in a process of its own (for its peak memory);
- baseline: the same counts by a Python loop with dicts over the same rows (read with
  pyarrow), in a process of its own. The two sets of counts are checked to be equal;
- bare DuckDB: the least a DuckDB count of a habit can be — one window (each step's last two
  steps) and one group-by (the three levels' counts) over the same Parquet file — in a process
  of its own. Issue 14's goal: ours within 2x of it.

Ours and the bare DuckDB side run `--repeat` times, alternating, and each keeps its best
(the machine's other work moves single runs by half); the baseline runs once. Prints seconds,
rows/s, the ratios baseline/ours and ours/bare DuckDB, and peak memory. Goals:
10M steps counted in under 15 s, under 4 GB. `--code DIR` runs ours from another checkout of
the repository (a `git worktree` of main: the figures before a change).

    .venv/bin/python bench/learn.py [--sizes 1000000,10000000] [--repeat 3] [--code DIR]
                                    [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.sides import run_side  # noqa: E402
from stretto.vocabulary import RESPOND, RESPOND_END  # noqa: E402

TOOLS = 30
KINDS = {f"tool_{i:02d}": ("write" if i % 3 == 0 else "read") for i in range(TOOLS)}


def generate(path: Path, rows: int) -> None:
    import duckdb

    con = duckdb.connect()
    # A step's action depends on the one before it (a skewed chain), so contexts repeat.
    con.execute(f"""
        COPY (
            SELECT 's' || (i // 20)::VARCHAR AS session, (i % 20)::INTEGER AS step,
                   CASE WHEN a = {TOOLS} THEN 'respond' ELSE 'tool_' || lpad(a::VARCHAR, 2, '0') END
                       AS action,
                   CASE WHEN a = {TOOLS} THEN 'reply' ELSE 'tool' END AS kind,
                   CASE WHEN a = {TOOLS}
                        THEN (CASE WHEN hash(i) % 2 = 0 THEN 'reply' ELSE 'end' END)
                        WHEN hash(i * 7) % 10 = 0 THEN 'failed' ELSE 'ok' END AS outcome,
                   (i // 20)::BIGINT AS session_order
            FROM (SELECT range AS i,
                         CAST(floor(pow((hash(range // 3) % 1000) / 1000.0, 2) * {TOOLS + 1})
                              AS INTEGER) AS a
                  FROM range({rows}))
        ) TO '{path}' (FORMAT parquet)
    """)


def side_ours(path: Path) -> dict:
    import duckdb

    from stretto.model.habit import fit_alpha
    from warehouse.counts.learn import count_steps

    started = time.perf_counter()
    con = duckdb.connect()
    counts = count_steps(con, f"SELECT * FROM read_parquet('{path}')", KINDS)
    counted = time.perf_counter() - started
    fit = fit_alpha(counts.prequential, TOOLS + 2)
    return {
        "seconds": time.perf_counter() - started,
        "count_seconds": counted,
        "alpha": fit["alpha"],
        "digest": digest(counts.habit, counts.reach, counts.sites),
    }


def side_duckdb(path: Path) -> dict:
    """A bare DuckDB count of the habit: one window, one group-by, nothing else."""
    import duckdb

    started = time.perf_counter()
    con = duckdb.connect()
    rows = con.execute(f"""
        WITH named AS (
            SELECT session, step, action,
                   CASE WHEN kind = 'tool'
                        THEN action || CASE WHEN outcome = 'failed' THEN ' (error)' ELSE '' END
                        WHEN outcome = 'reply' THEN 'respond' ELSE 'respond (end)' END AS symbol
            FROM read_parquet('{path}')
        ), histories AS (
            SELECT action, coalesce(lag(symbol, 1) OVER w, '<start>') AS h1,
                   coalesce(lag(symbol, 2) OVER w, '<start>') AS h2
            FROM named WINDOW w AS (PARTITION BY session ORDER BY step)
        )
        SELECT h2, h1, action, count(*) FROM histories
        GROUP BY GROUPING SETS ((action), (h1, action), (h2, h1, action))
    """).fetchall()
    return {"seconds": time.perf_counter() - started, "groups": len(rows)}


def side_baseline(path: Path) -> dict:
    import pyarrow.parquet as pq

    started = time.perf_counter()
    table = pq.read_table(
        path, columns=["session", "step", "action", "kind", "outcome", "session_order"]
    )
    table = table.sort_by([("session_order", "ascending"), ("step", "ascending")])
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    habit: dict = {}
    reach: dict = {}
    sites: dict = {}
    n = table.num_rows
    i = 0
    while i < n:
        j = i
        while j < n and cols["session"][j] == cols["session"][i]:
            j += 1
        symbols, actions, writes = [], [], []
        for k in range(i, j):
            action, kind, outcome = cols["action"][k], cols["kind"][k], cols["outcome"][k]
            if kind == "tool":
                symbols.append(action + (" (error)" if outcome == "failed" else ""))
            else:
                symbols.append(RESPOND if outcome == "reply" else RESPOND_END)
            actions.append(action)
            writes.append(kind == "tool" and KINDS.get(action) == "write")
        for t, action in enumerate(actions):
            h1 = symbols[t - 1] if t >= 1 else "<start>"
            h2 = symbols[t - 2] if t >= 2 else "<start>"
            for history in ((), (h1,), (h2, h1)):
                level = habit.setdefault(history, {})
                level[action] = level.get(action, 0.0) + 1
            seen = set()
            for u in range(t, len(actions)):
                if writes[u]:
                    break
                seen.add(actions[u])
            for history in ((), (h1,), (h2, h1)):
                level = reach.setdefault(history, {})
                for a in seen:
                    level[a] = level.get(a, 0.0) + 1
            if (
                t + 1 < len(actions)
                and cols["kind"][i + t] == "tool"
                and cols["kind"][i + t + 1] == "tool"
                and KINDS.get(actions[t + 1]) == "read"
            ):
                key = (action, cols["outcome"][i + t] == "failed")
                site = sites.setdefault(key, {})
                site[actions[t + 1]] = site.get(actions[t + 1], 0) + 1
        i = j
    return {"seconds": time.perf_counter() - started, "digest": digest(habit, reach, sites)}


def digest(habit: dict, reach: dict, sites: dict) -> str:
    import hashlib

    def norm(levels: dict) -> list:
        return sorted((list(h), sorted(c.items())) for h, c in levels.items() if c)

    text = json.dumps(
        [norm(habit), norm(reach), sorted([list(k), sorted(v.items())] for k, v in sites.items())]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--repeat", type=int, default=3, help="runs of ours and bare DuckDB")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--code", type=Path, help="run ours from this checkout")
    parser.add_argument("--side", choices=("ours", "baseline", "duckdb"), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        if args.code:  # ours from that checkout: its warehouse and stretto first on the path
            sys.path.insert(0, str(args.code.resolve()))
        side = {"ours": side_ours, "baseline": side_baseline, "duckdb": side_duckdb}[args.side]
        print(json.dumps(side(args.path)))
        return 0
    code = ["--code", str(args.code)] if args.code else []
    results = []
    with tempfile.TemporaryDirectory(prefix="stretto-bench-learn-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            path = Path(tmp) / f"steps-{size}.parquet"
            generate(path, size)
            ours_runs, bare_runs = [], []
            for rep in range(max(args.repeat, 1)):
                for side in ("ours", "duckdb") if rep % 2 == 0 else ("duckdb", "ours"):
                    extra = code if side == "ours" else []
                    run = run_side(__file__, ["--side", side, "--path", str(path), *extra])
                    (ours_runs if side == "ours" else bare_runs).append(run)
            ours, ours_gb = min(ours_runs, key=lambda r: r[0]["seconds"])
            bare, _ = min(bare_runs, key=lambda r: r[0]["seconds"])
            base, base_gb = run_side(__file__, ["--side", "baseline", "--path", str(path)])
            results.append(
                {
                    "rows": size,
                    "ours_s": round(ours["seconds"], 2),
                    "ours_count_s": round(ours["count_seconds"], 2),
                    "baseline_s": round(base["seconds"], 2),
                    "speedup": round(base["seconds"] / ours["seconds"], 1),
                    "bare_duckdb_s": round(bare["seconds"], 2),
                    "ours_over_bare": round(ours["seconds"] / bare["seconds"], 2),
                    "ours_runs_s": [round(r[0]["seconds"], 2) for r in ours_runs],
                    "bare_runs_s": [round(r[0]["seconds"], 2) for r in bare_runs],
                    "ours_peak_gb": round(ours_gb, 2),
                    "baseline_peak_gb": round(base_gb, 2),
                    "same_counts": ours["digest"] == base["digest"],
                    "alpha": ours["alpha"],
                }
            )
            print(f"  {size:,} rows done", file=sys.stderr)
    print(
        "\nlearning a flow's counts: DuckDB (ours) vs a Python dict counter (baseline), "
        "each in its own process\n"
    )
    print(
        f"  {'rows':>12}{'ours s':>9}{'(count)':>9}{'rows/s':>12}{'baseline s':>12}"
        f"{'speedup':>9}{'bare s':>8}{'ours/bare':>10}{'ours GB':>9}{'base GB':>9}  same counts"
    )
    for r in results:
        print(
            f"  {r['rows']:>12,}{r['ours_s']:>9.1f}{r['ours_count_s']:>9.1f}"
            f"{r['rows'] / r['ours_s']:>12,.0f}{r['baseline_s']:>12.1f}{r['speedup']:>8.1f}x"
            f"{r['bare_duckdb_s']:>8.1f}{r['ours_over_bare']:>9.2f}x"
            f"{r['ours_peak_gb']:>9.2f}{r['baseline_peak_gb']:>9.2f}  {r['same_counts']}"
        )
        print(f"  {'':>12}each run: ours {r['ours_runs_s']}, bare {r['bare_runs_s']}")
    print(
        "\n  goals: 10M steps in under 15 s, under 4 GB (ours includes the α fit); "
        "ours within 2x of the bare DuckDB window + group-by"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
