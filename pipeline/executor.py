"""The executor every job runs on: in the run's own process unless its run config asks for a
Dask cluster (dagster-dask), which then runs each step as a task on one of its workers.

    execution:
      config:
        dask:
          cluster:
            existing: {address: "tcp://scheduler:8786"}   # or {env: STRETTO_DASK_SCHEDULER}
            # local: {n_workers: 2}                       # a cluster started for the run

On Dask the steps share nothing but storage: every worker must see STRETTO_HOME (the
`stretto` resource's `home`) and the Dagster instance (DAGSTER_HOME: its run and event storage,
and the filesystem IO manager's folder) at the same paths, and must import this repository's
`pipeline` module; the run itself needs a persistent instance and a reconstructable job (a
run launched from the UI or by `dagster job launch`, or `execute_job(reconstructable(...))`).
"""

from __future__ import annotations

import dagster as dg

# `existing` and `local`: the two cluster kinds this project documents and tests; any other
# dagster-dask cluster (SSH, Kubernetes, a batch queue) is dagster_dask.dask_executor's own
# config, selectable by giving a job that executor instead.
DASK_CONFIG = dg.Field(
    {
        "cluster": dg.Field(
            dg.Selector(
                {
                    "existing": dg.Field(
                        {"address": dg.StringSource},
                        description="A running Dask scheduler's address (tcp://host:8786).",
                    ),
                    "local": dg.Field(
                        dg.Permissive(),
                        description="A distributed.LocalCluster started for the run "
                        "(its arguments, e.g. n_workers).",
                    ),
                }
            ),
        )
    },
    description="Run each step as a task on a Dask cluster's workers (dagster-dask).",
)


def _requirements(config) -> list[dg.ExecutorRequirement]:
    """What a run on Dask needs (a job its workers can rebuild, an instance they can open,
    outputs kept where they can read them); in process, nothing."""
    if "dask" not in config:
        return []
    return [
        dg.ExecutorRequirement.RECONSTRUCTABLE_JOB,
        dg.ExecutorRequirement.NON_EPHEMERAL_INSTANCE,
        dg.ExecutorRequirement.PERSISTENT_OUTPUTS,
    ]


@dg.executor(
    name="in_process_or_dask",
    config_schema=dg.Field(
        dg.Selector(
            {"in_process": dg.in_process_executor.config_schema.as_field(), "dask": DASK_CONFIG}
        ),
        default_value={"in_process": {}},
    ),
    requirements=_requirements,
)
def in_process_or_dask(init_context: dg.InitExecutorContext) -> dg.Executor:
    """In process (the default: a step costs no process start), or on Dask."""
    ((kind, chosen),) = init_context.executor_config.items()
    config: dict = chosen  # type: ignore[assignment]  # the selector's branch, as configured
    if kind == "dask":
        # imported here: dask.distributed takes seconds to import, and only a run on Dask needs it
        from pipeline.on_dask import OnDask

        ((cluster, cluster_config),) = config["cluster"].items()
        return OnDask(cluster, cluster_config)
    creation = dg.in_process_executor.executor_creation_fn
    assert creation is not None
    return creation(init_context._replace(executor_config=config))


def dask_run_config(address: str) -> dict:
    """The run config fragment that runs a job's steps on the Dask scheduler at `address`."""
    return {"execution": {"config": {"dask": {"cluster": {"existing": {"address": address}}}}}}
