"""Asset: the flow of each domain, learned from the warehouse's sessions (with an arbiter when
an oracle or an arbiter file is configured)."""

import json
from pathlib import Path

import dagster as dg

from assets.ingest import steps
from assets.resources import StrettoHome
from stretto.model.flow import load_manifest, write_flow
from warehouse.layout import Layout
from warehouse.learn import domains, learn_flow


class FlowConfig(dg.Config):
    """Empty: one flow per domain the logs name. With `domain`: one flow of that name from
    every session (what `stretto learn --domain` does), written to `out` if given."""

    domain: str | None = None
    manifest: str | None = None  # a tool manifest file instead of the logs' tool lists
    out: str | None = None
    constants: bool = False  # learn arguments the agent always passes the same way
    # The arbiter (docs/oracle.md): fitted on held-out sessions with `oracle`, or taken from
    # `arbiter_from`; none when both are unset (a habit-only flow).
    oracle: str | None = None
    oracle_cache: str | None = None  # default: <home>/oracle-cache
    oracle_base_url: str | None = None
    oracle_budget: float = 1.0
    oracle_price: str | None = None
    oracle_log: str | None = None
    predicates: str | None = None
    manifest_options: bool = False
    dataflow_hints: bool = False
    pooled_arbiter: bool = True
    refit_habit: bool = False
    arbiter_from: str | None = None
    # the tasks held out for the arbiter (compile: the split's test tasks); default: 30% of
    # the tasks, by stretto.oracle.split.learn_split
    held_out_tasks: list[str] | None = None


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
        if config.oracle or config.arbiter_from:
            learned = learn_with_arbiter(layout, domain, config, manifest, only_domain, context)
        else:
            learned = learn_flow(
                layout,
                domain,
                manifest=manifest,
                only_domain=only_domain,
                with_constants=config.constants,
                say=context.log.warning,
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
            "arbiter": dg.MetadataValue.json(
                {d: _arbiter_summary(f) for d, (_, f) in written.items() if "arbiter" in f}
            ),
        }
    )


def _arbiter_summary(flow: dict) -> dict:
    arbiter = flow["arbiter"]
    return {
        "model": arbiter["model"],
        "cases": arbiter["cases"],
        "tasks": arbiter["tasks"],
        "folds": len(arbiter["folds"]),
        "sources": arbiter["sources"],
    }


def _sessions_by_task(layout: Layout, domain: str, only_domain: bool) -> list[tuple[str, str, str]]:
    """(session, task, log file) of every session the flow may learn from, in start order: a
    session's task is its header's task_id, else the session itself."""
    from warehouse import store

    rows = store.query(
        layout,
        "SELECT session, domain, file, header_extra FROM sessions "
        "ORDER BY started_unix_ms, session",
    ).to_pylist()
    out = []
    for row in rows:
        if only_domain and row["domain"] != domain:
            continue
        extra = json.loads(row["header_extra"]) if row["header_extra"] else {}
        task = extra.get("task_id") if isinstance(extra, dict) else None
        ok = isinstance(task, str | int) and not isinstance(task, bool) and str(task)
        file = Path(row["file"])  # absolute, or relative to the home (as newer warehouses keep it)
        path = file if file.is_absolute() else layout.home / file
        out.append((row["session"], str(task) if ok else row["session"], str(path)))
    return out


def learn_with_arbiter(
    layout: Layout,
    domain: str,
    config: FlowConfig,
    manifest: dict | None,
    only_domain: bool,
    context: dg.AssetExecutionContext,
) -> dict:
    """The arbiter step (../shared/spec/algorithms.md §7 steps 3 and 6): with `arbiter_from`,
    the habit from every session and the arbiter taken; else 30% of the tasks held out
    (stretto.oracle.split.learn_split), the habit learned from the others, the arbiter fitted
    on the held-out sessions' decisions (stretto.offline.learn_arbiter), and with
    `refit_habit` the habit learned again from every session."""
    from stretto.logs.episode import read_episode
    from stretto.offline.learn_arbiter import ArbiterOptions, learn_arbiter
    from stretto.oracle.arbiter import take_arbiter
    from stretto.oracle.errors import OracleError
    from stretto.oracle.split import learn_split

    def habit(sessions: set[str] | None) -> dict:
        return learn_flow(
            layout,
            domain,
            manifest=manifest,
            only_domain=only_domain,
            with_constants=config.constants,
            sessions=sessions,
        )

    if config.arbiter_from:
        source = Path(config.arbiter_from)
        try:
            taken = take_arbiter(json.loads(source.read_text()), str(source))
        except OSError as exc:
            raise dg.Failure(f"{source}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:  # not JSON, or not an arbiter (ArbiterError names the field)
            raise dg.Failure(str(exc) if "field" in str(exc) else f"{source}: {exc}") from None
        learned = habit(None)
        learned["arbiter"] = taken.to_json()
        return learned
    sessions = _sessions_by_task(layout, domain, only_domain)
    tasks = [task for _, task, _ in sessions]
    if config.held_out_tasks is not None:
        held_tasks = set(config.held_out_tasks) & set(tasks)
        train_tasks = set(tasks) - held_tasks
    else:
        try:
            training, held_out = learn_split(tasks)
        except ValueError as exc:
            raise dg.Failure(f"the {domain} arbiter: {exc}") from None
        train_tasks, held_tasks = set(training), set(held_out)
    learned = habit({s for s, task, _ in sessions if task in train_tasks})
    episodes = [read_episode(file) for _, task, file in sessions if task in held_tasks]
    options = ArbiterOptions(
        oracle=config.oracle or "",
        cache=config.oracle_cache or layout.home / "oracle-cache",
        base_url=config.oracle_base_url,
        budget=config.oracle_budget,
        price=config.oracle_price,
        log=config.oracle_log,
        predicates=config.predicates,
        manifest_options=config.manifest_options,
        dataflow_hints=config.dataflow_hints,
        pooled=config.pooled_arbiter,
    )
    try:
        fitted = learn_arbiter(learned, episodes, options)
    except (OracleError, ValueError) as exc:  # the budget, a runner's failure, nothing to fit
        raise dg.Failure(f"the {domain} arbiter: {exc}") from None
    for note in fitted.notes:
        context.log.warning(note)
    context.log.info(
        f"fitted the {domain} arbiter on {fitted.arbiter.cases} decisions of {fitted.tasks} "
        f"held-out tasks ({fitted.estimate.uncached} of {fitted.estimate.questions} question "
        f"sets asked of {fitted.arbiter.model}, the rest from the cache)"
    )
    if config.refit_habit:
        learned = habit(None)
    learned["arbiter"] = fitted.arbiter.to_json()
    return learned
