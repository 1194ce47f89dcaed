"""Asset: a domain's recorded episodes replayed with its flow (stretto.offline.reports.replay), the
benchmark's tables."""

from pathlib import Path

import dagster as dg

from assets.learn import flow as flow_asset
from assets.metadata import image, link, skipped
from assets.partitions import domains
from assets.reports import AFTER_EACH_FLOW, missing, served_flow
from assets.resources import StrettoHome
from stretto.model.flow import load_flow
from stretto.offline.reports.replay import NoEpisodes, load_episodes, markdown, replay, write_tables


class ReplayConfig(dg.Config):
    """Empty: the domain's served flow on the sessions recorded serving it in shadow mode
    (HOME/shadow/DOMAIN/)."""

    flow: str | None = None  # the flow file
    sessions: str | None = None  # a folder of session logs, or
    results: list[str] = []  # τ²-bench results files
    split: str | None = None  # with a split, only its test tasks are replayed
    decider: str | None = None  # reach or habit (default: as served)
    threshold: float | None = None  # None: the flow's own (learn --calibrate), else 0.3
    explore: float | None = 0.0  # score every option for calibration (None: don't)


@dg.asset(
    name="replay",
    group_name="reports",
    deps=[flow_asset],
    partitions_def=domains,
    output_required=False,
    automation_condition=AFTER_EACH_FLOW,
    description="The domain's recorded episodes (default: shadow/DOMAIN/) replayed with its "
    "flow: turns saved, detours, the read-only ceiling and the share of it taken, and the "
    "calibration of the served score.",
)
def replay_report(context: dg.AssetExecutionContext, config: ReplayConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    path = served_flow(layout, domain, config.flow)
    sessions = config.sessions
    if sessions is None and not config.results:
        sessions = str(layout.shadow / domain)
    needs = {"flow": path, **({"sessions": Path(sessions)} if sessions else {})}
    reason = missing(needs)
    if reason:
        yield skipped(context, reason)
        return
    flow = load_flow(path)
    try:
        episodes = load_episodes(sessions, config.results, config.split, "test")
    except NoEpisodes as exc:
        yield skipped(context, str(exc))
        return
    result = replay(
        flow, episodes, decider=config.decider, threshold=config.threshold, explore=config.explore
    )
    folder = layout.report_folder(domain, "replay")
    write_tables(result, folder)
    total = result.total()
    context.log.info(f"replay of {path} on {len(episodes)} episodes: {folder}")
    metadata = {
        "report": dg.MetadataValue.md(markdown(result, per_episode=False)),
        "episodes": total["episodes"],
        "turns saved": total["turns_saved"],
        "turns saved share": total["turns_saved_share"],
        "ceiling share": total["ceiling_share"],
        "detours per episode": total["detours"] / total["episodes"],
        "tables": link(folder),
    }
    if config.explore is not None:
        calibration = result.calibration()
        metadata["ece"] = (
            dg.MetadataValue.null()
            if calibration["ece"] is None
            else dg.MetadataValue.float(calibration["ece"])
        )
        metadata["reliability"] = image(folder / "reliability.png", "reliability")
    yield dg.MaterializeResult(metadata=metadata)
