"""Asset: per-site thresholds searched by replaying each domain's recorded sessions
(stretto.offline.search), written beside the learned flow for a reviewer to take."""

import base64
import time
from pathlib import Path

import dagster as dg

from assets.learn import flow, flow_path
from assets.resources import StrettoHome
from stretto.logs.episode import read_episodes
from stretto.model.flow import load_flow, write_flow
from stretto.offline.review import diff, diff_markdown
from stretto.offline.search import Search, markdown, with_thresholds, write_tables


class SearchConfig(dg.Config):
    """Empty: every domain with a learned flow, on its own logs (HOME/logs/<domain>/)."""

    domain: str | None = None
    sessions: str | None = None  # another folder of sessions (with `domain`)
    costs: list[float] = [7.0, 3.0]  # β (a saved turn), δ (a detour)
    decider: str | None = None


def searched_path(home: Path, domain: str) -> Path:
    return home / "flows" / f"{domain}.searched.flow.json"


@dg.asset(
    group_name="learning",
    deps=[flow],
    description="Per-site thresholds chosen by replaying each domain's sessions: "
    "flows/<domain>.searched.flow.json, with the report and its flow-diff against the "
    "learned flow (serve it once a reviewer agrees).",
)
def thresholds(
    context: dg.AssetExecutionContext, config: SearchConfig, stretto: StrettoHome
) -> dg.MaterializeResult:
    home = stretto.layout().home
    if len(config.costs) != 2:
        raise dg.Failure("`costs` is [β, δ]: the value of a saved turn and the cost of a detour")
    if config.domain:
        domains = [config.domain]
    else:
        domains = sorted(
            p.name.removesuffix(".flow.json")
            for p in (home / "flows").glob("*.flow.json")
            if not p.name.endswith(".searched.flow.json")
        )
    reports, summary, plots = [], {}, {}
    for domain in domains:
        learned = load_flow(flow_path(home, domain))
        folder = Path(config.sessions) if config.sessions else stretto.layout().logs / domain
        episodes = read_episodes(folder)
        search = Search(
            learned, episodes, decider=config.decider, costs=(config.costs[0], config.costs[1])
        )
        chosen = search.run()
        searched = with_thresholds(learned, chosen.setting)
        path = searched_path(home, domain)
        write_flow(searched, path)
        review, other = diff(learned, searched)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        tables = home / "reports" / domain / f"search-{stamp}"
        write_tables(search, chosen, tables)
        plot = base64.b64encode((tables / "sweep.png").read_bytes()).decode()
        plots[f"sweep ({domain})"] = dg.MetadataValue.md(f"![sweep](data:image/png;base64,{plot})")
        reports.append(f"# {domain}\n\n{markdown(search, chosen)}\n{diff_markdown(review, other)}")
        summary[domain] = {
            "flow": str(path),
            "turns_saved": chosen.turns_saved,
            "detours": chosen.detours,
            "needs_review": len(review),
            "tables": str(tables),
        }
        context.log.info(f"searched {domain} on {len(episodes)} sessions: {path}")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md("\n".join(reports) or "no learned flows"),
            "domains": dg.MetadataValue.json(summary),
            **plots,
        }
    )
