"""The flows' life in the pipeline, materialized for real: the drift check after an ingest
(quiet on the usual agent, a warning once it changed) and the staged flow beside the served one."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from assets.ingest import INGEST_ASSETS
from assets.lifecycle import drift_check, staged_flow
from pipeline import defs
from pipeline.run import materialize, output_metadata
from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home whose shop logs are 30 sessions of the usual habit, its flow learned from them
    and served from flows/shop.flow.json."""
    home = tmp_path / "home"
    write_sessions(home / "logs/shop", ["usual"] * 30, seed=1)
    learn_folder(home / "logs/shop", home / "flows/shop.flow.json", tmp_path / "learning")
    return home


def check(home: Path) -> dg.AssetCheckEvaluation:
    result = materialize([*INGEST_ASSETS, drift_check], str(home), 0)
    assert result.success
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "drift"]
    return evaluation


def test_the_ingest_job_runs_the_drift_check_and_the_nightly_stage_schedule_stages() -> None:
    ingest = defs.resolve_job_def("ingest")
    assert (
        dg.AssetCheckKey(dg.AssetKey("steps"), "drift")
        in ingest.asset_layer.asset_graph.asset_check_keys
    )
    assert defs.resolve_schedule_def("nightly_stage").job_name == "stage"


@pytest.mark.slow  # Dagster runs over two periods
def test_drift_is_quiet_on_the_usual_agent_and_warns_once_it_changed(home: Path) -> None:
    quiet = check(home)
    assert quiet.passed
    domains = quiet.metadata["domains"].value
    assert domains["shop"]["sounding"] is False and domains["shop"]["sessions"] == 30
    assert Path(domains["shop"]["report"]).is_file()

    write_sessions(home / "logs/shop", ["changed"] * 5, seed=9, start=30)
    sounding = check(home)
    assert not sounding.passed and sounding.severity == dg.AssetCheckSeverity.WARN
    assert sounding.description.startswith("drift sounds for shop")
    report = Path(sounding.metadata["domains"].value["shop"]["report"])
    data = json.loads(report.with_name("drift.json").read_text())
    assert data["sounding"] and data["alarms"][-1]["change_session"] == "s-0030"
    assert report.with_name("drift.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # Dagster runs, learn and stage
def test_the_staged_flow_is_learned_beside_the_served_one_which_stays(home: Path) -> None:
    served = (home / "flows/shop.flow.json").read_bytes()
    write_sessions(home / "logs/shop", ["changed"] * 4, seed=22, start=30)
    result = materialize(
        [*INGEST_ASSETS, staged_flow], str(home), 0, {"staged_flow": {"window": 10}}
    )
    assert result.success
    report = output_metadata(result, "staged_flow")["domains"]["shop"]
    assert report["sessions"] == 10 and report["committed"] is None
    staged = json.loads((home / "flows/shop.staged.flow.json").read_text())
    assert staged["provenance"]["habit_episodes"] == 34
    assert (home / "flows/shop.flow.json").read_bytes() == served  # committing is a person's
    state = json.loads((home / "flows/shop.stage.json").read_text())
    assert len(state["sessions"]) == 10
