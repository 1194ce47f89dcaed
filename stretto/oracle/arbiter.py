"""The flow's `arbiter` part, as data (docs/formats.md, "arbiter"): the System-One model it
was fitted with, the questions and predicates it asks, and one fit (pooled) or five
(cross-fitted by task group), each its weights and its rates. Judging is pure Python."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.model.flow import FlowError
from stretto.model.flow import load_flow as load_flow_file
from stretto.oracle.questions import QUESTIONS_VERSION, Predicate, PredicateError, parse_predicates
from stretto.oracle.scores import Case, Rates, feature_names, judge
from stretto.vocabulary import FOLDS, fold_of


class ArbiterError(FlowError):
    """An arbiter part that cannot be used; the message names the file and field."""


@dataclass
class Fold:
    weights: list[float]
    rates: Rates
    cases: int = 0  # decisions the weights were fitted on

    def to_json(self) -> dict:
        return {"weights": list(self.weights), "rates": self.rates.to_json(), "cases": self.cases}


@dataclass
class Arbiter:
    model: str  # the runner URI the answers came from: part of every question's cache key
    predicates: list[Predicate]
    weighed: list[str]  # ids of the predicates the fit weighs
    folds: list[Fold]
    dataflow_hints: bool = False
    manifest_options: bool = False
    tasks: int = 0  # held-out tasks asked about
    sources: list[str] = field(default_factory=list)  # where a taken arbiter came from

    @property
    def weighed_predicates(self) -> list[Predicate]:
        by_id = {p.id: p for p in self.predicates}
        return [by_id[i] for i in self.weighed]

    @property
    def cases(self) -> int:
        return max((f.cases for f in self.folds), default=0)

    def fold_for(self, task: str) -> Fold:
        """The fit that judges a task: the pooled one, or the task's cross-fitted fold."""
        return self.folds[0] if len(self.folds) == 1 else self.folds[fold_of(task, FOLDS)]

    def judge(self, case: Case, task: str) -> dict[str, float]:
        """P(option) for every option of the case (each × the site's coverage)."""
        fold = self.fold_for(task)
        return judge(case, fold.weights, self.weighed_predicates, fold.rates)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "questions": QUESTIONS_VERSION,
            "dataflow_hints": self.dataflow_hints,
            "manifest_options": self.manifest_options,
            "predicates": [p.to_json() for p in self.predicates],
            "weighed": list(self.weighed),
            "features": feature_names(self.weighed_predicates),
            "folds": [f.to_json() for f in self.folds],
            "cases": self.cases,
            "tasks": self.tasks,
            "sources": sorted(set(self.sources)),
        }


