"""The compaction job (warehouse/upkeep/compact.py) and its weekly schedule (off by default)."""

import dagster as dg

from assets.resources import StrettoHome
from warehouse import store
from warehouse.ingest.run import new_ingest_id
from warehouse.upkeep import compact


@dg.op(description="Rewrite each partition's current rows into one file; drop replaced files.")
def compact_warehouse(context: dg.OpExecutionContext, stretto: StrettoHome) -> None:
    layout = stretto.layout()
    if not store.has_warehouse(layout):
        context.log.info(f"nothing to compact: no warehouse at {layout.warehouse}")
        return
    try:
        with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
            done = compact.compact(layout, new_ingest_id(), say=context.log.info)
    except store.WarehouseBusy as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log.info(", ".join(f"{k}: {v}" for k, v in done.items()))


@dg.job(description="Compact the warehouse: one file per table, domain and day.")
def compact_job() -> None:
    compact_warehouse()


weekly_compaction = dg.ScheduleDefinition(
    name="weekly_compaction",
    job=compact_job,
    cron_schedule="0 4 * * 0",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)
