"""The relearn on a Dask cluster (pipeline/executor.py): two worker processes that share
nothing with the run but the disk (STRETTO_HOME and the Dagster instance's folder) learn the
same flow, byte for byte but its time, as the run's own process does."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from pipeline.executor import dask_run_config
from pipeline.run import execute
from tests.conftest import REFERENCE_HOME, ROOT
from tests.warehouse.helpers import ingest

distributed = pytest.importorskip("distributed")

# a cluster's worker processes each import Dagster and the pipeline: tens of seconds here
pytestmark = pytest.mark.slow


def _timeless(path: Path) -> bytes:
    """The flow file with its compile time blanked (the one field two learnings differ in)."""
    return re.sub(rb'"compiled_unix_ms":\s*\d+', b'"compiled_unix_ms":0', path.read_bytes())


def _step_pids(result: dg.JobExecutionResult) -> dict[str, int | None]:
    return {e.step_key: e.pid for e in result.all_events if e.is_step_success and e.step_key}


def test_the_relearn_on_two_dask_workers_learns_the_in_process_flow(tmp_path: Path) -> None:
    home = tmp_path / "stretto"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    ingest(home)
    dagster_home = tmp_path / "dagster"  # the instance's storage, which the workers open too
    dagster_home.mkdir()
    shutil.copy(ROOT / "pipeline/dagster.yaml", dagster_home)
    instance = dg.DagsterInstance.from_config(str(dagster_home))
    instance.add_dynamic_partitions("domain", ["shop"])
    served = home / "flows/shop.flow.json"
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = set(client.run(os.getpid).values())
        address = cluster.scheduler_address
        on_dask = execute("relearn", instance, str(home), "shop", dask_run_config(address))
    assert on_dask.success
    pids = _step_pids(on_dask)
    assert set(pids) == {"flow", "thresholds"}
    # each step ran in a worker process, not here (Dask keeps a step beside the one it follows,
    # so both may run on the same worker; the flow reaches `thresholds` by the disk either way)
    assert set(pids.values()) <= workers and os.getpid() not in pids.values()
    learned_on_dask = _timeless(served)
    assert list((home / "reports/shop").glob("search-*/shop.searched.flow.json"))
    # again in this process, the day counts the workers kept removed so they are counted anew
    shutil.rmtree(home / "warehouse/counts")
    served.unlink()
    in_process = execute("relearn", instance, str(home), "shop")
    assert in_process.success
    assert set(_step_pids(in_process).values()) == {os.getpid()}
    assert _timeless(served) == learned_on_dask
