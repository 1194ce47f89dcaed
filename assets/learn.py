"""Asset: the flow of each domain, learned from the warehouse's sessions."""

from pathlib import Path

import dagster as dg

from assets.ingest import steps
from assets.resources import StrettoHome
from stretto.model.flow import load_manifest, write_flow
from warehouse.learn import domains, learn_flow


class FlowConfig(dg.Config):
    """Empty: one flow per domain the logs name. With `domain`: one flow of that name from
    every session (what `stretto learn --domain` does), written to `out` if given."""

    domain: str | None = None
    manifest: str | None = None  # a tool manifest file instead of the logs' tool lists
    out: str | None = None
    constants: bool = False  # learn arguments the agent always passes the same way


def flow_path(home: Path, domain: str) -> Path:
    return home / "flows" / f"{domain}.flow.json"


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
        )
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
        }
    )
