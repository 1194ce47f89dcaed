"""The Dagster definitions: they load, validate, and materialize for real."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import StrettoHome
from pipeline import defs
from pipeline.definitions import THEN, new_logs, relearn_after_ingest
from tests.conftest import REFERENCE_HOME, ROOT
from tests.warehouse.helpers import rows

DAGSTER = str(Path(sys.executable).parent / "dagster")
TABLES = {"sessions", "messages", "calls", "context", "tools", "quarantine"}


def test_definitions_hold_the_graph_jobs_schedules_and_sensors() -> None:
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == {"logs", *TABLES, "steps", "counts", "flow", "thresholds"} | {
        "promotion",
        "audit",
        "evaluation",
        "replay",
        "staged_flow",
    }
    # linked by what they read: every report hangs off the flow, the flow off the counts
    parents = {
        k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys}
        for k in graph.get_all_asset_keys()
    }
    assert parents["sessions"] == {"logs"} and parents["counts"] == {"steps"}
    assert parents["flow"] == {"counts"}
    for report in ("thresholds", "audit", "replay", "evaluation", "promotion"):
        assert parents[report] == {"flow"}
    dims = graph.get(dg.AssetKey("counts")).partitions_def.partition_dimension_names
    assert set(dims) == {"domain", "day"}
    assert graph.get(dg.AssetKey("flow")).partitions_def.name == "domain"
    for name in ("nightly", "nightly_stage", "weekly_compaction"):
        schedule = defs.resolve_schedule_def(name)
        assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert defs.resolve_schedule_def("nightly").job_name == "ingest"
    assert defs.resolve_schedule_def("nightly_stage").job_name == "stage"
    assert defs.resolve_sensor_def("new_logs").default_status == dg.DefaultSensorStatus.STOPPED
    checks = {c.name for c in repo.asset_graph.asset_check_keys}
    assert checks == {
        "lines_read_balance",
        "quarantine_share",
        "tool_contracts_seen_before",
        "flow_validates",
        "flow_diff_against_served",
        "drift",
    }


def test_dagster_validates_the_code_location(tmp_path: Path) -> None:
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(ROOT / "pipeline" / "dagster.yaml", home / "dagster.yaml")
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


def checks_of(result) -> dict[str, tuple[bool, str]]:
    return {
        e.event_specific_data.check_name: (
            e.event_specific_data.passed,
            e.event_specific_data.description,
        )
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def test_the_ingest_job_runs_its_checks_and_registers_partitions(tmp_path: Path) -> None:
    stretto_home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", stretto_home / "logs/shop")
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(ROOT / "pipeline" / "dagster.yaml", dagster_home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    try:
        with dg.DagsterInstance.get() as instance:
            result = defs.resolve_job_def("ingest").execute_in_process(
                instance=instance,
                run_config={"resources": {"stretto": {"config": {"home": str(stretto_home)}}}},
            )
            assert result.success
            assert instance.get_latest_materialization_event(dg.AssetKey("flow")) is None
            event = instance.get_latest_materialization_event(dg.AssetKey("sessions"))
            metadata = event.asset_materialization.metadata
            assert metadata["files read"].value == 6
            assert metadata["dagster/row_count"].value == 6
            assert "| session |" in metadata["preview"].value
            assert instance.get_dynamic_partitions("domain") == ["shop"]
            assert len(instance.get_dynamic_partitions("day")) == 1
            assert (dagster_home / "storage").is_dir()
    finally:
        del os.environ["DAGSTER_HOME"]
    checks = checks_of(result)
    assert checks["lines_read_balance"] == (
        True,
        "lines read 112 = ingested 112 + quarantined 0 + dropped 0",
    )
    assert checks["quarantine_share"][0] and checks["tool_contracts_seen_before"][0]
    assert rows(stretto_home, "SELECT count(*) AS n FROM steps")[0]["n"] > 0


def sense(home: Path):
    return new_logs(dg.build_sensor_context(resources={"stretto": StrettoHome(home=str(home))}))


@pytest.mark.slow  # sensor ticks and ingest runs
def test_the_sensor_finds_new_content_whatever_the_mtime(tmp_path: Path) -> None:
    from tests.warehouse.helpers import ingest

    home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    first = sense(home)
    assert isinstance(first, dg.RunRequest) and first.tags[THEN] == "relearn"
    ingest(home)
    assert isinstance(sense(home), dg.SkipReason)
    # a log copied as `cp -p` copies it (its old mtime kept) is found by its content
    retail = next((REFERENCE_HOME / "logs/retail").glob("*.jsonl"))
    copied = home / "logs/retail" / retail.name
    copied.parent.mkdir()
    shutil.copy2(retail, copied)
    assert copied.stat().st_mtime_ns == retail.stat().st_mtime_ns
    assert isinstance(sense(home), dg.RunRequest)
    ingest(home)
    assert isinstance(sense(home), dg.SkipReason)
    # a known log rewritten in place, same size, its mtime set back: found too
    log = sorted((home / "logs/shop").glob("*.jsonl"))[0]
    before = log.stat()
    text = log.read_bytes()
    log.write_bytes(text.replace(b'"shop"', b'"shoq"', 1))
    os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert log.stat().st_size == before.st_size
    assert isinstance(sense(home), dg.RunRequest)


@pytest.mark.slow  # the nightly chain of Dagster runs
def test_the_nightly_chain_relearns_every_domain(tmp_path: Path) -> None:
    from stretto.model.flow import load_flow

    home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    shutil.copytree(REFERENCE_HOME / "logs/retail", home / "logs/retail")
    instance = dg.DagsterInstance.ephemeral()
    resources = {"stretto": {"config": {"home": str(home)}}}
    ingested = defs.resolve_job_def("ingest").execute_in_process(
        run_config={"resources": resources}, instance=instance, tags={THEN: "relearn"}
    )
    assert ingested.success
    context = dg.build_run_status_sensor_context(
        sensor_name="relearn_after_ingest",
        dagster_instance=instance,
        dagster_run=ingested.dagster_run,
        dagster_event=ingested.get_run_success_event(),
        resources={"stretto": StrettoHome(home=str(home))},
    )
    requests = relearn_after_ingest(context)
    assert sorted(r.partition_key for r in requests) == ["retail", "shop"]
    for request in requests:
        done = defs.resolve_job_def("relearn").execute_in_process(
            run_config={"resources": resources},
            instance=instance,
            partition_key=request.partition_key,
        )
        assert done.success
    shop = load_flow(home / "flows/shop.flow.json")
    retail = load_flow(home / "flows/retail.flow.json")
    assert shop["provenance"]["habit_episodes"] == 6 and retail["provenance"]["habit_episodes"] == 1
    # the searched flows are for review, under reports/: flows/ holds only the served ones
    assert sorted(p.name for p in (home / "flows").iterdir()) == [
        "retail.flow.json",
        "shop.flow.json",
    ]
    assert list((home / "reports/shop").glob("search-*/shop.searched.flow.json"))


def test_on_a_fresh_home_everything_is_skipped_with_a_reason(tmp_path: Path) -> None:
    from assets.ingest import INGEST_ASSETS
    from assets.learn import counts, flow
    from pipeline.run import materialize, output_metadata

    home = tmp_path / "fresh"
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [*INGEST_ASSETS],
        resources={"stretto": StrettoHome(home=str(home))},
        instance=instance,
    )
    assert result.success
    reasons = {
        e.asset_key.to_user_string(): e.materialization.metadata["skipped"].value
        for e in result.get_asset_materialization_events()
    }
    assert reasons["sessions"] == f"no session logs under {home / 'logs'} yet"
    assert reasons["steps"].startswith("no warehouse at")
    assert not (home / "warehouse").exists()
    assert counts.partitions_def is not None
    runs = materialize([flow], str(home), 10, partition="notes")
    assert runs.success and "skipped" in output_metadata(runs, "flow")


def test_the_audit_asset_reads_the_served_flow_and_shadow_sessions_by_default(
    tmp_path: Path, shop_flow_path: Path
) -> None:
    from assets.audit import audit
    from pipeline.run import materialize, output_metadata

    home = tmp_path / "home"
    (home / "flows").mkdir(parents=True)
    shutil.copy(shop_flow_path, home / "flows/shop.flow.json")
    shutil.copytree(REFERENCE_HOME / "shadow/shop", home / "shadow/shop")
    result = materialize([audit], str(home), 10, partition="shop")
    assert result.success
    metadata = output_metadata(result, "audit")
    assert metadata["agreement"] == 1.0
    assert metadata["reliability"].startswith("![reliability](data:image/png;base64,")
    assert "| get_order_details | 6 |" in metadata["report"]
    assert list((home / "reports/shop").glob("audit-*/sites.parquet"))
    # another domain has no flow: skipped, saying why
    other = materialize([audit], str(home), 10, partition="notes")
    assert other.success
    assert output_metadata(other, "audit") == {
        "skipped": f"no flow at {home / 'flows/notes.flow.json'} yet"
    }


def documented_pipeline() -> list[tuple[str, str, str, str]]:
    """docs/cli.md's table of the pipeline: (kind, name, group or job, default state)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text[text.index("## The pipeline in the Dagster UI") :]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[1].startswith("`"):
            rows.append((cells[0], cells[1].strip("`"), cells[2], cells[3]))
    return rows


