"""System-One oracles and the arbiter (../shared/spec/algorithms.md §13; docs/oracle.md).

Layer: above stretto.model, below stretto.offline (imports stretto.model and stretto.logs
only). Nothing here imports numpy but `stretto.oracle.fit`, so serving stays light.

- `runners`: the runners by URI scheme (`--oracle URI`): ollama://, claude://, openai://,
  jev://, simulate://random|habit, replay; `http`: their standard-library HTTP.
- `request`, `questions`, `state`: the question set at a decision and its state slice.
- `oracle`, `cache`, `budget`: asking with a cache and records; the budget check.
- `scores`, `arbiter`, `split`, `fit`: scores and case features, the flow's `arbiter` part,
  the learn split and folds, the conditional-logit fit.
- `judge`: the integration points — `SiteAsker` (learning) and `ArbiterJudge` (deciding).
"""

from stretto.oracle.errors import OracleError

__all__ = ["OracleError"]
