"""The threshold search, before and after, side by side in one run: τ²-bench retail's flow
(`stretto compile` on its training tasks, as bench/replay.py learns it) searched with reach on
its successful training episodes at retail's costs, by this tree's
stretto.offline.reports.search and by the one at git revision --before (default: main), each run
--runs times, alternating.

Prints each run's wall and CPU seconds, episode replays and settings scored, the median
ratios before/after, and checks that both chose the same thresholds and scored the same
totals for every setting.

    .venv/bin/python bench/search.py [--before REV] [--runs N] [--domain retail]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replay import COSTS, THETA, compile_flow, domain_files  # noqa: E402
from bench.tau2data import add_option, choose, tau2  # noqa: E402
from stretto.logs.tau2 import episodes_from_results  # noqa: E402
from stretto.logs.tau2_inputs import read_split  # noqa: E402
from stretto.offline.reports import search as after  # noqa: E402


def search_module_at(revision: str, folder: Path):
    """stretto/offline/reports/search.py as it was at `revision`, imported beside this tree's."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:stretto/offline/reports/search.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = folder / "search_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("search_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def timed(module, flow: dict, episodes: list, costs) -> tuple[float, float, object, object]:
    """Wall and CPU seconds (this process's: the search is serial), the search, its choice."""
    started, cpu = time.perf_counter(), time.process_time()
    search = module.Search(flow, episodes, decider="reach", threshold=THETA, costs=costs)
    chosen = search.run()
    return time.perf_counter() - started, time.process_time() - cpu, search, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="git revision to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--domain", default="retail")
    add_option(parser)
    args = parser.parse_args()
    choose(args.tau2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        before = search_module_at(args.before, folder)
        files = domain_files(args.domain)
        flow = compile_flow(args.domain, files, folder / "flow.json", folder)
        split = read_split(tau2() / "domains" / args.domain / "split_tasks.json")
        episodes = [
            e for e in episodes_from_results(files) if e.task_id in split["train"] and e.succeeded
        ]
        costs = COSTS[args.domain]
        print(
            f"{args.domain}: {len(episodes)} episodes, {len(after.searchable_sites(flow))} "
            f"sites searched, costs β {costs[0]}, δ {costs[1]}"
        )
        seconds: dict[str, list[float]] = {"before": [], "after": []}
        cpu: dict[str, list[float]] = {"before": [], "after": []}
        results = {}
        for run in range(args.runs):
            for name, module in (("before", before), ("after", after)):
                took, used, search, chosen = timed(module, flow, episodes, costs)
                seconds[name].append(took)
                cpu[name].append(used)
                results[name] = (search, chosen)
                print(
                    f"run {run + 1} {name:6} {took:7.2f} s ({used:6.2f} s CPU)  "
                    f"{search.replays:6} replays  "
                    f"{len(search.scored):4} settings scored"
                )
        (old, old_chosen), (new, new_chosen) = results["before"], results["after"]
        same_choice = old_chosen.setting == new_chosen.setting
        same_scores = {k: vars(v) for k, v in old.scored.items()} == {
            k: vars(v) for k, v in new.scored.items()
        }
        b, a = statistics.median(seconds["before"]), statistics.median(seconds["after"])
        bc, ac = statistics.median(cpu["before"]), statistics.median(cpu["after"])
        print(
            f"median: before {b:.2f} s ({bc:.2f} s CPU; {args.before}), after {a:.2f} s "
            f"({ac:.2f} s CPU; this tree); ratio before/after {b / a:.2f} wall, {bc / ac:.2f} CPU; "
            f"replays {old.replays} -> {new.replays} "
            f"(ratio {old.replays / max(new.replays, 1):.2f})"
        )
        print(
            f"same thresholds chosen: {same_choice}; same totals for every setting: {same_scores}"
        )
        if not (same_choice and same_scores):
            raise SystemExit("the searches disagree")


if __name__ == "__main__":
    main()
