"""The console's drift on a long session: the time from the first request of a flow's drift
to its series, against the baseline of `stretto drift`'s own work (drift.drift) on the same
sessions in this process.

The home is tests/stretto/console/test_browser_large.py's: 30 shop sessions a flow is learned from
and one generated session of about `--calls` calls. The console is served by uvicorn as
stretto-console serves it; the drift endpoint is asked every 50 ms until it answers 200
(each answer before is a 202 with the progress), and meanwhile /api/health is timed: the
longest it took says whether the computation blocked the API.

    .venv/bin/python bench/console_drift.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _get(url: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": "Bearer bench"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return answer.status, json.loads(answer.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2_000, help="the long session's calls")
    args = parser.parse_args()

    from stretto.console.state import Options
    from stretto.logs.episode import read_episodes
    from stretto.offline.lifecycle.drift import drift
    from tests.stretto.console import test_browser_large as large
    from tests.stretto.console.conftest import served

    large.CALLS = args.calls
    work = Path(tempfile.mkdtemp(prefix="stretto-bench-console-drift-"))
    try:
        home = large.long_home(work / ".stretto")
        flow = json.loads((home / large.FLOW).read_text())
        started = time.perf_counter()
        drift(flow, read_episodes(home / "logs/shop"))
        baseline_s = time.perf_counter() - started
        with served(Options(data=home, token="bench")) as (base, _):
            url = f"{base}/api/flows/{large.FLOW}/drift"
            polls, health_max = 0, 0.0
            started = time.perf_counter()
            while True:
                status, body = _get(url)
                if status == 200:
                    break
                polls += 1
                asked = time.perf_counter()
                _get(f"{base}/api/health")
                health_max = max(health_max, time.perf_counter() - asked)
                time.sleep(0.05)
            console_s = time.perf_counter() - started
        calls = sum(
            1
            for _ in open(max((home / "logs/shop").glob("*.jsonl"), key=lambda p: p.stat().st_size))
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"sessions: 31, the long one {calls:,} log lines; state {body['state']}")
    print(f"baseline (stretto drift's work, in process): {baseline_s:8.3f} s")
    print(
        f"console (first request to the series):      {console_s:8.3f} s "
        f"({console_s / baseline_s:.1f}× the baseline, {polls} progress answers)"
    )
    print(f"/api/health while computing, longest:       {health_max:8.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
