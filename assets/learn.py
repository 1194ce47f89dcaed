"""Asset: the flow of each domain, learned from the warehouse's sessions."""

from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.ingest import steps
from assets.resources import StrettoHome
from stretto.logs.episode import Episode, in_start_order, read_episode
from stretto.logs.rewards import read_rewards, with_rewards
from stretto.model.defaults import SURPRISE_WINDOW
from stretto.model.flow import load_manifest, write_flow
from warehouse import store
from warehouse.layout import Layout
from warehouse.learn import domains, learn_flow


class FlowConfig(dg.Config):
    """Empty: one flow per domain the logs name. With `domain`: one flow of that name from
    every session (what `stretto learn --domain` does), written to `out` if given."""

    domain: str | None = None
    manifest: str | None = None  # a tool manifest file instead of the logs' tool lists
    out: str | None = None
    constants: bool = False  # learn arguments the agent always passes the same way
    half_life: float | None = None  # sessions: older ones count less in the habit
    rewards: str | None = None  # a rewards file (session -> reward), winning over the logs'
    surprise: float | None = None  # learn a surprise gate at this quantile
    surprise_window: int = SURPRISE_WINDOW
    otel: bool = False  # the logs were converted from an OpenTelemetry export


def flow_path(home: Path, domain: str) -> Path:
    return home / "flows" / f"{domain}.flow.json"


def learner(
    layout: Layout,
    domain: str,
    *,
    manifest: dict | None = None,
    only_domain: bool = False,
    rewards: dict[str, float] | None = None,
    half_life: float | None = None,
) -> Callable[[list[Episode]], dict]:
    """episodes -> the habit-only flow learned from those of the warehouse's sessions (a fold
    of the surprise gate's, the sessions before one being staged), as the flow asset learns."""

    def learn(episodes: list[Episode]) -> dict:
        learned = learn_flow(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            sessions=[e.id for e in episodes],
            rewards=rewards,
            half_life=half_life,
        )
        return with_provenance(learned, half_life)

    return learn


def with_provenance(learned: dict, half_life: float | None, otel: bool = False) -> dict:
    """The learned flow's provenance names the half-life it was weighted with and, for logs
    converted from an OpenTelemetry export, the conventions they were read by."""
    if half_life is not None:
        learned["provenance"]["half_life"] = half_life
    if otel:
        from stretto.logs.otel import CONVENTIONS

        learned["provenance"]["conventions"] = CONVENTIONS
    return learned


def warehouse_episodes(
    layout: Layout, domain: str | None = None, rewards: dict[str, float] | None = None
) -> list[Episode]:
    """The warehouse's sessions (of `domain`, else all) read from their logs as episodes, in
    start order, with the rewards file's rewards."""
    where = "WHERE domain = $domain" if domain else ""
    con = store.open_catalogue(layout)
    try:
        files = con.execute(
            f"SELECT file FROM sessions {where}", {"domain": domain} if domain else {}
        ).fetchall()
    finally:
        con.close()
    return with_rewards(in_start_order(read_episode(layout.home / f) for (f,) in files), rewards)


@dg.asset(
    group_name="learning",
    deps=[steps],
    description="The flows: "
    "flows/<domain>.flow.json for each domain, learned from its current sessions.",
)
def flow(
    context: dg.AssetExecutionContext, config: FlowConfig, stretto: StrettoHome
) -> dg.MaterializeResult:
    layout = stretto.layout()
    manifest = load_manifest(config.manifest) if config.manifest else None
    rewards = read_rewards(config.rewards) if config.rewards else None
    if config.domain:
        plan = [(config.domain, False, Path(config.out) if config.out else None)]
    else:
        plan = [(d, True, None) for d in domains(layout)]
    written = {}
    for domain, only_domain, out in plan:
        learned = learn_flow(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            with_constants=config.constants,
            rewards=rewards,
            half_life=config.half_life,
        )
        _extras(layout, domain, only_domain, config, manifest, rewards, learned)
        path = out or flow_path(layout.home, domain)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_flow(learned, path)
        written[domain] = (str(path), learned)
        context.log.info(
            f"learned the {domain} flow from "
            f"{learned['provenance']['habit_episodes']} sessions: {path}"
        )
    return dg.MaterializeResult(
        metadata={
            "flows": dg.MetadataValue.json({d: p for d, (p, _) in written.items()}),
            "sessions": sum(f["provenance"]["habit_episodes"] for _, f in written.values()),
            "tools": sum(len(f["manifest"]["tools"]) for _, f in written.values()),
            "sites": sum(len(f["sites"]["next"]) for _, f in written.values()),
            "alpha": dg.MetadataValue.json(
                {d: f["habit"]["alpha"] for d, (_, f) in written.items()}
            ),
            "surprise": dg.MetadataValue.json(
                {d: f.get("surprise") for d, (_, f) in written.items()}
            ),
        }
    )


def _extras(layout, domain, only_domain, config, manifest, rewards, learned: dict) -> None:
    """What `learn`'s options add to a learned flow: the surprise gate (learned by
    cross-fitting on the same sessions), the half-life and the OpenTelemetry conventions
    in its provenance."""
    with_provenance(learned, config.half_life, config.otel)
    if config.surprise is not None:
        from stretto.offline.gate import GateError, learn_gate

        learn = learner(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            rewards=rewards,
            half_life=config.half_life,
        )
        episodes = warehouse_episodes(layout, domain if only_domain else None, rewards)
        try:
            gate = learn_gate(episodes, learn, config.surprise, config.surprise_window)
        except GateError as exc:  # too few or too short sessions: say so, no traceback
            raise dg.Failure(description=f"the surprise gate: {exc}", allow_retries=False) from None
        learned["surprise"] = gate