def test_the_docs_list_the_pipeline_as_the_definitions_hold_it() -> None:
    """Every asset (with its group), asset check (with its asset), job, schedule and sensor
    (with its job and the state it starts in) of `defs` is a row of docs/cli.md's table, and
    every row is one of them."""
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    on = {dg.DefaultScheduleStatus.RUNNING, dg.DefaultSensorStatus.RUNNING}
    real = [
        ("asset", k.to_user_string(), graph.get(k).group_name or "", "")
        for k in graph.get_all_asset_keys()
    ]
    real += [("check", c.name, c.asset_key.to_user_string(), "") for c in graph.asset_check_keys]
    real += [("job", j.name, "", "") for j in repo.get_all_jobs() if not j.name.startswith("__")]
    real += [
        ("schedule", s.name, s.job_name, "on" if s.default_status in on else "off")
        for s in repo.schedule_defs
    ]
    for sensor in repo.sensor_defs:
        jobs = [t.job_name for t in sensor.targets]
        if not jobs and isinstance(sensor, dg.RunStatusSensorDefinition):
            request = getattr(sensor, "_request_job", None)  # a run-failure sensor has none
            jobs = [request.name] if request else []
        state = "on" if sensor.default_status in on else "off"
        real.append(("sensor", sensor.name, ", ".join(jobs), state))
    documented = documented_pipeline()
    assert len(documented) == len(set(documented)), "a row is there twice"
    assert sorted(documented) == sorted(real)
