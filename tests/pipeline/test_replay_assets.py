"""The `replay` and `thresholds` assets, materialized for real on τ²-bench episodes and on
the reference's recorded sessions."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from pipeline import defs
from tests.builders import stretto
from tests.conftest import ORCHESTRA_RETAIL, REFERENCE_HOME, TAU2

RETAIL_SPLIT = TAU2 / "domains/retail/split_tasks.json"
TEST = TAU2 / "results/sierra-model_training/gpt-4.1_retail_defautl_gpt-4.1_1trials.json.gz"


@pytest.fixture(scope="module")
def retail_flow(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("retail")
    out = tmp / "retail.flow.json"
    done = stretto(
        "compile",
        "--results",
        ORCHESTRA_RETAIL,
        "--domain",
        "retail",
        "--split",
        RETAIL_SPLIT,
        "--tools",
        TAU2 / "domains/tau2_tools.json",
        "--out",
        out,
        "--home",
        tmp / "home",
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_replay_asset_writes_the_benchmark_tables(tmp_path: Path, retail_flow: Path) -> None:
    from pipeline.run import failure_message, materialize, output_metadata

    config = {"flow": str(retail_flow), "results": [str(TEST)], "split": str(RETAIL_SPLIT)}
    result = materialize(
        [defs.get_assets_def("replay")],
        str(tmp_path / "home"),
        10,
        {"replay": config},
        partition="retail",
    )
    assert result.success, failure_message(result)
    metadata = output_metadata(result, "replay")
    # gpt-4.1 ran the 40 test tasks of retail once each
    assert metadata["episodes"] == 40
    assert 0 < metadata["turns saved"] and 0 < metadata["ceiling share"] <= 1
    assert 0 <= metadata["ece"] < 0.5
    folders = list((tmp_path / "home/reports/retail").glob("replay-*"))
    assert len(folders) == 1
    assert {p.name for p in folders[0].iterdir()} >= {
        "episodes.parquet",
        "calibration.parquet",
        "reliability.png",
    }
    assert metadata["reliability"].startswith("![reliability](data:image/png;base64,")
    # the CLI, on the same episodes, reports the same totals
    done = stretto(
        "replay",
        "--flow",
        retail_flow,
        "--results",
        TEST,
        "--split",
        RETAIL_SPLIT,
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    total = json.loads(done.stdout)["total"]
    assert total["turns_saved"] == metadata["turns saved"]
    # a split none of whose test tasks were run: refused, not an empty report
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["1"], "test": ["no-such-task"]}))
    empty = stretto("replay", "--flow", retail_flow, "--results", TEST, "--split", split)
    assert empty.returncode == 1 and "no episodes to replay" in empty.stderr


def test_the_relearn_job_searches_thresholds_for_review(tmp_path: Path) -> None:
    from pipeline.run import materialize
    from stretto.model.flow import load_flow

    home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    from assets.ingest import INGEST_ASSETS

    ingested = materialize(INGEST_ASSETS, str(home), 10)
    assert ingested.success
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("domain", ["shop"])
    result = defs.resolve_job_def("relearn").execute_in_process(
        run_config={"resources": {"stretto": {"config": {"home": str(home)}}}},
        instance=instance,
        partition_key="shop",
    )
    assert result.success
    learned = load_flow(home / "flows/shop.flow.json")
    (searched_path,) = (home / "reports/shop").glob("search-*/shop.searched.flow.json")
    searched = load_flow(searched_path)
    assert set(searched["thresholds"]) == {
        s["after"] for s in learned["sites"]["next"] if s["lookups"]
    }
    report = [
        e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key == dg.AssetKey("thresholds")
    ][0]
    assert report["turns saved"].value == 18
    assert "Pareto front" in report["report"].value
    assert report["sweep"].value.startswith("![threshold sweep](data:image/png;base64,")
    assert (Path(report["tables"].value) / "settings.parquet").exists()
