"""The nightly relearn searches the thresholds again only when the served flow's counts moved
past the `thresholds` asset's tolerance since the last search (issue 41, item 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.search import BASIS, SearchConfig, basis, moved
from pipeline import defs
from pipeline.definitions import RELEARN_SLOT
from tests.builders import LogBuilder, shop_log, write_logs
from tests.conftest import ROOT

DAY_MS = 86_400_000


def on_day(day: int, index: int) -> LogBuilder:
    b = shop_log(index)
    b.lines[0]["started_unix_ms"] = day * DAY_MS + index
    return b


class Relearn:
    """Ingest, then the relearn job (flow, thresholds) of the shop domain, in process."""

    def __init__(self, home: Path, **search: object) -> None:
        self.home = home
        self.instance = dg.DagsterInstance.ephemeral()
        self.config = {
            "resources": {"stretto": {"config": {"home": str(home)}}},
            "ops": {"thresholds": {"config": search}},
        }

    def night(self, day: int, sessions: range) -> dict:
        """One night: the day's sessions arrive, ingest, relearn: the thresholds' metadata."""
        write_logs(self.home / "logs/shop", [on_day(day, i) for i in sessions])
        ingested = defs.resolve_job_def("ingest").execute_in_process(
            run_config={"resources": self.config["resources"]}, instance=self.instance
        )
        assert ingested.success
        result = defs.resolve_job_def("relearn").execute_in_process(
            run_config=self.config, instance=self.instance, partition_key="shop"
        )
        assert result.success and result.dagster_run.tags[RELEARN_SLOT] == "1"
        (event,) = [
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.to_user_string() == "thresholds"
        ]
        return {k: v.value for k, v in event.materialization.metadata.items()}

    def searches(self) -> list[Path]:
        return sorted((self.home / "reports/shop").glob("search-*"))


@pytest.mark.slow  # three ingests and relearns
def test_the_search_runs_again_only_when_the_counts_moved_past_the_tolerance(
    tmp_path: Path,
) -> None:
    relearn = Relearn(tmp_path / "home", tolerance=0.25)
    first = relearn.night(0, range(6))
    assert first["searched"] is True and first["episode replays"] > 0
    (search,) = relearn.searches()
    recorded = json.loads((search / BASIS).read_text())
    assert recorded["sessions"] == 6 and recorded["replays"] == first["episode replays"]

    # one new day of one session: the counts moved 1/6 < 25%: nothing replayed, the last stands
    second = relearn.night(1, range(6, 7))
    assert second["searched"] is False and second["episode replays"] == 0
    assert second["moved"] == pytest.approx(1 / 6)
    assert relearn.searches() == [search]
    assert second["searched flow"] == str(search / "shop.searched.flow.json")

    # two more sessions: 3/6 from the counts the last search ran on (not 2/7 from last night's)
    third = relearn.night(2, range(7, 9))
    assert third["searched"] is True and third["episode replays"] > 0
    assert third["moved"] == pytest.approx(3 / 6)
    assert "moved 50.0% (> tolerance 25.0%)" in third["why"]
    assert len(relearn.searches()) == 2
    assert json.loads((relearn.searches()[-1] / BASIS).read_text())["sessions"] == 9


@pytest.mark.slow  # two ingests and relearns
def test_max_age_zero_searches_every_night(tmp_path: Path) -> None:
    relearn = Relearn(tmp_path / "home", tolerance=0.25, max_age_days=0.0)
    assert relearn.night(0, range(6))["searched"] is True
    again = relearn.night(1, range(6, 7))
    assert again["searched"] is True and "days old" in again["why"]


def test_moved_is_the_larger_of_the_sessions_and_the_lookups_change() -> None:
    flow = {
        "provenance": {"habit_episodes": 10},
        "sites": {
            "next": [
                {"after": "a", "failed": False, "lookups": {"x": 8}},
                {"after": "b", "failed": True, "lookups": {"y": 2}},
                {"after": "c", "failed": False, "lookups": {}},
            ]
        },
    }
    before = basis(flow, SearchConfig())
    assert before["lookups"] == {"a -> x": 8, "b (error) -> y": 2}
    assert moved(before, before) == 0
    grown = {**flow, "provenance": {"habit_episodes": 11}}
    assert moved(before, basis(grown, SearchConfig())) == pytest.approx(0.1)
    shifted = json.loads(json.dumps(flow))
    shifted["sites"]["next"][0]["lookups"] = {"x": 5, "z": 1}  # 3 fewer x, a new z: 4 of 10
    assert moved(before, basis(shifted, SearchConfig())) == pytest.approx(0.4)
    # what decides the search besides the counts: another cost, another digest
    assert basis(flow, SearchConfig(costs=[1.0, 1.0]))["inputs"] != before["inputs"]


def test_one_relearn_run_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """pipeline/dagster.yaml's run queue holds a relearn while another runs (the three
    per-domain runs a nightly starts at once take the machine in turn); other runs pass."""
    from dagster._utils.tags import TagConcurrencyLimitsCounter

    shutil.copy(ROOT / "pipeline" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    relearn = defs.resolve_job_def("relearn")
    assert relearn.run_tags == {RELEARN_SLOT: "1"}
    with dg.DagsterInstance.get() as instance:
        # as the daemon makes a sensor's or the launchpad's run: the job's tags, the partition
        runs = [
            instance.create_run_for_job(
                job_def=relearn, tags={**relearn.run_tags, "dagster/partition": domain}
            )
            for domain in ("retail", "airline", "telecom")
        ]
        ingest = instance.create_run_for_job(job_def=defs.resolve_job_def("ingest"))
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None
        counter = TagConcurrencyLimitsCounter(queue.tag_concurrency_limits, [runs[0]])
        assert counter.is_blocked(runs[1]) and counter.is_blocked(runs[2])
        assert not counter.is_blocked(ingest)
        assert not TagConcurrencyLimitsCounter(queue.tag_concurrency_limits, []).is_blocked(runs[1])
