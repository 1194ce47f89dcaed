"""dagster-dask's executor, with each step's arguments handed to Dask as one opaque object.

dagster-dask 0.29 submits `query_on_dask_worker(dependencies, job, run, run config, steps,
instance, known state)`; distributed 2026 walks a task's tuple arguments looking for futures,
and a Dagster run holds records (a partitions subset) that refuse to be iterated, so the
submission fails before any step runs. Here the arguments travel in a `_Step` Dask does not
look into; the work on the worker is dagster-dask's own `query_on_dask_worker`, and the
cluster is built by its `build_dict`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dask.distributed
from dagster import DagsterEvent
from dagster._core.errors import raise_execution_interrupts
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._utils import iterate_with_context
from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements, query_on_dask_worker


@dataclass(frozen=True)
class _Step:
    """What a worker needs to run one step (not a tuple: Dask leaves it whole)."""

    arguments: tuple


def _run_step(dependencies: list[Any], step: _Step) -> list[DagsterEvent]:
    """On a worker: run the step, once the steps it depends on are done (`dependencies`, their
    results, only sequence the tasks)."""
    return list(query_on_dask_worker(dependencies, *step.arguments))


class OnDask(DaskExecutor):
    """A run's steps as Dask tasks, each after the steps it reads from."""

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        if not plan_context.instance.is_persistent:
            raise ValueError("a run on Dask needs a persistent Dagster instance (DAGSTER_HOME)")
        job_name = plan_context.job_name
        if self.cluster_type == "existing":
            cluster: Any = self.cluster_configuration["address"]
        elif self.cluster_type == "local":
            cluster = dask.distributed.LocalCluster(**self.build_dict(job_name))
        else:
            raise ValueError(f"no Dask cluster of kind {self.cluster_type!r} here")
        instance = plan_context.instance.get_ref()
        with dask.distributed.Client(cluster) as client:
            futures: dict[str, Any] = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    after = [
                        futures[key] for put in step.step_inputs for key in put.dependency_keys
                    ]
                    arguments = (
                        plan_context.reconstructable_job,
                        plan_context.dagster_run,
                        plan_context.run_config,
                        [step.key],
                        instance,
                        execution_plan.known_state,
                    )
                    futures[step.key] = client.submit(
                        _run_step,
                        after,
                        _Step(arguments),
                        key=f"{job_name}.{step.key}",
                        resources=get_dask_resource_requirements(step.tags),
                    )
            done = dask.distributed.as_completed(list(futures.values()), with_results=True)
            for _, events in iterate_with_context(raise_execution_interrupts, done):
                yield from events
