"""The nightly as the daemon runs it, in process (issue 41, done-when): the ingest, the relearn
of each domain (`relearn_after_ingest`), then the reports (`reports_after_relearn`, declarative
automation), on an archive of several days and two domains. A change that needs review stays
staged with the served flow byte for byte; one that does not is served; the reports are made
again after each relearn; a second night with one new day counts only that day."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.partitions import parts_in_logs
from assets.resources import StrettoHome
from pipeline import defs
from pipeline.definitions import THEN, partitions, relearn_after_ingest
from stretto.model.flow import load_flow
from stretto.offline.lifecycle import versions
from tests.builders import LogBuilder, shop_log, write_logs
from tests.conftest import REFERENCE_HOME
from warehouse.layout import Layout

DAY_MS = 86_400_000
SEARCH = {"tolerance": 0.5}
REPORTS = {"audit", "replay", "evaluation", "promotion"}


def session(domain: str, day: int, index: int, new_lookup: bool = False) -> LogBuilder:
    """The shop session in `domain` on `day` (days since 1970); with `new_lookup`, the user
    names another order after the close: a lookup no earlier session made."""
    b = shop_log(index)
    b.lines[0].update(domain=domain, session=f"{domain}-{index}", started_unix_ms=day * DAY_MS)
    if new_lookup:
        b.say(7000, "user", f"And order Z{index}?")
        b.client_call(8000, 6, "get_order", order=f"Z{index}").result(8001, 6, "{}")
    return b


class Daemon:
    """What dagster-daemon does for the nightly, in process, on one Dagster instance."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.instance = dg.DagsterInstance.ephemeral()
        self.run_config = {"resources": {"stretto": {"config": {"home": str(home)}}}}
        self.cursor = None
        self.evaluate()  # the automation sensor's first tick: what exists now is its baseline

    def evaluate(self) -> dict[str, set[str]]:
        """One tick of `reports_after_relearn`: the report partitions it asks for."""
        done = dg.evaluate_automation_conditions(
            defs=defs,
            instance=self.instance,
            asset_selection=dg.AssetSelection.assets(*REPORTS),
            cursor=self.cursor,
        )
        self.cursor = done.cursor
        return {
            key: set(done.get_requested_partitions(dg.AssetKey(key)))
            for key in REPORTS
            if done.get_num_requested(dg.AssetKey(key))
        }

    def night(self) -> dict:
        """The nightly schedule's ingest, then the relearns and reports it leads to."""
        ingested = defs.resolve_job_def("ingest").execute_in_process(
            run_config=self.run_config, instance=self.instance, tags={THEN: "relearn"}
        )
        assert ingested.success
        sensed = relearn_after_ingest(
            dg.build_run_status_sensor_context(
                sensor_name="relearn_after_ingest",
                dagster_instance=self.instance,
                dagster_run=ingested.dagster_run,
                dagster_event=ingested.get_run_success_event(),
                resources={"stretto": StrettoHome(home=str(self.home))},
            )
        )
        relearns = {
            request.partition_key: defs.resolve_job_def("relearn").execute_in_process(
                # the search's tolerance as a small archive needs it: a new day of 3 sessions
                # on 9 moves the counts 33%
                run_config={**self.run_config, "ops": {"thresholds": {"config": SEARCH}}},
                instance=self.instance,
                partition_key=request.partition_key,
                raise_on_error=False,
            )
            for request in sensed
        }
        asked = self.evaluate()
        by_domain: dict[str, list[str]] = {}
        for key, domains in asked.items():
            for domain in domains:
                by_domain.setdefault(domain, []).append(key)
        reports = {}
        for domain, keys in sorted(by_domain.items()):
            reports[domain] = defs.resolve_job_def("reports").execute_in_process(
                run_config=self.run_config,
                instance=self.instance,
                partition_key=domain,
                asset_selection=[dg.AssetKey(k) for k in keys],
            )
            assert reports[domain].success
        # the sensor's next tick sees the reports made: it asks for nothing more
        assert self.evaluate() == {}
        return {"relearns": relearns, "asked": asked, "reports": reports}


def counted(home: Path) -> dict[str, int]:
    """Each (domain/day) part's counts file and when it was written."""
    return {
        str(path.relative_to(home / "warehouse/counts")): path.stat().st_mtime_ns
        for path in (home / "warehouse/counts").rglob("*.counts-*.json")
    }


def counts_of(result: dg.ExecuteInProcessResult) -> list[str]:
    """The `counts` partitions a relearn counted (it reads the others back)."""
    return sorted(
        e.partition
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "counts"
    )


