"""The nightly a team can leave unattended (issue 41): a relearned flow is served only when its
blocking checks pass (a change that needs review stays staged), a bad ingest stops the relearn,
every failed run is alerted, and the UI shows what it says."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import StrettoHome
from pipeline import defs
from pipeline.alerts import ALERT_URL, alerts_file
from stretto.model.flow import load_flow
from stretto.offline.lifecycle import stage, versions
from tests.builders import LogBuilder, shop_log, write_logs
from tests.pipeline.alerting import alert

BARE = re.compile(r"<[^<>\s`]+>")  # <domain>, <time>: eaten by the UI's Markdown renderer


def descriptions() -> dict[str, str]:
    """Every description the Dagster UI renders as Markdown: assets, their config, checks,
    jobs, schedules, sensors and resources."""
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    out: dict[str, str] = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        out[f"asset {key.to_user_string()}"] = node.description or ""
        if node.assets_def.is_executable and node.assets_def.op.config_schema:
            out[f"config of {key.to_user_string()}"] = (
                node.assets_def.op.config_schema.description or ""
            )
    for check in graph.asset_check_keys:
        out[f"check {check.name}"] = graph.get_check_spec(check).description or ""
    for job in repo.get_all_jobs():
        out[f"job {job.name}"] = job.description or ""
    for schedule in repo.schedule_defs:
        out[f"schedule {schedule.name}"] = schedule.description or ""
    for sensor in repo.sensor_defs:
        out[f"sensor {sensor.name}"] = sensor.description or ""
    for name, resource in repo.get_top_level_resources().items():
        out[f"resource {name}"] = resource.description or ""
    return out


def test_no_description_holds_a_bare_placeholder() -> None:
    found = descriptions()
    assert "flows/DOMAIN.staged.flow.json" in found["asset flow"]
    assert len(found) > 30 and "check drift" in found and "config of flow" in found
    bare = {
        where: BARE.findall(re.sub(r"`[^`]*`", "", text))  # a code span shows <...> as it is
        for where, text in found.items()
    }
    assert {where: tags for where, tags in bare.items() if tags} == {}


def test_the_home_resource_defaults_to_the_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STRETTO_HOME", str(tmp_path / "home"))
    resource = StrettoHome.from_environment()
    assert isinstance(resource.home, dg.EnvVar) and resource.home.env_var_name == "STRETTO_HOME"
    monkeypatch.delenv("STRETTO_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert StrettoHome.from_environment().home == str(tmp_path / ".stretto")


def test_a_bad_ingest_or_a_bad_flow_blocks_what_follows() -> None:
    graph = defs.get_repository_def().asset_graph
    blocking = {key.name: graph.get_check_spec(key).blocking for key in graph.asset_check_keys}
    assert blocking == {
        "lines_read_balance": True,  # a bad ingest stops steps, counts and the relearn
        "quarantine_share": False,
        "tool_contracts_seen_before": False,
        "flow_validates": True,
        "flow_diff_against_served": True,
        "drift": False,
    }
    assert defs.resolve_sensor_def("alert_on_failure").default_status == (
        dg.DefaultSensorStatus.RUNNING
    )


def shop_and_order(index: int) -> LogBuilder:
    """The shop session, then the user names another order and the agent reads it right after
    closing the first: a lookup after close_order no flow learned from shop_log makes."""
    b = shop_log(index)
    b.say(7000, "user", f"And order Z{index}?")
    return b.client_call(8000, 6, "get_order", order=f"Z{index}").result(8001, 6, "{}")


class Nightly:
    """A home and a Dagster instance: ingest, then relearn the shop domain, in process."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.instance = dg.DagsterInstance.ephemeral()
        self.resources = {"stretto": {"config": {"home": str(home)}}}

    def run(self) -> dg.ExecuteInProcessResult:
        ingested = defs.resolve_job_def("ingest").execute_in_process(
            run_config={"resources": self.resources}, instance=self.instance
        )
        assert ingested.success
        return defs.resolve_job_def("relearn").execute_in_process(
            run_config={"resources": self.resources},
            instance=self.instance,
            partition_key="shop",
            raise_on_error=False,
        )