def arbiter_from_json(value: Any, source: str = "flow") -> Arbiter:
    """The arbiter part read back, checked beyond its schema: the weighed predicates exist,
    the features match them, every fold has one weight per feature, 1 or 5 folds."""
    where = f"{source}: field `arbiter"
    if not isinstance(value, Mapping):
        raise ArbiterError(f"{where}`: expected an object")
    if value.get("questions") != QUESTIONS_VERSION:
        raise ArbiterError(f"{where}.questions`: only {QUESTIONS_VERSION} questions are asked")
    try:
        predicates = parse_predicates(value.get("predicates"), source)
    except PredicateError as exc:
        message = str(exc).replace("field `predicates", "field `arbiter.predicates")
        raise ArbiterError(message) from exc
    ids = {p.id for p in predicates}
    weighed = value.get("weighed")
    if not isinstance(weighed, list) or not all(isinstance(i, str) for i in weighed):
        raise ArbiterError(f"{where}.weighed`: expected a list of predicate ids")
    for i, pid in enumerate(weighed):
        if pid not in ids:
            raise ArbiterError(f"{where}.weighed[{i}]`: no predicate `{pid}`")
    arbiter = Arbiter(
        model=str(value.get("model", "")),
        predicates=predicates,
        weighed=list(weighed),
        folds=[],
        dataflow_hints=bool(value.get("dataflow_hints", False)),
        manifest_options=bool(value.get("manifest_options", False)),
        tasks=int(value.get("tasks", 0)),
        sources=list(value.get("sources", [])),
    )
    names = feature_names(arbiter.weighed_predicates)
    if value.get("features") != names:
        raise ArbiterError(f"{where}.features`: expected {names}")
    folds = value.get("folds")
    if not isinstance(folds, list) or len(folds) not in (1, FOLDS):
        raise ArbiterError(f"{where}.folds`: expected 1 fit (pooled) or {FOLDS} (by task group)")
    for i, fold in enumerate(folds):
        weights = fold.get("weights") if isinstance(fold, Mapping) else None
        if not isinstance(weights, list) or len(weights) != len(names):
            raise ArbiterError(f"{where}.folds[{i}].weights`: expected {len(names)} numbers")
        try:
            rates = Rates.from_json(fold["rates"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ArbiterError(f"{where}.folds[{i}].rates`: malformed ({exc})") from exc
        arbiter.folds.append(Fold([float(w) for w in weights], rates, int(fold.get("cases", 0))))
    return arbiter


def check_flow(flow: dict, source: str = "flow") -> dict:
    """The flow, its arbiter part (if any) checked beyond the schema: ArbiterError (a
    FlowError) names the file and field. What every loader above stretto.model calls."""
    if "arbiter" in flow:
        arbiter_from_json(flow["arbiter"], source)
    return flow


def load_flow(path: str | Path) -> dict:
    """A flow file, validated (stretto.model.flow) and its arbiter checked."""
    return check_flow(load_flow_file(path), str(path))


def new_arbiter(
    *,
    model: str,
    folds: Sequence[Fold],
    predicates: Sequence[Predicate] = (),
    weighed: Sequence[str] | None = None,
    dataflow_hints: bool = False,
    manifest_options: bool = False,
    tasks: int = 0,
) -> Arbiter:
    """An arbiter from fitted folds; every predicate is weighed unless `weighed` says."""
    return Arbiter(
        model=model,
        predicates=list(predicates),
        weighed=[p.id for p in predicates] if weighed is None else list(weighed),
        folds=list(folds),
        dataflow_hints=dataflow_hints,
        manifest_options=manifest_options,
        tasks=tasks,
    )


ARBITER_FILE_VERSION = 1


def arbiter_file(arbiter_json: Mapping, domain: str) -> dict:
    """An arbiter file (`export-arbiter`): the arbiter of a flow, to take into another one
    with `learn --arbiter-from`. Cross-fitted folds that differ are refused: a file holds
    one fit."""
    folds = arbiter_json["folds"]
    if any(f["weights"] != folds[0]["weights"] for f in folds):
        raise ArbiterError(
            "the flow's arbiter is cross-fitted (its folds differ); export a pooled one"
        )
    return {
        "stretto_arbiter": ARBITER_FILE_VERSION,
        "domain": domain,
        "arbiter": {**arbiter_json, "folds": [folds[0]]},
    }


def take_arbiter(value: Any, source: str) -> Arbiter:
    """The arbiter of an arbiter file or of a flow (`learn --arbiter-from FILE`), its
    provenance noted in `sources`: `arbiter (<domain>): <file>` or `arbiter: <file>`."""
    if isinstance(value, Mapping) and value.get("stretto_arbiter") == ARBITER_FILE_VERSION:
        arbiter = arbiter_from_json(value.get("arbiter"), source)
        arbiter.sources.append(f"arbiter ({value.get('domain')}): {source}")
    elif isinstance(value, Mapping) and "stretto_flow" in value:
        if "arbiter" not in value:
            raise ArbiterError(f"{source}: the flow has no arbiter to take")
        arbiter = arbiter_from_json(value["arbiter"], source)
        arbiter.sources.append(f"arbiter: {source}")
    else:
        raise ArbiterError(f"{source}: neither an arbiter file nor a flow")
    return arbiter
