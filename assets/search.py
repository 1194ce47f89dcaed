"""Asset: per-site thresholds searched by replaying a domain's recorded sessions
(stretto.offline.reports.search), written for review under reports/<domain>/ — never beside the
served flow, so a relearn never mistakes it for a domain's flow.

Not every night: each search leaves what it searched on (`search_basis.json` in its folder:
the flow's sessions and per-site lookup counts, and what else decides the search's outcome),
and the next relearn searches again only when the served flow's counts have moved past the
`tolerance` since then, when anything else changed (the searchable sites, the flow's
thresholds or arbiter, the search's config), or when the last search is older than
`max_age_days`; otherwise the last search stands and nothing is replayed."""

import hashlib
import json
import time
from pathlib import Path

import dagster as dg

from assets.learn import flow
from assets.metadata import LogProgress, Timings, image, link, skipped
from assets.partitions import domains
from assets.resources import StrettoHome
from stretto.logs.merged import read_episodes
from stretto.model.flow import load_flow, write_flow
from stretto.offline.lifecycle.flowdiff import diff, diff_markdown
from stretto.offline.reports.search import (
    Search,
    markdown,
    searchable_sites,
    with_thresholds,
    write_tables,
)

BASIS = "search_basis.json"
TOLERANCE = 0.05
MAX_AGE_DAYS = 7.0


class SearchConfig(dg.Config):
    """Empty: the domain's served flow on its own logs (HOME/logs/DOMAIN/), searched again
    only when its counts moved more than `tolerance` since the last search (or `max_age_days`
    passed, or the flow's sites, thresholds or arbiter or this config changed)."""

    sessions: str | None = None  # another folder of sessions
    costs: list[float] = [7.0, 3.0]  # β (a saved turn), δ (a detour)
    decider: str | None = None
    # how far the served flow's counts may move from those the last search ran on before the
    # search runs again: the larger of the relative change in its sessions and the L1 change
    # of its per-site lookup counts over their total (one new day of 60: ~0.017)
    tolerance: float = TOLERANCE
    # search again once the last search is this old, whatever the counts (0: every run)
    max_age_days: float = MAX_AGE_DAYS


def searched_path(folder: Path, domain: str) -> Path:
    return folder / f"{domain}.searched.flow.json"


def basis(learned: dict, config: SearchConfig) -> dict:
    """What a search of `learned` under `config` rests on: its counts (`sessions`, `lookups`
    per site and tool) and the digest of everything else that decides its outcome."""
    inputs = {
        "sites": searchable_sites(learned),
        "thresholds": learned.get("thresholds", {}),
        "arbiter": learned.get("arbiter"),
        "sessions": config.sessions,
        "costs": list(config.costs),
        "decider": config.decider,
    }
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    lookups = {
        f"{s['after']}{' (error)' if s['failed'] else ''} -> {tool}": n
        for s in learned["sites"]["next"]
        for tool, n in s["lookups"].items()
    }
    return {
        "inputs": hashlib.sha256(text.encode()).hexdigest(),
        "sessions": learned["provenance"]["habit_episodes"],
        "lookups": dict(sorted(lookups.items())),
    }


def moved(before: dict, after: dict) -> float:
    """How far the counts moved from `before` to `after` (two `basis`): the larger of the
    relative change in sessions and the L1 distance of the lookup counts over their total
    before (a lookup seen on one side only counts whole)."""
    sessions = abs(after["sessions"] - before["sessions"]) / max(before["sessions"], 1)
    keys = set(before["lookups"]) | set(after["lookups"])
    l1 = sum(abs(after["lookups"].get(k, 0) - before["lookups"].get(k, 0)) for k in keys)
    return max(sessions, l1 / max(sum(before["lookups"].values()), 1))


def last_search(reports: Path) -> tuple[Path, dict] | None:
    """The newest search folder under reports/DOMAIN/ that recorded its basis, and the basis."""
    for folder in sorted(reports.glob("search-*"), reverse=True):
        try:
            return folder, json.loads((folder / BASIS).read_text())
        except (OSError, ValueError):
            continue
    return None


def why_search(last: dict | None, now: dict, config: SearchConfig) -> tuple[str | None, float]:
    """(why the search must run, or None when the last one stands; how far the counts moved)."""
    if last is None:
        return "no search recorded its basis before", float("inf")
    if last.get("inputs") != now["inputs"]:
        return "the flow's sites, thresholds or arbiter or the search's config changed", float(
            "inf"
        )
    distance = moved(last, now)
    age_days = (time.time() - last.get("searched_unix_ms", 0) / 1000) / 86_400
    if age_days >= config.max_age_days:
        return (
            f"the last search is {age_days:.1f} days old (max_age_days {config.max_age_days:g})",
            (distance),
        )
    if distance > config.tolerance:
        return f"the counts moved {distance:.1%} (> tolerance {config.tolerance:.1%})", distance
    return None, distance


@dg.asset(
    group_name="learning",
    deps=[flow],
    partitions_def=domains,
    output_required=False,
    description="Per-site thresholds chosen by replaying the domain's sessions: "
    "reports/DOMAIN/search-TIME/DOMAIN.searched.flow.json with the report, the sweep "
    "plot and its flow-diff against the served flow (serve it once a reviewer agrees). "
    "Searched again only when the served flow's counts moved past `tolerance` since the last "
    "search (or it is `max_age_days` old, or the sites, thresholds, arbiter or config changed); "
    "otherwise the last search stands and no session is replayed.",
)
def thresholds(context: dg.AssetExecutionContext, config: SearchConfig, stretto: StrettoHome):
    layout = stretto.layout()
    domain = context.partition_key
    if len(config.costs) != 2:
        raise dg.Failure("`costs` is [β, δ]: the value of a saved turn and the cost of a detour")
    served = layout.flow(domain)
    folder = Path(config.sessions) if config.sessions else layout.logs / domain
    if not served.exists():
        yield skipped(context, f"no flow at {served} yet (materialize `flow` first)")
        return
    if not folder.is_dir():
        yield skipped(context, f"no sessions to search on at {folder}")
        return
    learned = load_flow(served)
    now = basis(learned, config)
    last = last_search(layout.reports / domain)
    why, distance = why_search(last[1] if last else None, now, config)
    if why is None and last is not None:
        stands = last[0]
        reason = (
            f"the counts moved {distance:.1%} since the last search (tolerance "
            f"{config.tolerance:.1%}): {stands} stands, nothing replayed"
        )
        context.log.info(f"not searched: {reason}")
        yield dg.MaterializeResult(
            metadata={
                "searched": False,
                "why": reason,
                "moved": distance,
                "tolerance": config.tolerance,
                "episode replays": 0,
                "searched flow": link(searched_path(stands, domain)),
                "tables": link(stands),
            }
        )
        return
    context.log.info(f"searching: {why}")
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
    # written last: a search that did not finish is never taken for the last one
    record = {**now, "searched_unix_ms": int(time.time() * 1000), "replays": search.replays}
    (tables / BASIS).write_text(json.dumps(record, indent=1) + "\n")
    review, other = diff(learned, searched)
    context.log.info(f"searched {domain} on {len(episodes)} sessions: {path}")
    yield dg.MaterializeResult(
        metadata={
            "searched": True,
            "why": str(why),
            **({"moved": distance} if distance != float("inf") else {}),
            "tolerance": config.tolerance,
            "episode replays": search.replays,
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