def check_of(result: dg.ExecuteInProcessResult, name: str):
    (found,) = [e for e in result.get_asset_check_evaluations() if e.check_name == name]
    return found


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


@pytest.mark.slow  # four ingests and relearns
def test_the_relearn_serves_only_what_needs_no_review(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ALERT_URL, raising=False)
    home = tmp_path / "home"
    served = home / "flows/shop.flow.json"
    staged = versions.staged_path(served)
    nightly = Nightly(home)
    write_logs(home / "logs/shop", [shop_log(i) for i in range(6)])
    first = nightly.run()
    assert first.success and {"flow", "thresholds"} <= materialized(first)
    assert "no flow was served" in check_of(first, "flow_diff_against_served").description
    assert not staged.exists() and load_flow(served)["provenance"]["habit_episodes"] == 6

    # more of the same: only counts change, nothing needs review: served, nothing staged
    write_logs(home / "logs/shop", [shop_log(i) for i in range(6, 9)])
    before = served.read_bytes()
    again = nightly.run()
    assert again.success and {"flow", "thresholds"} <= materialized(again)
    assert check_of(again, "flow_diff_against_served").passed
    assert served.read_bytes() != before and not staged.exists()
    assert load_flow(served)["provenance"]["habit_episodes"] == 9
    assert "seen 6 -> 9 times" in materialized_metadata(again)["changes"].value

    # a new lookup: the served flow stays byte for byte, the relearned one is staged
    write_logs(home / "logs/shop", [shop_and_order(i) for i in range(9, 14)])
    before = served.read_bytes()
    gated = nightly.run()
    assert not gated.success  # the blocking check failed: the run says so
    assert served.read_bytes() == before
    # the day it counted, neither the flow nor the thresholds after it
    assert materialized(gated) == {"counts"}
    check = check_of(gated, "flow_diff_against_served")
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.description == "needs review: a new lookup after close_order: get_order"
    assert "- a new lookup after close_order: get_order" in check.metadata["changes"].value
    assert check.metadata["staged"].value == str(staged)
    assert load_flow(staged)["provenance"]["habit_episodes"] == 14
    report = stage.last_report(served)  # what the console's Staged section shows
    assert report is not None and report.review == ["a new lookup after close_order: get_order"]
    assert json.loads(stage.state_path(served).read_text())["staged_by"] == "relearn"
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600

    # the failed run is alerted: one private JSON line under the home, saying why
    alert(gated, nightly.instance, home)
    path = alerts_file(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["run_id"] == gated.run_id and record["job"] == "relearn"
    assert record["partition"] == "shop" and "webhook" not in record
    assert record["failed_checks"] == [
        {
            "asset": "flow",
            "check": "flow_diff_against_served",
            "severity": "ERROR",
            "description": "needs review: a new lookup after close_order: get_order",
        }
    ]
    assert [s["step"] for s in record["steps"]] == ["flow"]
    assert "blocking asset check failed" in record["steps"][0]["error"]

    # once a person commits it (`stretto flow-commit`), the next relearn serves again
    versions.commit(served, "reviewed: get_order after close_order is fine")
    assert not staged.exists() and served.read_bytes() != before
    write_logs(home / "logs/shop", [shop_and_order(i) for i in range(14, 16)])
    after = nightly.run()
    assert after.success and check_of(after, "flow_diff_against_served").passed
    assert load_flow(served)["provenance"]["habit_episodes"] == 16
    assert [e["version"] for e in versions.log(served)] == [1, 2, 3]  # served as a commit
    assert path.read_text().count("\n") == 1  # nothing more alerted


def materialized_metadata(result: dg.ExecuteInProcessResult) -> dict:
    (event,) = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "flow"
    ]
    return event.materialization.metadata
