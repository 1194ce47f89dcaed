"""`stretto evaluate`: what other rules would have done, estimated from exploring flow logs
(../shared/spec/algorithms.md §14; docs/formats.md "Labelled decisions" and "Evaluation").

- `labelling`: each decision line a proxy wrote with `--flow-explore` and every option it
  logged, labelled from the session log (used before the agent's next write, a detour, the
  turn it would have saved), its logged propensity checked;
- `target`: the rules evaluated (decider × threshold), re-run on the logged options;
- `estimators`: the target's value over the logged decisions (lookups, used, detours, turns
  saved) by the labels, a reward model, and the importance-weighted IPS, SNIPS, DR, SNDR and
  Switch-DR; weight diagnostics;
- `intervals`: analytic standard errors and a bootstrap over sessions;
- `results`: `evaluate`, every target's estimates per site and in total;
- `report`: Markdown and the Parquet tables.
"""

from stretto.offline.evaluate.estimators import (
    DEFAULT_SWITCH_TAU,
    ESTIMATORS,
    NAMES,
    WEIGHTED,
)
from stretto.offline.evaluate.intervals import DEFAULT_BOOTSTRAP
from stretto.offline.evaluate.labelling import (
    EvaluateError,
    Labelled,
    label_folder,
    labelled_row,
    logging_propensities,
)
from stretto.offline.evaluate.report import decision_rows, estimate_rows, markdown, write_tables
from stretto.offline.evaluate.results import DEFAULT_MIN_ESS, evaluate
from stretto.offline.evaluate.target import (
    METRICS,
    Target,
    check_targets,
    target_action,
    targets,
    values,
)

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "DEFAULT_MIN_ESS",
    "DEFAULT_SWITCH_TAU",
    "ESTIMATORS",
    "METRICS",
    "NAMES",
    "WEIGHTED",
    "EvaluateError",
    "Labelled",
    "Target",
    "check_targets",
    "decision_rows",
    "estimate_rows",
    "evaluate",
    "label_folder",
    "labelled_row",
    "logging_propensities",
    "markdown",
    "target_action",
    "targets",
    "values",
    "write_tables",
]
