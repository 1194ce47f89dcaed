"""`evaluate`: each target's estimates, standard errors, intervals and weight diagnostics, per
site and in total, as the JSON result (docs/formats.md §5, "Evaluation")."""

from __future__ import annotations

from typing import Any

import numpy as np

from stretto.offline.evaluate.estimators import (
    DEFAULT_SWITCH_TAU,
    ESTIMATORS,
    WEIGHTED,
    Array,
    Records,
    estimates,
    scope_sums,
    weight_diagnostics,
)
from stretto.offline.evaluate.intervals import (
    DEFAULT_BOOTSTRAP,
    Z95,
    analytic_se,
    session_bootstrap,
)
from stretto.offline.evaluate.labelling import Labelled
from stretto.offline.evaluate.target import METRICS, Target, check_targets

DEFAULT_MIN_ESS = 10.0


def evaluate(
    labelled: Labelled,
    targets: list[Target],
    *,
    min_ess: float = DEFAULT_MIN_ESS,
    switch_tau: float = DEFAULT_SWITCH_TAU,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> list[dict]:
    """One result per target (docs/formats.md §5, "Evaluation"). A weighted estimate whose
    effective sample size is under `min_ess` is refused; Switch-DR uses the model where a
    weight exceeds `switch_tau`; `bootstrap` draws of whole sessions (0: none), from `seed`."""
    check_targets(labelled, targets)
    rows = labelled.rows
    sites = sorted({r["site"] for r in rows})
    sessions = sorted({r["session"] for r in rows})
    settings = {
        "folder": labelled.folder,
        "sessions": labelled.sessions,
        "decisions": len(rows),
        "explored": labelled.explored,
        "logging_decider": labelled.logging_decider,
        "epsilon": sorted({r["epsilon"] for r in rows}),
        "min_ess": min_ess,
        "switch_tau": switch_tau,
        "bootstrap": bootstrap,
        "seed": seed,
    }
    results = []
    for target in targets:
        records = Records(rows, target, sites, sessions)
        results.append(_result(records, target, sites, len(sessions), settings))
    return results


def _result(r: Records, target: Target, sites: list[str], n_sessions: int, settings: dict) -> dict:
    tau, min_ess = settings["switch_tau"], settings["min_ess"]
    sums = scope_sums(r, np.ones((1, r.n)), tau)
    point = estimates(sums)
    se = analytic_se(r, point, sums, tau) if r.n else None
    draws = settings["bootstrap"]
    boot = (
        session_bootstrap(r, n_sessions, draws, settings["seed"], tau)
        if draws > 0 and r.n
        else None
    )
    scopes = [
        _scope(j, diagnostics, point, se, boot, min_ess)
        for j, diagnostics in enumerate(weight_diagnostics(r, sums))
    ]
    site_results = dict(zip(sites, scopes[:-1], strict=True))
    ordered = sorted(site_results, key=lambda s: (-site_results[s]["decisions"], s))
    return {
        "target": {
            "name": target.name,
            "decider": target.decider,
            "habit": target.decider == "habit",
            "threshold": target.threshold,
        },
        "settings": settings,
        "total": scopes[-1],
        "sites": {site: site_results[site] for site in ordered},
    }


def _metrics(vector: Array) -> dict[str, float]:
    return {name: float(v) for name, v in zip(METRICS, vector, strict=True)}


def _interval(low: Array, high: Array) -> dict[str, list[float]]:
    return {name: [float(a), float(b)] for name, a, b in zip(METRICS, low, high, strict=True)}


def _scope(
    j: int,
    diagnostics: dict,
    point: dict[str, Array],
    se: dict[str, Array] | None,
    boot: dict[str, Array] | None,
    min_ess: float,
) -> dict:
    """The Estimates of scope j (docs/formats.md §5): its diagnostics, whether the weighted
    estimates are refused, and every estimator with its standard error and intervals."""
    ess, looks = diagnostics["ess"], diagnostics["looks"]
    refusal = (
        f"effective sample size {ess:.1f} is under {min_ess:g} (--min-ess)"
        if looks > 0 and ess < min_ess
        else None
    )
    out: dict[str, Any] = {**diagnostics, "refused": refusal is not None, "refusal": refusal}
    out["se"], out["intervals"] = {}, {}
    for name in ESTIMATORS:
        refused = refusal is not None and name in WEIGHTED
        out[name] = None if refused else _metrics(point[name][0, j])
        if name == "logged":
            continue
        error = None if refused or se is None else se[name][j]
        if error is not None and np.isnan(error).any():
            error = None  # fewer than two decisions
        out["se"][name] = None if error is None else _metrics(error)
        if refused:
            out["intervals"][name] = None
            continue
        analytic = (
            None
            if error is None
            else _interval(point[name][0, j] - Z95 * error, point[name][0, j] + Z95 * error)
        )
        bootstrap = _interval(boot[name][0, j], boot[name][1, j]) if boot is not None else None
        out["intervals"][name] = {"analytic": analytic, "bootstrap": bootstrap}
    out["ips_se"], out["dr_se"] = out["se"]["ips"], out["se"]["dr"]
    return out
