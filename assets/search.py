"""Asset: per-site thresholds searched by replaying a domain's recorded sessions
(stretto.offline.search), written for review under reports/<domain>/ — never beside the
served flow, so a relearn never mistakes it for a domain's flow."""

from pathlib import Path

import dagster as dg

from assets.learn import flow, flow_path
from assets.metadata import LogProgress, Timings, image, link, skipped
from assets.partitions import domains
from assets.resources import StrettoHome
from stretto.logs.episode import read_episodes
from stretto.model.flow import load_flow, write_flow
from stretto.offline.review import diff, diff_markdown
from stretto.offline.search import Search, markdown, with_thresholds, write_tables


class SearchConfig(dg.Config):
    """Empty: the domain's served flow on its own logs (HOME/logs/DOMAIN/)."""

    sessions: str | None = None  # another folder of sessions
    costs: list[float] = [7.0, 3.0]  # β (a saved turn), δ (a detour)
    decider: str | None = None


def searched_path(folder: Path, domain: str) -> Path:
    return folder / f"{domain}.searched.flow.json"


@dg.asset(
    group_name="learning",
    deps=[flow],
    partitions_def=domains,
    output_required=False,
    description="Per-site thresholds chosen by replaying the domain's sessions: "
    "reports/DOMAIN/search-TIME/DOMAIN.searched.flow.json with the report, the sweep "
    "plot and its flow-diff against the served flow (serve it once a reviewer agrees).",
)
def thresholds(context: dg.AssetExecutionContext, config: SearchConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    if len(config.costs) != 2:
        raise dg.Failure("`costs` is [β, δ]: the value of a saved turn and the cost of a detour")
    served = flow_path(layout.home, domain)
    folder = Path(config.sessions) if config.sessions else layout.logs / domain
    if not served.exists():
        yield skipped(context, f"no flow at {served} yet (materialize `flow` first)")
        return
    if not folder.is_dir():
        yield skipped(context, f"no sessions to search on at {folder}")
        return
    learned = load_flow(served)
    episodes = read_episodes(folder)
    timings = Timings(context.log.info)
    said = LogProgress(context.log.info, None, "settings scored")
    search = Search(
        learned,
        episodes,
        decider=config.decider,
        costs=(config.costs[0], config.costs[1]),
        progress=said,
    )
    with timings.phase("searching"):
        chosen = search.run()
    said.close()
    searched = with_thresholds(learned, chosen.setting)
    tables = layout.report_folder(domain, "search")
    write_tables(search, chosen, tables)
    path = searched_path(tables, domain)
    write_flow(searched, path)
    review, other = diff(learned, searched)
    context.log.info(f"searched {domain} on {len(episodes)} sessions: {path}")
    yield dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(
                f"{markdown(search, chosen)}\n{diff_markdown(review, other)}"
            ),
            "searched flow": link(path),
            "tables": link(tables),
            "sessions": len(episodes),
            "turns saved": chosen.turns_saved,
            "detours": chosen.detours,
            "needs review": len(review),
            "sweep": image(tables / "sweep.png", "threshold sweep"),
            **timings.metadata(),
        }
    )
