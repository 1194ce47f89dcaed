"""The arbiter as one `--flow` session serves it (../shared/spec/algorithms.md §6.5): whether a
flow can be served with the decider and System-One runner asked for (`serving_problem`), and
the session's arbiter (`serving_arbiter`): its judge, the conversation the judge is shown, the
time a run's questions may take and the session's cap on questions. The FlowServer
(proxy.serve.flowserver) asks it at each decision; the flow's loader (proxy.serve.flowload)
checks and opens it.

stretto.oracle is imported inside the functions that need it, so a session without an arbiter
never loads it (docs/architecture.md, rule 3); it loads no numpy.
"""

from __future__ import annotations

import os

from stretto.model.decide import decider_problem, default_decider


class ServingArbiter:
    """The arbiter as one session serves it: its judge (stretto.oracle.judge.ArbiterJudge),
    the Conversation the judge is shown, the run's share of time for questions, and the
    session's question cap."""

    def __init__(self, judge, conversation, timeout_s: float, questions: int) -> None:
        self.judge, self.conversation = judge, conversation
        self.timeout_s, self.questions = timeout_s, questions
        self.asked = 0


def serving_problem(flow: dict, decider: str | None, oracle: str | None = None) -> str | None:
    """Why this flow cannot be served with `decider` (None: the flow's default) and the
    runner `oracle` names, or None. A flow with an arbiter has it checked beyond the schema
    (stretto.oracle.arbiter)."""
    if "arbiter" in flow:
        # proxy start-up: only a flow with an arbiter loads stretto.oracle
        from stretto.oracle.arbiter import ArbiterError, arbiter_from_json

        try:
            arbiter_from_json(flow["arbiter"])
        except ArbiterError as exc:
            return str(exc)
    problem = decider_problem(flow, decider or default_decider(flow))
    if problem:
        return f"--flow-decider {decider}: {problem}" if decider else problem
    if oracle is not None and (decider or default_decider(flow)) == "arbiter":
        # proxy start-up: only a session the arbiter decides loads the runners
        from stretto.oracle.errors import UnknownRunner
        from stretto.oracle.runners import parse_uri

        try:
            parse_uri(oracle)
        except UnknownRunner as exc:
            return str(exc)
    return None


def serving_arbiter(
    flow: dict,
    *,
    decider: str | None,
    oracle: str | None,
    cache: str | None,
    base_url: str | None,
    log: str | None,
    timeout_ms: int,
    questions: int,
    session: str,
    task: str | None,
) -> ServingArbiter | None:
    """The session's arbiter when it is served with one (the flow's default when it has
    one), else None. `oracle`: the runner's URI (default the flow's arbiter's model);
    `replay` answers from the cache only. UnknownRunner (an OracleError) for a bad URI."""
    if (decider or default_decider(flow)) != "arbiter":
        return None
    # proxy start-up: only a session the arbiter decides loads the oracle and its HTTP client
    from stretto.oracle.judge import ArbiterJudge
    from stretto.oracle.oracle import open_oracle
    from stretto.oracle.state import Conversation

    model = flow["arbiter"]["model"]
    opened = open_oracle(
        oracle or model,
        cache=os.path.expanduser(cache) if cache else None,
        base_url=base_url,
        timeout=timeout_ms / 1000,
        retries=0,  # waiting out a 429 would hold the agent's answer
        log=os.path.expanduser(log) if log else None,
        replayed=model,
    )
    judge = ArbiterJudge(flow, opened, session=session, task=task)
    return ServingArbiter(judge, Conversation(), timeout_ms / 1000, questions)
