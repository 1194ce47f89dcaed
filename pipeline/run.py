"""Run the pipeline's assets in this process, as the `stretto` commands do, so that the CLI
and the Dagster UI compute with the same code."""

from __future__ import annotations

import logging
import re
import sys
import threading
from dataclasses import dataclass, field

import dagster as dg

from assets.metadata import EVERY_ASSET
from assets.partitions import domains, known_parts, register
from assets.resources import StrettoHome
from warehouse.datastore import StorageError

# What a full disk, a file-size limit or a quota make Python (ENOSPC, EFBIG, EDQUOT), DuckDB and
# pyarrow say: an expected failure, told in one line, not a bug's stack.
NO_ROOM = re.compile(r"No space left on device|File too large|Disk quota exceeded")


@dataclass
class Runs:
    """The in-process runs one `materialize` made (one per partitions definition)."""

    results: list[dg.ExecuteInProcessResult] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def all_events(self) -> list:
        return [e for r in self.results for e in r.all_events]

    def get_asset_materialization_events(self) -> list:
        return [e for r in self.results for e in r.get_asset_materialization_events()]

    def get_asset_check_evaluations(self) -> list:
        return [e for r in self.results for e in r.get_asset_check_evaluations()]


def materialize(
    assets: list,
    home: str | None,
    wait_seconds: float,
    asset_config: dict | None = None,
    partition: str | None = None,
    warehouse: str | None = None,
) -> Runs:
    """Materialize `assets` on an ephemeral instance, quietly: the assets' own warnings, one
    line each on stderr; a failure is for the caller to tell (`failure_message`), so Dagster's
    console logger stays silent (it would print a traceback for an expected failure).
    `asset_config` maps an asset's name (a multi-asset's: its op's) to its config. The
    unpartitioned assets run first; the domain-partitioned ones then run for `partition`
    (default: the `flow` config's `domain`, else every domain the warehouse holds), once its
    domains and days are registered. `warehouse`: where the committed data lives
    (warehouse.layout.warehouse_url)."""
    resource = StrettoHome(
        home=home, wait_seconds=wait_seconds, progress=sys.stderr.isatty(), warehouse=warehouse
    )
    run_config: dict = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    if asset_config:
        run_config["ops"] = {name: {"config": config} for name, config in asset_config.items()}
    partition = partition or (asset_config or {}).get("flow", {}).get("domain")
    instance = _blank_instance()
    plain = [a for a in assets if a.partitions_def is None]
    by_domain = [a for a in assets if a.partitions_def == domains]
    runs = Runs()
    if plain and not _run(runs, instance, plain, None, resource, run_config):
        return runs
    if by_domain:  # after the plain ones: for `partition`, else every domain there is then
        register(instance, known_parts(resource.layout()))
        known = instance.get_dynamic_partitions("domain")
        if partition and partition not in known:
            instance.add_dynamic_partitions("domain", [partition])
        for key in [partition] if partition else known:
            if not _run(runs, instance, by_domain, key, resource, run_config):
                break
    return runs


_instances = threading.local()


def _blank_instance() -> dg.DagsterInstance:
    """An ephemeral instance with nothing in it: this thread's, emptied (making one sets up
    its in-memory databases, ~0.1 s; a process that runs the pipeline more than once — the
    console, the tests — pays that once per thread)."""
    instance = getattr(_instances, "instance", None)
    if instance is None:
        instance = _instances.instance = dg.DagsterInstance.ephemeral()
    else:
        instance.wipe()
    return instance


def _run(runs: Runs, instance, stage: list, key: str | None, resource, run_config: dict) -> bool:
    """One in-process run of `stage` (for partition `key`), added to `runs`; whether it
    succeeded."""
    # an asset's config goes to its op: named as the asset, or a multi-asset's own name
    names = {n.to_user_string() for a in stage for n in a.keys}
    names |= {a.node_def.name for a in stage if a.is_executable}
    config = {**run_config}
    if "ops" in config:
        config["ops"] = {k: v for k, v in config["ops"].items() if k in names}
    result = dg.materialize(
        stage,
        resources={"stretto": resource},
        run_config=config,
        raise_on_error=False,
        instance=instance,
        partition_key=key,
        tags={EVERY_ASSET: "1"},  # the caller reads each asset's metadata, changed or not
    )
    runs.results.append(result)
    for entry in instance.all_logs(result.run_id):
        if not entry.is_dagster_event and entry.level == logging.WARNING:
            print(f"stretto: {entry.step_key}: {entry.user_message}", file=sys.stderr)
    return result.success


def output_metadata(result: Runs | dg.ExecuteInProcessResult, asset: str) -> dict:
    """The metadata an asset attached to its materialization, as plain values."""
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        if materialization.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    return {}


def failure_message(result: Runs | dg.ExecuteInProcessResult | dg.JobExecutionResult) -> str:
    """The first step failure's message: a `dg.Failure`'s description or a StorageError's
    message (expected failures, one line), else the underlying error with its stack (a bug)."""
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            if data.user_failure_data and data.user_failure_data.description:
                return data.user_failure_data.description.strip()
            error = data.error
            if error is None:
                return "a step failed"
            room = _no_room(error)
            if room:
                return room
            while error.cause is not None:
                error = error.cause
            if error.cls_name == StorageError.__name__:  # the object store: no stack to show
                return error.message.split(": ", 1)[-1].strip()
            return error.to_string().strip()
    return "the run failed"


def _no_room(error) -> str | None:
    """`no room to write: <what the error said>` when a step failed for want of room (its
    error or one it came from, any class), else None."""
    seen = 0
    while error is not None and seen < 20:
        for line in (error.message or "").splitlines():
            if NO_ROOM.search(line):
                return f"no room to write: {line.strip()} (make room and run again)"
        error, seen = error.cause or error.context, seen + 1
    return None


def job_named(name: str) -> dg.JobDefinition:
    """One of the Definitions' jobs, by name: what a process that did not define it (a Dask
    worker) rebuilds it from."""
    # entry point: a Dask worker rebuilds the job here; the commands that only materialize
    # assets do not load every job's definitions
    from pipeline.definitions import defs

    return defs.resolve_job_def(name)


def execute(
    name: str,
    instance: dg.DagsterInstance,
    home: str | None,
    partition: str | None = None,
    run_config: dict | None = None,
    assets: list[str] | None = None,
) -> dg.JobExecutionResult:
    """Run the job `name` (for `partition`; only `assets` of it if given) on `instance` as a
    run any process can take a step of: the job rebuilt by name, STRETTO_HOME in the run
    config. `run_config` adds to it (e.g. pipeline.executor.dask_run_config)."""
    config = {"resources": {"stretto": {"config": {"home": home}}}, **(run_config or {})}
    job = dg.build_reconstructable_job("pipeline.run", "job_named", reconstructable_args=(name,))
    tags = {EVERY_ASSET: "1", **({"dagster/partition": partition} if partition else {})}
    selection = [dg.AssetKey(a) for a in assets] if assets else None
    return dg.execute_job(
        job, instance=instance, run_config=config, tags=tags, asset_selection=selection
    )
