"""The Dagster UI in a real browser (Debian's chromium driven by Playwright), served by
`dagster-webserver` with `dagster-daemon` beside it (the daemon runs backfills and sensors, as
`dagster dev` would): Materialize all, with no config, succeeds on a fresh home (every asset
skipped with its reason), on the walkthrough's home (flows learned, reports written) and, in
one click, on a home with its logs but nothing ingested;
partitions show per domain and day; checks show on their assets.

Screenshots go to a temporary folder, or to $STRETTO_SCREENSHOTS when it is set."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.builders import wait_until
from tests.conftest import CHROMIUM, ROOT, Walked, free_port

BIN = Path(sys.executable).parent
pytestmark = [
    pytest.mark.slow,  # the Dagster UI driven in Chromium, Materialize all on whole homes
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no /usr/bin/chromium (Debian's chromium; .ci/run installs it)",
    ),
    pytest.mark.timeout(3600),  # a backfill of runs, each a process, on a shared machine
]
BACKFILLS = """{ partitionBackfillsOrError { ... on PartitionBackfills {
  results { id status numCancelable } } } }"""
RUNS = """{ runsOrError { ... on Runs { results { runId status } } } }"""


def graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())["data"]


@contextmanager
def dagster_ui(stretto_home: Path, tmp: Path) -> Iterator[str]:
    """dagster-webserver and dagster-daemon on `stretto_home`, each in a process group of its
    own, stopped with SIGTERM at the end."""
    dagster_home = tmp / "dagster"
    dagster_home.mkdir()
    shutil.copy(ROOT / "pipeline" / "dagster.yaml", dagster_home / "dagster.yaml")
    # The instance's storage made once, here: the webserver, the daemon and the test opening
    # a fresh one at the same moment can each stamp its schema version (alembic: two heads).
    from dagster import DagsterInstance

    DagsterInstance.from_config(str(dagster_home)).dispose()
    env = {**os.environ, "STRETTO_HOME": str(stretto_home), "DAGSTER_HOME": str(dagster_home)}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = []
    for name, command in (
        ("webserver", [str(BIN / "dagster-webserver"), "-m", "pipeline", "-p", str(port)]),
        ("daemon", [str(BIN / "dagster-daemon"), "run", "-m", "pipeline"]),
    ):
        log = (tmp / f"{name}.log").open("w")
        started.append(
            subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
            )
        )

    def answers() -> bool:
        try:
            urllib.request.urlopen(f"{url}/server_info", timeout=5)
            return True
        except OSError:
            assert all(p.poll() is None for p in started), (tmp / "webserver.log").read_text()
            return False

    try:
        wait_until(answers, "the Dagster webserver to answer", 3600, every_s=1)
        yield url
    finally:
        for process in started:
            os.killpg(process.pid, signal.SIGTERM)
        for process in started:
            process.wait(timeout=120)


def materialize_all(page, url: str, shot: Path) -> None:
    """Click Materialize all on the global lineage, launch the backfill it offers, and wait
    until every backfill and run has finished; each must have succeeded."""
    from playwright.sync_api import TimeoutError as Timeout

    page.goto(f"{url}/asset-groups")
    button = page.get_by_text(re.compile(r"^Materialize all"))  # "Materialize all (14)…"
    button.wait_for()
    try:  # Dagster's newsletter prompt, on a first visit
        page.get_by_text("Skip", exact=True).click(timeout=15_000)
    except Timeout:
        pass
    button.click()
    page.get_by_text("Launch backfill", exact=True).click()
    busy = {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"}

    def settled() -> tuple[list, list] | None:
        backfills = graphql(url, BACKFILLS)["partitionBackfillsOrError"]["results"]
        runs = graphql(url, RUNS)["runsOrError"]["results"]
        if (
            backfills
            and all(b["status"] not in ("REQUESTED",) for b in backfills)
            and not any(r["status"] in busy for r in runs)
        ):
            return backfills, runs
        return None

    backfills, runs = wait_until(settled, "the backfill and its runs to end", 3600, every_s=3)
    assert [b["status"] for b in backfills] == ["COMPLETED_SUCCESS"], backfills
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    page.goto(f"{url}/runs?show_runs_within_backfills=true")
    page.get_by_text("Success").first.wait_for()
    page.screenshot(path=str(shot))


def test_materialize_all_on_a_fresh_home_skips_with_reasons(
    browser, shots: Path, tmp_path: Path
) -> None:
    home = tmp_path / "fresh"
    with dagster_ui(home, tmp_path) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(900_000)  # a shared, busy machine
        materialize_all(page, url, shots / "dagster-fresh-materialize-all.png")
        page.goto(f"{url}/assets/sessions")  # materialized with the reason it was skipped
        page.get_by_text(re.compile("no session logs under")).first.wait_for()
        page.screenshot(path=str(shots / "dagster-fresh-skipped.png"))
        page.close()
    assert not (home / "flows").exists()


def test_materialize_all_on_the_walkthrough_home(
    browser, shots: Path, tmp_path: Path, walked: Walked
) -> None:
    from dagster import DagsterInstance

    home = tmp_path / "home"
    shutil.copytree(walked.home, home, symlinks=True)
    served = home / "flows/notes.flow.json"
    before = served.stat().st_mtime_ns
    with dagster_ui(home, tmp_path) as url:
        # the `partitions` sensor registers the warehouse's domain and days
        with DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
            wait_until(
                lambda: instance.get_dynamic_partitions("domain"),
                "the `partitions` sensor to register the domains",
                3600,
                every_s=2,
            )
            assert instance.get_dynamic_partitions("domain") == ["notes"]
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(900_000)  # a shared, busy machine
        materialize_all(page, url, shots / "dagster-walkthrough-materialize-all.png")
        page.goto(f"{url}/assets/counts?view=partitions")
        page.get_by_text("notes").first.wait_for()
        page.screenshot(path=str(shots / "dagster-counts-partitions.png"))
        page.goto(f"{url}/assets/flow?view=checks")
        page.get_by_text("flow_diff_against_served").first.wait_for()
        page.get_by_text("flow_validates").first.wait_for()
        page.screenshot(path=str(shots / "dagster-flow-checks.png"))
        page.goto(f"{url}/assets/sessions?view=checks")
        page.get_by_text("lines_read_balance").first.wait_for()
        page.close()
    assert served.stat().st_mtime_ns > before  # relearned, in place
    assert list((home / "reports/notes").glob("search-*/notes.searched.flow.json"))
    assert list((home / "reports/notes").glob("audit-*/reliability.png"))
    assert list((home / "reports/notes").glob("promotion-*/notes.promoted.flow.json"))
    assert list((home / "reports/notes").glob("evaluation-*"))


def test_one_click_on_a_fresh_home_with_logs_learns_and_reports(
    browser, shots: Path, tmp_path: Path, walked: Walked
) -> None:
    """A home with the walkthrough's logs and held-out sessions but nothing ingested or
    learned: the `partitions` sensor registers the logs' domain and days from their headers,
    and one Materialize all ingests, learns the flow and makes every report (none skipped)."""
    from dagster import AssetKey, DagsterInstance

    home = tmp_path / "home"
    for folder in ("logs", "shadow", "explore"):
        if (walked.home / folder).is_dir():
            shutil.copytree(walked.home / folder, home / folder, symlinks=True)
    assert not (home / "warehouse").exists() and not (home / "flows").exists()
    with dagster_ui(home, tmp_path) as url:
        with DagsterInstance.from_config(str(tmp_path / "dagster")) as instance:
            wait_until(
                lambda: instance.get_dynamic_partitions("domain"),
                "the partitions sensor's first tick",
                3600,
                every_s=2,
            )
            assert instance.get_dynamic_partitions("domain") == ["notes"]
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(900_000)  # a shared, busy machine
            materialize_all(page, url, shots / "dagster-one-click-materialize-all.png")
            made = {}
            for report in ("audit", "replay", "evaluation", "promotion"):
                event = instance.get_latest_materialization_event(AssetKey(report))
                assert event is not None and event.dagster_event.partition == "notes", report
                made[report] = event.asset_materialization.metadata
            assert not [report for report, metadata in made.items() if "skipped" in metadata]
            page.goto(f"{url}/assets/audit")
            page.get_by_text("agreement").first.wait_for()
            page.screenshot(path=str(shots / "dagster-one-click-audit.png"))
            page.close()
    assert (home / "flows/notes.flow.json").is_file()
    assert list((home / "reports/notes").glob("audit-*/reliability.png"))
