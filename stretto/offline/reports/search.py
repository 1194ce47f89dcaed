"""`stretto search`: per-site thresholds chosen by replaying recorded episodes.

A setting gives every searched site a threshold from a grid (0.10, 0.15, ..., 0.95) or turns it
off. Each setting is scored by replaying the episodes (stretto.offline.reports.replay): turns
saved and detours, and the utility β·saved − δ·detours at the given costs. The search starts
from every site at the flow's threshold, sweeps each site's grid with the others held, takes
each site's best level, then improves one site at a time until nothing improves. Every setting
it scored is kept, so the report can show the Pareto front of turns saved against detours.

A change to one site's threshold cannot change an episode in which the flow never decided at
that site, so a sweep replays only the episodes where the site came up: the search stays
cheap on many sites.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stretto.logs.episode import Episode
from stretto.model import defaults
from stretto.model.decide import Decider
from stretto.model.program import FlowDistributions
from stretto.offline.episode_judges import OracleOptions, judges_for
from stretto.offline.reports import frames
from stretto.offline.reports.plots import threshold_sweep
from stretto.offline.reports.replay import EpisodeCheck, replay_episode, totals

LOW, STEP, LEVELS = 0.10, 0.05, 18
OFF = 2.0  # a threshold above 1: the site never acts
GRID = tuple(round((LOW + STEP * i) * 100) / 100 for i in range(LEVELS)) + (OFF,)
DEFAULT_COSTS = defaults.COSTS  # β, δ: the cost ratio δ/(β+δ) = 0.3, the default threshold
MAX_ROUNDS = 4


def searchable_sites(flow: dict) -> list[str]:
    """Every site where the flow may look something up."""
    return sorted(
        s["after"] + (" (error)" if s["failed"] else "")
        for s in flow["sites"]["next"]
        if s["lookups"]
    )


def same_decisions(theta: float, cuts) -> tuple[float, float]:
    """The thresholds (low, high] that decide as θ did where the values `cuts` were compared
    with it (a value v clears θ when v ≥ θ); above 1 a site is off, whatever the values."""
    if theta > 1:
        return 1.0, float("inf")
    low = max((v for v in cuts if v < theta), default=float("-inf"))
    high = min((v for v in cuts if v >= theta), default=float("inf"))
    return low, min(high, 1.0)


def setting_key(setting: dict[str, float]) -> tuple:
    return tuple(sorted(setting.items()))


def threshold_text(t: float) -> str:
    return "off" if t > 1 else f"{t:g}"


@dataclass
class Scored:
    setting: dict[str, float]
    turns: int
    turns_saved: int
    detours: int
    episodes_with_detour: int
    episodes: int

    def utility(self, beta: float, delta: float) -> float:
        return beta * self.turns_saved - delta * self.detours

    def as_json(self, beta: float, delta: float) -> dict:
        return {
            "thresholds": dict(sorted(self.setting.items())),
            "turns": self.turns,
            "turns_saved": self.turns_saved,
            "detours": self.detours,
            "episodes_with_detour": self.episodes_with_detour,
            "episodes": self.episodes,
            "utility": self.utility(beta, delta),
        }


class Search:
    def __init__(
        self,
        flow: dict,
        episodes: list[Episode],
        *,
        decider: str | None = None,
        threshold: float | None = None,
        sites: list[str] | None = None,
        costs: tuple[float, float] = DEFAULT_COSTS,
        progress=None,
        oracle: OracleOptions | None = None,
    ) -> None:
        self.flow, self.episodes = flow, episodes
        self.decider = Decider({**flow, "thresholds": {}}, decider, threshold)
        # the arbiter's questions: `replay` by default, so a search asks nothing new
        self.judges = judges_for(flow, [self.decider.kind], oracle)
        self.dists = FlowDistributions(flow)
        self.sites = sites if sites is not None else searchable_sites(flow)
        unknown = sorted(set(self.sites) - set(searchable_sites(flow)))
        if unknown:
            raise ValueError(f"the flow makes no lookups after {', '.join(unknown)}")
        self.beta, self.delta = costs
        threshold = self.decider.threshold  # the flow's own unless given
        self.start = {site: flow.get("thresholds", {}).get(site, threshold) for site in self.sites}
        self.progress = progress
        # per episode: (for each searched site it decided at, the thresholds that decide as
        # the replayed one did, as an interval (low, high]; its check)
        self._memo: list[list[tuple[dict[str, tuple[float, float]], EpisodeCheck]]] = [
            [] for _ in episodes
        ]
        self.scored: dict[tuple, Scored] = {}
        self.replays = 0

    # scoring -----------------------------------------------------------------------------------

    def _episode(self, index: int, setting: dict[str, float]) -> EpisodeCheck:
        """One episode under a setting. An episode's replay depends on a site's threshold only
        through which side of it the values its decisions compared fall on (and whether it is
        off), so an earlier replay whose sites' thresholds all fall in the same intervals is
        reused: a sweep replays an episode once per interval, not once per level."""
        for held, check in self._memo[index]:
            if all(low < setting[s] <= high for s, (low, high) in held.items()):
                return check
        self.decider.thresholds = {**self.flow.get("thresholds", {}), **setting}
        check = replay_episode(
            self.episodes[index],
            self.decider,
            dists=self.dists,
            ceiling=False,
            judges=self.judges,
        )
        self.replays += 1
        held = {
            s: same_decisions(setting[s], check.cuts.get(s, ()))
            for s in check.sites
            if s in setting
        }
        self._memo[index].append((held, check))
        return check

    def score(self, setting: dict[str, float]) -> Scored:
        key = setting_key(setting)
        if key not in self.scored:
            self.scored[key] = self._uncached(setting)
            if self.progress is not None:
                self.progress.advance()
        return self.scored[key]

    def utility(self, setting: dict[str, float]) -> float:
        return self.score(setting).utility(self.beta, self.delta)

    # the search --------------------------------------------------------------------------------

    def _best_level(self, setting: dict[str, float], site: str) -> float:
        best, best_u = setting[site], self.utility(setting)
        for level in GRID:
            u = self.utility({**setting, site: level})
            if u > best_u + 1e-9:
                best, best_u = level, u
        return best

    def run(self) -> Scored:
        current = dict(self.start)
        self.score(current)
        # Each site's best level with the others held at the start, all taken together.
        combined = {site: self._best_level(self.start, site) for site in self.sites}
        if self.utility(combined) > self.utility(current):
            current = combined
        # Then one site at a time, until a round changes nothing.
        for _ in range(MAX_ROUNDS):
            changed = False
            for site in self.sites:
                level = self._best_level(current, site)
                if level != current[site]:
                    current = {**current, site: level}
                    changed = True
            if not changed:
                break
        return self.score(current)

    def front(self) -> list[Scored]:
        """Settings no other scored setting beats on both turns saved and detours; one per
        pair of totals, most turns saved first."""
        points = list(self.scored.values())
        front = [
            p
            for p in points
            if not any(
                (q.turns_saved >= p.turns_saved and q.detours <= p.detours)
                and (q.turns_saved > p.turns_saved or q.detours < p.detours)
                for q in points
            )
        ]

        def order(p: Scored) -> tuple:
            changes = sum(p.setting[s] != t for s, t in self.start.items())
            return -p.turns_saved, p.detours, changes, setting_key(p.setting)

        unique: dict[tuple[int, int], Scored] = {}  # of equal totals, the fewest changes
        for p in sorted(front, key=order):
            unique.setdefault((p.turns_saved, p.detours), p)
        return list(unique.values())

    def sweep(self, chosen: Scored) -> list[dict]:
        """Each searched site's grid with the other sites held at the chosen setting: rows
        {site, threshold, turns_saved, detours, utility}. The search's last round scored
        these already, so a sweep replays nothing then (and never adds to the front)."""
        rows = []
        for site in self.sites:
            for level in GRID:
                setting = {**chosen.setting, site: level}
                scored = self.scored.get(setting_key(setting)) or self._uncached(setting)
                rows.append(
                    {
                        "site": site,
                        "threshold": level,
                        "turns_saved": scored.turns_saved,
                        "detours": scored.detours,
                        "utility": scored.utility(self.beta, self.delta),
                    }
                )
        return rows

    def _uncached(self, setting: dict[str, float]) -> Scored:
        t = totals([self._episode(i, setting) for i in range(len(self.episodes))])
        return Scored(
            dict(setting),
            t["turns"],
            t["turns_saved"],
            t["detours"],
            t["episodes_with_detour"],
            t["episodes"],
        )


def with_thresholds(flow: dict, setting: dict[str, float]) -> dict:
    """The flow with the setting's thresholds written in (other sites' entries kept)."""
    thresholds = {**flow.get("thresholds", {}), **setting}
    return {**flow, "thresholds": dict(sorted(thresholds.items()))}


def markdown(search: Search, chosen: Scored) -> str:
    start = search.score(search.start)
    b, d = search.beta, search.delta
    out = [
        f"# Threshold search ({search.decider.kind})",
        "",
        f"{len(search.episodes)} episodes, {len(search.sites)} sites searched, "
        f"{len(search.scored)} settings scored ({search.replays} episode replays). "
        f"Utility = {b:g}·turns saved − {d:g}·detours (break-even θ = {d / (b + d):.2f}).",
        "",
        "| setting | turns saved | detours | episodes with a detour | utility |",
        "|---|---|---|---|---|",
        f"| start | {start.turns_saved} | {start.detours} | {start.episodes_with_detour} | "
        f"{start.utility(b, d):g} |",
        f"| chosen | {chosen.turns_saved} | {chosen.detours} | {chosen.episodes_with_detour} | "
        f"{chosen.utility(b, d):g} |",
        "",
        "## Thresholds",
        "",
        "| site | start | chosen |",
        "|---|---|---|",
    ]
    out += [
        f"| {site} | {threshold_text(search.start[site])} | "
        f"{threshold_text(chosen.setting[site])} |"
        for site in search.sites
    ]
    out += [
        "",
        "## Pareto front (turns saved against detours)",
        "",
        "| turns saved | detours | utility | thresholds changed from the start |",
        "|---|---|---|---|",
    ]
    for p in search.front():
        changed = ", ".join(
            f"{s} {threshold_text(t)}" for s, t in sorted(p.setting.items()) if search.start[s] != t
        )
        out.append(f"| {p.turns_saved} | {p.detours} | {p.utility(b, d):g} | {changed or '—'} |")
    return "\n".join(out) + "\n"


def report_json(search: Search, chosen: Scored) -> dict:
    b, d = search.beta, search.delta
    return {
        "decider": search.decider.kind,
        "sites": search.sites,
        "costs": {"beta": b, "delta": d},
        "episodes": len(search.episodes),
        "start": search.score(search.start).as_json(b, d),
        "chosen": chosen.as_json(b, d),
        "front": [p.as_json(b, d) for p in search.front()],
        "evaluated": len(search.scored),
    }


SETTING = {
    "turns": "Int64",
    "turns_saved": "Int64",
    "detours": "Int64",
    "episodes_with_detour": "Int64",
    "episodes": "Int64",
    "utility": "Float64",
}
TABLES: dict[str, frames.Schema] = {
    "settings": {
        "setting": "Int64",
        **SETTING,
        "start": "Boolean",
        "chosen": "Boolean",
        "front": "Boolean",
        "thresholds": [{"site": "String", "threshold": "Float64"}],
    },
    "sweep": {
        "site": "String",
        "threshold": "Float64",
        "turns_saved": "Int64",
        "detours": "Int64",
        "utility": "Float64",
    },
}


def write_tables(search: Search, chosen: Scored, folder) -> list:
    """Every setting the search scored (`settings`: its totals, utility, thresholds (θ 2.0 =
    off), and whether it is the start, the chosen one, on the Pareto front), each site's
    sweep around the chosen setting (`sweep`), as Parquet; and `sweep.png`. The paths
    written."""
    folder = Path(folder)
    b, d = search.beta, search.delta
    start, front = setting_key(search.start), {setting_key(p.setting) for p in search.front()}
    settings = []
    for number, (key, scored) in enumerate(search.scored.items()):
        row = scored.as_json(b, d)
        row.update(
            setting=number,
            start=key == start,
            chosen=key == setting_key(chosen.setting),
            front=key in front,
            thresholds=[{"site": s, "threshold": t} for s, t in sorted(scored.setting.items())],
        )
        settings.append(row)
    sweep = search.sweep(chosen)
    written = frames.write_tables(
        {"settings": (settings, TABLES["settings"]), "sweep": (sweep, TABLES["sweep"])}, folder
    )
    by_site: dict[str, list[dict]] = {}
    for row in sweep:
        by_site.setdefault(row["site"], []).append(row)
    written.append(
        threshold_sweep(
            by_site,
            folder / "sweep.png",
            title=f"Threshold search ({search.decider.kind}; β {b:g}, δ {d:g}): each site "
            "around the chosen setting",
            points=settings,
            front=[r for r in settings if r["front"]],
            marks={
                "start": search.score(search.start).as_json(b, d),
                "chosen": chosen.as_json(b, d),
            },
        )
    )
    return written
