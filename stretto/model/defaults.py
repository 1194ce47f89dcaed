"""The serving defaults: what the proxy does unless told otherwise, and what the CLI, the
assets and the offline tools assume so that they score the flow as it is served.

Imports nothing, so that stretto-proxy can read them at start-up for free.
"""

THRESHOLD = 0.3  # make a lookup when probability × binding chance reaches this
PER_CALL = 8  # lookups after one of the agent's calls
PER_SESSION = 40  # lookups in one session (an episode, offline)
BUDGET_CHARS = 40_000  # text appended to one result: about 10k tokens
SURPRISE_WINDOW = 5  # the surprise gate's window: consecutive step surprises it averages
