"""The serving defaults: what the proxy does unless told otherwise, and what the CLI, the
assets and the offline tools assume so that they score the flow as it is served.

Imports nothing, so that stretto-proxy can read them at start-up for free.
"""

THRESHOLD = 0.3  # make a lookup when probability × binding chance reaches this
# a saved LLM turn's worth (β) and a detour's cost (δ), in any one unit: the break-even
# δ/(β+δ) of these is THRESHOLD, so a flow that names no costs is served as before
COSTS = (7.0, 3.0)
PER_CALL = 8  # lookups after one of the agent's calls
PER_SESSION = 40  # lookups in one session (an episode, offline)
BUDGET_CHARS = 40_000  # text appended to one result: about 10k tokens
SURPRISE_WINDOW = 5  # the surprise gate's window: consecutive step surprises it averages
ORACLE_TIMEOUT_MS = 2000  # --oracle-timeout: a run's questions take at most this, then hand back
