"""The Decider's arbiter: the next-step rule on the judgement's probabilities, a hand-back
with the judgement's reason, what the model said carried to the log, and no question where
the rule needs none. The flow is learned from the reference's shop sessions; the judgements
are the oracle package's own Judgement values."""

from __future__ import annotations

import json

import pytest

from stretto.model.binding import SessionState
from stretto.model.decide import Decider, default_decider
from stretto.oracle.arbiter import Fold, new_arbiter
from stretto.oracle.judge import FAILED, Judgement
from stretto.oracle.scores import Rates

AFTER_LOOKUP = ("find_user_id_by_email", False)


@pytest.fixture
def flow(shop_flow_path) -> dict:
    flow = json.loads(shop_flow_path.read_text())
    fold = Fold([1.0, 1.0, 0.0, 0.0, 0.0], Rates(), 10)
    flow["arbiter"] = new_arbiter(model="simulate://habit", folds=[fold]).to_json()
    return flow


class Asked(list):
    """A judge that answers each question with the next of `judgements`, and keeps what it
    was asked."""

    def __init__(self, *judgements: Judgement) -> None:
        super().__init__()
        self.judgements = list(judgements)

    def __call__(self, **question) -> Judgement:
        self.append(question)
        return self.judgements.pop(0)


def state_after_lookup() -> SessionState:
    state = SessionState()
    state.add_call("find_user_id_by_email", {"email": "c1@example.com"})
    state.add_result("find_user_id_by_email", True, "user_1")
    return state


def decide(flow, judge, threshold=0.3, last=AFTER_LOOKUP):
    decider = Decider(flow, None, threshold)
    return decider.decide([last[0]], last, state_after_lookup(), judge=judge)


def test_the_arbiter_is_the_default_and_its_likeliest_lookup_is_made(flow) -> None:
    assert default_decider(flow) == "arbiter"
    judge = Asked(
        Judgement(
            probs={"get_user_details": 0.8, "respond": 0.15},
            oracle={"get_user_details": 0.9, "respond": 0.1},
            predicates={"list_pending": 0.3},
            key="ab" * 32,
        )
    )
    decision = decide(flow, judge)
    assert decision.action == "lookup" and decision.tool == "get_user_details"
    assert decision.arguments == {"user_id": "user_1"} and decision.prob == 0.8
    assert decision.asked and decision.key == "ab" * 32
    assert decision.oracle == {"get_user_details": 0.9, "respond": 0.1}
    assert decision.predicates == {"list_pending": 0.3}
    assert decision.probs == {"get_user_details": 0.8, "respond": 0.15}
    # what the judge was asked: the site, the call before, the lookups, the habit's view
    (question,) = judge
    assert question["site"] == "find_user_id_by_email" and question["prev"] == AFTER_LOOKUP[0]
    assert question["lookups"] == ["get_user_details"]
    assert 0 < question["habit"]["get_user_details"] < 1


def test_below_the_threshold_it_hands_back(flow) -> None:
    judge = Asked(Judgement(probs={"get_user_details": 0.25, "respond": 0.7}, key="cd" * 32))
    decision = decide(flow, judge)
    assert decision.action == "hand_back"
    assert decision.reason == "get_user_details at 0.25, below 0.3" and decision.asked


def test_a_failed_or_unanswered_judgement_hands_back_with_its_reason(flow) -> None:
    failed = Judgement(reason=FAILED.format(error="ollama://m: cannot reach x"), key="e" * 64)
    decision = decide(flow, Asked(failed))
    assert decision.reason == "the System-One model failed: ollama://m: cannot reach x"
    assert decision.action == "hand_back" and decision.asked and not decision.unanswered
    unanswered = Judgement(reason=FAILED.format(error="replay: no cached answer"), unanswered=True)
    assert decide(flow, Asked(unanswered)).unanswered


def test_no_question_where_the_rule_needs_none(flow) -> None:
    judge = Asked()
    switched_off = {**flow, "thresholds": {"find_user_id_by_email": 2.0}}
    assert decide(switched_off, judge).reason == "the site is switched off"
    nothing = decide(flow, judge, last=("cancel_pending_order", False))
    assert nothing.reason == "no lookups followed here in training" and not nothing.asked
    assert judge == []


def test_manifest_options_offer_every_read(flow) -> None:
    flow["arbiter"]["manifest_options"] = True
    probs = {"find_user_id_by_email": 0.1, "get_order_details": 0.2, "get_user_details": 0.6}
    judge = Asked(Judgement(probs={**probs, "respond": 0.1}))
    decision = decide(flow, judge, last=("cancel_pending_order", False))
    assert judge[0]["lookups"] == sorted(flow["sites"]["reads"])
    assert decision.tool == "get_user_details"


def test_a_flow_without_an_arbiter_cannot_be_decided_with_one(flow) -> None:
    del flow["arbiter"]
    with pytest.raises(ValueError, match="no arbiter"):
        Decider(flow, "arbiter")
    assert default_decider(flow) == "reach"
