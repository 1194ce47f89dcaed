"""`--oracle-budget DOLLARS`: before asking anything, what the uncached questions could cost
(input tokens estimated as characters / 4, plus the runner's answer tokens, at the runner's
price per million tokens), and a refusal when it is more than the budget."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stretto.oracle.errors import BudgetError
from stretto.oracle.oracle import Oracle, estimated_tokens
from stretto.oracle.request import Request, canonical
from stretto.oracle.runners.base import Context


@dataclass
class Estimate:
    questions: int  # requests to ask
    uncached: int  # of them, not in the cache
    input_tokens: int
    output_tokens: int
    dollars: float


def estimate(oracle: Oracle, requests: Iterable[tuple[Request, Context]]) -> Estimate:
    price_in, price_out = oracle.runner.price()
    asked = uncached = tokens_in = tokens_out = 0
    for request, context in requests:
        asked += 1
        if oracle.cached(request, context):
            continue
        uncached += 1
        tokens_in += estimated_tokens(canonical(oracle.wire(request, context)))
        tokens_out += oracle.runner.answer_tokens * len(request.questions)
    dollars = (tokens_in * price_in + tokens_out * price_out) / 1e6
    return Estimate(asked, uncached, tokens_in, tokens_out, dollars)


def check_budget(
    oracle: Oracle, requests: Iterable[tuple[Request, Context]], budget: float
) -> Estimate:
    """The estimate, or BudgetError when the uncached questions could cost more than
    `budget` dollars (nothing has been asked then)."""
    found = estimate(oracle, requests)
    if found.dollars > budget:
        raise BudgetError(
            f"{oracle.model}: the {found.uncached} uncached question sets (of {found.questions}) "
            f"could cost ${found.dollars:.2f} (about {found.input_tokens} tokens in, "
            f"{found.output_tokens} out), more than --oracle-budget ${budget:.2f}; nothing asked"
        )
    return found
