"""The Dagster definitions: they load, validate, and materialize for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg

from assets.resources import StrettoHome
from pipeline import defs
from pipeline.definitions import new_logs
from tests.conftest import REFERENCE_HOME, ROOT
from tests.warehouse.helpers import rows

DAGSTER = str(Path(sys.executable).parent / "dagster")


def test_definitions_hold_the_assets_job_schedule_and_sensor() -> None:
    repo = defs.get_repository_def()
    keys = {key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()}
    assert keys == {
        "log_files",
        "session_tables",
        "steps",
        "flow",
        "thresholds",
        "promotion",
        "audit",
        "evaluation",
        "replay",
        "staged_flow",
    }
    assert defs.resolve_job_def("ingest") is not None
    assert defs.resolve_schedule_def("nightly").cron_schedule == "0 3 * * *"
    assert defs.resolve_schedule_def("nightly").job_name == "stage"
    assert defs.resolve_sensor_def("new_logs").job_name == "ingest"


def test_dagster_validates_the_code_location(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    done = subprocess.run(
        [DAGSTER, "definitions", "validate", "-m", "pipeline"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "All code locations passed validation" in done.stderr + done.stdout


def test_the_ingest_job_materializes_on_a_persistent_instance(tmp_path: Path) -> None:
    stretto_home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", stretto_home / "logs/shop")
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    try:
        with dg.DagsterInstance.get() as instance:
            job = defs.resolve_job_def("ingest")
            result = job.execute_in_process(
                instance=instance,
                run_config={"resources": {"stretto": {"config": {"home": str(stretto_home)}}}},
            )
            assert result.success
            learned = instance.get_latest_materialization_event(dg.AssetKey("flow"))
            assert learned is None  # the ingest job does not learn
            materialized = instance.get_latest_materialization_event(dg.AssetKey("session_tables"))
            metadata = materialized.asset_materialization.metadata
            assert metadata["files read"].value == 6
            assert metadata["lines read = ingested + quarantined + dropped"].value is True
            assert (dagster_home / "storage").is_dir()  # the run was stored under DAGSTER_HOME
    finally:
        del os.environ["DAGSTER_HOME"]
    assert rows(stretto_home, "SELECT count(*) AS n FROM steps")[0]["n"] > 0


def test_the_sensor_asks_for_a_run_only_when_logs_change(tmp_path: Path) -> None:
    home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    resources = {"stretto": StrettoHome(home=str(home))}
    first = new_logs(dg.build_sensor_context(resources=resources))
    assert isinstance(first, dg.RunRequest)
    cursor = str(max(p.stat().st_mtime_ns for p in (home / "logs/shop").glob("*.jsonl")))
    again = new_logs(dg.build_sensor_context(cursor=cursor, resources=resources))
    assert isinstance(again, dg.SkipReason)


def test_the_nightly_relearn_writes_a_flow_per_domain(tmp_path: Path) -> None:
    from stretto.model.flow import load_flow

    home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    shutil.copytree(REFERENCE_HOME / "logs/retail", home / "logs/retail")
    result = defs.resolve_job_def("relearn").execute_in_process(
        run_config={"resources": {"stretto": {"config": {"home": str(home)}}}},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    shop = load_flow(home / "flows/shop.flow.json")
    retail = load_flow(home / "flows/retail.flow.json")
    assert shop["provenance"]["habit_episodes"] == 6 and retail["provenance"]["habit_episodes"] == 1
    assert shop["manifest"]["domain"] == "shop"


def test_the_audit_asset_shows_its_table_and_plot(tmp_path: Path, shop_flow_path: Path) -> None:
    from assets.audit import audit
    from pipeline.run import materialize, output_metadata

    flow_path = shop_flow_path
    result = materialize(
        [audit],
        str(tmp_path / "home"),
        10,
        {"audit": {"flow": str(flow_path), "sessions": str(REFERENCE_HOME / "shadow/shop")}},
    )
    assert result.success
    metadata = output_metadata(result, "audit")
    assert metadata["agreement"] == 1.0
    assert metadata["reliability"].startswith("![reliability](data:image/png;base64,")
    assert "| get_order_details | 6 |" in metadata["report"]
    assert list((tmp_path / "home/reports/shop").glob("audit-*/sites.parquet"))
