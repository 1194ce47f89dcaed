"""Asset: recorded episodes replayed with a flow (stretto.offline.replay), the benchmark's
tables."""

import base64

import dagster as dg

from assets.resources import StrettoHome
from stretto.model.decide import DEFAULT_THRESHOLD
from stretto.model.flow import load_flow
from stretto.offline.replay import NoEpisodes, load_episodes, markdown, replay, write_tables


class ReplayConfig(dg.Config):
    flow: str  # the flow file
    sessions: str | None = None  # a folder of session logs, or
    results: list[str] = []  # τ²-bench results files
    split: str | None = None  # with a split, only its test tasks are replayed
    decider: str | None = None  # reach or habit (default: as served)
    threshold: float = DEFAULT_THRESHOLD
    explore: float | None = 0.0  # score every option for calibration (None: don't)


@dg.asset(
    name="replay",
    group_name="benchmark",
    description="Recorded episodes replayed with a flow: turns saved, detours, the read-only "
    "ceiling and the share of it taken, and the calibration of the served score.",
)
def replay_report(
    context: dg.AssetExecutionContext, config: ReplayConfig, stretto: StrettoHome
) -> dg.MaterializeResult:
    flow = load_flow(config.flow)
    try:
        episodes = load_episodes(config.sessions, config.results, config.split, "test")
    except NoEpisodes as exc:
        raise dg.Failure(str(exc)) from exc
    result = replay(
        flow, episodes, decider=config.decider, threshold=config.threshold, explore=config.explore
    )
    folder = stretto.layout().report_folder(flow["manifest"]["domain"], "replay")
    write_tables(result, folder)
    total = result.total()
    context.log.info(f"replay of {config.flow} on {len(episodes)} episodes: {folder}")
    metadata = {
        "report": dg.MetadataValue.md(markdown(result, per_episode=False)),
        "episodes": total["episodes"],
        "turns saved": total["turns_saved"],
        "turns saved share": total["turns_saved_share"],
        "ceiling share": total["ceiling_share"],
        "detours per episode": total["detours"] / total["episodes"],
        "tables": dg.MetadataValue.path(str(folder)),
    }
    if config.explore is not None:
        calibration = result.calibration()
        metadata["ece"] = (
            dg.MetadataValue.null()
            if calibration["ece"] is None
            else dg.MetadataValue.float(calibration["ece"])
        )
        plot = base64.b64encode((folder / "reliability.png").read_bytes()).decode()
        metadata["reliability"] = dg.MetadataValue.md(
            f"![reliability](data:image/png;base64,{plot})"
        )
    return dg.MaterializeResult(metadata=metadata)