def materialized(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    return {
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }


@pytest.mark.slow  # three nights of ingests, relearns and reports
def test_the_nightly_serves_stages_reports_and_counts_only_the_new_day(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for domain in ("shop", "store"):
        shutil.copytree(REFERENCE_HOME / "shadow/shop", home / "shadow" / domain)
    for day in range(3):  # three days, two domains
        for domain in ("shop", "store"):
            write_logs(
                home / "logs" / domain,
                [session(domain, day, 10 * day + i) for i in range(3)],
            )
    daemon = Daemon(home)
    first = daemon.night()
    assert sorted(first["relearns"]) == ["shop", "store"]
    assert all(run.success for run in first["relearns"].values())
    assert first["asked"] == {key: {"shop", "store"} for key in REPORTS}
    for domain in ("shop", "store"):
        made = materialized(first["reports"][domain])
        assert set(made) == REPORTS
        # made, none skipped but the evaluation (it needs exploring sessions: none here)
        assert [r for r in sorted(made) if "skipped" in made[r]] == ["evaluation"]
        assert "# Audit" in made["audit"]["report"].value
    before = counted(home)
    assert len(before) == 6  # a part per domain and day
    # the flow's relearn materializes the counts it counted; its checks are the domain's
    assert len(daemon.instance.get_materialized_partitions(dg.AssetKey("counts"))) == 6
    for domain, run in first["relearns"].items():
        assert {e.partition for e in run.get_asset_check_evaluations()} == {domain}

    # night two: one new day in shop, sessions like the others: served, and only it counted
    write_logs(home / "logs/shop", [session("shop", 3, 30 + i) for i in range(3)])
    shop, store = home / "flows/shop.flow.json", home / "flows/store.flow.json"
    shop_before, store_before = shop.read_bytes(), store.read_bytes()
    second = daemon.night()
    assert all(run.success for run in second["relearns"].values())
    assert shop.read_bytes() != shop_before and not versions.staged_path(shop).exists()
    assert load_flow(store)["provenance"]["habit_episodes"] == 9  # nothing new there
    after = counted(home)
    recounted = {part for part, when in after.items() if before.get(part) != when}
    assert {part.rsplit("/", 1)[0] for part in recounted} == {"shop/1970-01-04"}, recounted
    assert counts_of(second["relearns"]["shop"]) == ["1970-01-04|shop"]
    assert counts_of(second["relearns"]["store"]) == []
    search = materialized(second["relearns"]["shop"])["thresholds"]
    assert search["searched"].value is False and search["episode replays"].value == 0
    assert second["asked"] == {key: {"shop", "store"} for key in REPORTS}

    # night three: a new lookup in store: staged, the served file byte for byte, no report
    write_logs(
        home / "logs/store", [session("store", 4, 40 + i, new_lookup=True) for i in range(3)]
    )
    shop_before, store_before = shop.read_bytes(), store.read_bytes()
    third = daemon.night()
    assert not third["relearns"]["store"].success and third["relearns"]["shop"].success
    assert store.read_bytes() == store_before
    assert versions.staged_path(store).exists()
    assert "store" not in {d for domains in third["asked"].values() for d in domains}


def test_the_partitions_sensor_registers_what_the_logs_name_before_any_ingest(
    tmp_path: Path,
) -> None:
    home = tmp_path / "fresh"
    write_logs(home / "logs/shop", [session("shop", day, day) for day in (0, 2)])
    write_logs(home / "logs/misc", [session("store", 1, 7)])
    failed = session("shop", 5, 9)
    failed.lines[0]["reward"] = 0.0  # a failed episode: learning leaves it out
    write_logs(home / "logs/shop", [failed])
    (home / "logs/shop/notes.txt").write_text("not a log")
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_sensor_context(
        instance=instance, resources={"stretto": StrettoHome(home=str(home))}
    )
    result = partitions(context)
    assert isinstance(result, dg.SensorResult) and not result.run_requests
    added = {r.partitions_def_name: r.partition_keys for r in result.dynamic_partitions_requests}
    assert added == {"domain": ["shop", "store"], "day": ["1970-01-01", "1970-01-02", "1970-01-03"]}
    assert not (home / "warehouse").exists()  # nothing ingested
    # the cursor: the next tick reads only logs changed since
    layout = Layout.at(home)
    parts, newest = parts_in_logs(layout)
    assert parts_in_logs(layout, newest) == ([], newest)
    assert result.cursor == str(newest)
    # a tick reads a bounded number of headers, oldest change first; the next goes on
    logs = sorted((home / "logs").rglob("*.jsonl"), key=lambda p: p.stat().st_ctime_ns)
    first, upto = parts_in_logs(layout, limit=1)
    assert upto == logs[0].stat().st_ctime_ns
    rest, last = parts_in_logs(layout, upto)
    assert last == newest and sorted(set(first) | set(rest)) == parts
