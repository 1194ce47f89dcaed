"""The decision after each call (../shared/spec/algorithms.md §6.1–6.3, reasons §6.6).

One implementation for everything that decides: the proxy (serving), audit, promote, replay
and the benchmarks. Given the session so far — its step names, and what the binding knows —
it says which lookup to make, if any, with every option's probability, or why it hands back.

The `arbiter` decider asks a System-One model through a judge it is handed at each decision
(stretto.oracle.judge.ArbiterJudge, bound to the session): this layer never imports the
oracle, it only applies the next-step rule to the judgement's probabilities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stretto.model import defaults
from stretto.model.binding import Rules, SessionState, chance, pick
from stretto.model.calibrate import Calibration
from stretto.model.flow import habit_model, reach_model
from stretto.vocabulary import RESPOND

DEFAULT_THRESHOLD = defaults.THRESHOLD
DECIDERS = ("arbiter", "reach", "habit")


class Judged(Protocol):
    """A judgement (stretto.oracle.judge.Judgement): every option's probability, or why the
    decision hands back; what the model answered, for the flow log."""

    probs: dict[str, float]
    reason: str | None
    oracle: dict[str, float]
    predicates: dict[str, float]
    key: str | None
    unanswered: bool  # `replay` had no answer: offline tools leave the decision out


class Judge(Protocol):
    """Asks the model at one decision of a session: the site, the call it follows, the
    lookups offered (sorted) and the habit's probability of each."""

    def __call__(
        self, *, site: str, prev: str, lookups: Sequence[str], habit: Mapping[str, float]
    ) -> Judged: ...


def default_decider(flow: dict) -> str:
    """What a flow is served with unless told: its arbiter, else reach, else habit."""
    if flow.get("arbiter"):
        return "arbiter"
    return "reach" if flow.get("reach") else "habit"


def decider_problem(flow: dict, decider: str) -> str | None:
    """Why a flow cannot be served with `decider`, or None."""
    if decider not in DECIDERS:
        return f"unknown decider {decider!r} (arbiter, reach or habit)"
    if decider == "arbiter" and not flow.get("arbiter"):
        return "this flow has no arbiter (learn one with stretto learn --oracle URI)"
    if decider == "reach" and not flow.get("reach"):
        return "this flow has no reach counts"
    return None


def break_even(beta: float, delta: float) -> float:
    """The threshold at which a lookup pays (algorithms §18): a served score q saves q·β and
    costs (1 − q)·δ, so it pays from q = δ / (β + δ)."""
    return delta / (beta + delta)


def serving_part(beta: float, delta: float) -> dict:
    """The flow's `serving` part for costs β (a saved turn) and δ (a detour): their
    break-even, to 4 places, with the costs it came from."""
    return {
        "threshold": round(break_even(beta, delta), 4),
        "costs": {"saved_turn": beta, "detour": delta},
    }


def served_threshold(flow: dict, given: float | None = None) -> float:
    """The threshold a flow is served at: `given` (an explicit --threshold or
    --flow-threshold) when set, else the flow's own (`serving.threshold`, written by
    --calibrate from the domain's costs), else the default. A site's own threshold
    (`thresholds`, from search) still applies at that site."""
    if given is not None:
        return given
    return float(flow.get("serving", {}).get("threshold", DEFAULT_THRESHOLD))


def theta_text(theta: float) -> str:
    """A threshold as the reference prints it: 0.3, 0.25, 1."""
    text = repr(float(theta))
    return text[:-2] if text.endswith(".0") else text


@dataclass
class Option:
    tool: str
    prob: float  # the decider's probability
    habit: float | None  # the habit's, for the log and review (None: not computed)
    chance: float | None = None  # the binding's chance, when it binds
    arguments: dict | None = None
    reason: str | None = None  # why it does not bind
    mention: str | None = None  # how the binding's values were named (binding.PICKED, ...)
    served: float | None = None  # its calibrated score once bound (None: prob × chance)
    most: float | None = None  # the most a binding could serve it at (None: prob)

    @property
    def score(self) -> float:
        """What the rule compares with θ: the served score (prob × chance uncalibrated)."""
        return self.served if self.served is not None else self.prob * (self.chance or 0.0)

    @property
    def upper(self) -> float:
        return self.most if self.most is not None else self.prob


@dataclass
class Decision:
    site: str | None
    action: str  # "lookup" or "hand_back"
    tool: str | None = None
    arguments: dict | None = None
    prob: float | None = None
    binding: float | None = None
    reason: str | None = None
    score: float | None = None  # the served score of the lookup weighed (docs/algorithms.md)
    probs: dict[str, float] = field(default_factory=dict)  # every option, respond included
    options: list[Option] = field(default_factory=list)
    # Made at a site the flow's promotion record does not promote: decided as usual, to be
    # logged, but never acted on (docs/formats.md, `promoted`).
    shadow: bool = False
    # The arbiter's: a question was asked; the model's `next` answer and predicates; the
    # request's cache key; `replay` had no answer (offline tools leave such decisions out).
    asked: bool = False
    oracle: dict[str, float] | None = None
    predicates: dict[str, float] | None = None
    key: str | None = None
    unanswered: bool = False

    @property
    def looks_up(self) -> bool:
        """Whether to make the lookup: a lookup decided at a site where the flow may act."""
        return self.action == "lookup" and not self.shadow


def _below(option: Option, theta: float) -> Decision:
    at_most = "" if option.most is None else f", served at most {option.most:.2f}"
    return Decision(
        None,
        "hand_back",
        prob=option.prob,
        reason=f"{option.tool} at {option.prob:.2f}{at_most}, below {theta_text(theta)}",
    )


def site_name(tool: str, failed: bool) -> str:
    return tool + (" (error)" if failed else "")


class Decider:
    """A flow's decider: `arbiter` (the default when the flow has one), `reach` (the default
    when the flow has reach counts) or `habit`; served at `threshold`, by default the flow's
    own (`served_threshold`)."""

    def __init__(
        self, flow: dict, decider: str | None = None, threshold: float | None = None
    ) -> None:
        self.flow = flow
        self.kind = decider or default_decider(flow)
        if self.kind not in DECIDERS:
            raise ValueError(f"unknown decider {self.kind!r} (arbiter, reach or habit)")
        if self.kind == "arbiter" and not flow.get("arbiter"):
            raise ValueError("this flow has no arbiter to decide with")
        self.threshold = served_threshold(flow, threshold)
        self.habit = habit_model(flow)
        self.reach = reach_model(flow) if self.kind == "reach" else None
        self.rules = Rules.from_flow(flow["bindings"])
        self.options = {
            (s["after"], s["failed"]): sorted(s["lookups"]) for s in flow["sites"]["next"]
        }
        # An arbiter fitted with --manifest-options is offered every read at every site.
        arbiter = flow.get("arbiter") if self.kind == "arbiter" else None
        self.every_read = (
            sorted(flow["sites"]["reads"]) if arbiter and arbiter.get("manifest_options") else None
        )
        self.thresholds = flow.get("thresholds", {})
        # the served score: p × chance, calibrated when the flow carries a map for the decider
        self.calibration = Calibration.of(flow, self.kind)
        promoted = flow.get("promoted")
        self.promoted = (
            None
            if promoted is None
            else {
                site for site, entry in promoted.get("sites", {}).items() if entry.get("promoted")
            }
        )

    def decide(
        self,
        history: list[str],
        last: tuple[str, bool] | None,
        state: SessionState,
        also: Sequence[tuple[str, dict]] = (),
        every_option: bool = False,
        judge: Judge | None = None,
    ) -> Decision:
        """Decide after the call `last` = (tool, failed) — the last of `history`, the session's
        step names so far — with `state` what the binding knows and `also` the calls already
        on their way in this turn. `every_option` binds every option, not only those the rule
        can take (for exploration and review). `judge`: the session's arbiter judge (required
        by the arbiter decider; the others ignore it)."""
        if last is None:
            return Decision(None, "hand_back", reason="the last step is not a tool call")
        site = site_name(*last)
        decision = self._decide_at(site, history, last, state, also, every_option, judge)
        # A flow with a promotion record acts only at its promoted sites; at the others the
        # decision is made as usual and marked shadow: logged, never acted on.
        decision.shadow = self.promoted is not None and site not in self.promoted
        return decision

    def _decide_at(
        self,
        site: str,
        history: list[str],
        last: tuple[str, bool],
        state: SessionState,
        also: Sequence[tuple[str, dict]],
        every_option: bool,
        judge: Judge | None,
    ) -> Decision:
        theta = self.threshold
        if site in self.thresholds:
            if self.thresholds[site] > 1:
                return Decision(site, "hand_back", reason="the site is switched off")
            theta = self.thresholds[site]
        lookups = self.lookups_at(last)
        if not lookups:
            return Decision(site, "hand_back", reason="no lookups followed here in training")
        asked: dict = {}
        habit: dict[str, float | None]
        if self.kind == "arbiter":
            prior = {tool: self.habit.prob(tool, history) for tool in lookups}
            habit = dict(prior)
            judged = self._ask(judge, site, last, lookups, prior)
            asked = {
                "asked": True,
                "oracle": dict(judged.oracle),
                "predicates": dict(judged.predicates),
                "key": judged.key,
            }
            if judged.reason is not None:
                return Decision(
                    site,
                    "hand_back",
                    reason=judged.reason,
                    unanswered=bool(judged.unanswered),
                    **asked,
                )
            probs = dict(judged.probs)
        else:
            probs = self.probabilities(history, last)
            if self.kind == "habit":
                habit = {tool: probs[tool] for tool in lookups}
            elif every_option:
                habit = {tool: self.habit.prob(tool, history) for tool in lookups}
            else:
                habit = dict.fromkeys(lookups)
        options = [Option(tool, probs[tool], habit[tool]) for tool in lookups]
        calibrated = not self.calibration.identity
        if calibrated:
            for option in options:
                option.most = self.calibration.upper(option.prob, site, option.tool)
        # Bind only the options the rule can take (binding is the costly part), unless every
        # option is wanted (exploration shows them all).
        if every_option:
            to_bind = options
        elif self.kind == "reach":
            to_bind = [o for o in options if o.upper >= theta]
        else:
            to_bind = [max(options, key=lambda o: o.prob)]
        for option in to_bind:
            bound = pick(self.rules, state, option.tool, list(also))
            if bound.arguments is None:
                option.reason = f"{option.tool}: {bound.error}"
            else:
                option.arguments = bound.arguments
                option.chance = chance(self.rules, option.tool, bound)
                option.mention = bound.mention
                if calibrated:
                    raw = option.prob * option.chance
                    option.served = self.calibration.score(raw, site, option.tool, bound.mention)
        rule = self.reach_rule if self.kind == "reach" else self.habit_rule
        decision = rule(options, theta)
        decision.site = site
        decision.probs = {name: probs[name] for name in sorted(probs)}
        decision.options = options
        for name, value in asked.items():
            setattr(decision, name, value)
        return decision

    def lookups_at(self, last: tuple[str, bool]) -> list[str]:
        """The lookups offered after the call `last`: those learned there (sorted), or every
        read for an arbiter fitted with --manifest-options."""
        if self.every_read is not None:
            return self.every_read
        return self.options.get(last, [])

    def _ask(
        self,
        judge: Judge | None,
        site: str,
        last: tuple[str, bool],
        lookups: list[str],
        habit: dict[str, float],
    ) -> Judged:
        if judge is None:
            raise ValueError("the arbiter decider needs a judge (a System-One model to ask)")
        return judge(site=site, prev=last[0], lookups=lookups, habit=habit)

    def judged(
        self, history: list[str], last: tuple[str, bool], judge: Judge | None
    ) -> Judged | None:
        """The arbiter's judgement at the site after `last` (None when it offers nothing)."""
        lookups = self.lookups_at(last)
        if not lookups:
            return None
        habit = {tool: self.habit.prob(tool, history) for tool in lookups}
        return self._ask(judge, site_name(*last), last, lookups, habit)

    def probabilities(
        self, history: list[str], last: tuple[str, bool], judge: Judge | None = None
    ) -> dict[str, float]:
        """The decider's probability of each option at the site after `last` (the lookups
        learned there, and respond), without binding; {} when the site offers none (or, for
        the arbiter, when the judgement hands back)."""
        lookups = self.lookups_at(last)
        if not lookups:
            return {}
        if self.kind == "arbiter":
            judged = self.judged(history, last, judge)
            return {} if judged is None or judged.reason is not None else dict(judged.probs)
        if self.kind == "reach":
            assert self.reach is not None  # loaded for the reach decider (__init__)
            probs = {tool: self.reach.prob(tool, history) for tool in lookups}
            probs[RESPOND] = 0.0
        else:
            probs = {tool: self.habit.prob(tool, history) for tool in lookups}
            probs[RESPOND] = max(0.0, 1.0 - sum(probs.values()))
        return probs

    @staticmethod
    def habit_rule(options: list[Option], theta: float) -> Decision:
        """The likeliest lookup, if it clears θ and binds (no fall-back to the next one)."""
        best = max(options, key=lambda o: o.prob, default=None)  # first of equals
        if best is None:
            return Decision(None, "hand_back", reason="no lookup to make")
        if best.upper < theta:
            return _below(best, theta)
        return Decider._clear(best, theta)

    @staticmethod
    def reach_rule(options: list[Option], theta: float) -> Decision:
        """Each lookup judged on its own: the best probability × chance among those that
        clear θ and bind."""
        best, last_error = None, None
        for option in options:
            if option.upper < theta:
                continue
            if option.arguments is None:
                last_error = option.reason
                continue
            if best is None or option.score > best.score:
                best = option
        if best is None:
            if last_error:
                return Decision(None, "hand_back", reason=last_error)
            likeliest = max(options, key=lambda o: o.prob, default=None)  # first of equals
            if likeliest is None:
                return Decision(None, "hand_back", reason="no lookup to make")
            return _below(likeliest, theta)
        return Decider._clear(best, theta)

    @staticmethod
    def _clear(best: Option, theta: float) -> Decision:
        if best.arguments is None:
            return Decision(None, "hand_back", tool=best.tool, prob=best.prob, reason=best.reason)
        if best.score < theta:
            served = "" if best.served is None else f", served at {best.served:.2f}"
            return Decision(
                None,
                "hand_back",
                tool=best.tool,
                prob=best.prob,
                binding=best.chance,
                reason=f"{best.tool} at {best.prob:.2f}, times {best.chance:.2f} "
                f"for its arguments{served}, below {theta_text(theta)}",
                score=best.score,
            )
        return Decision(
            None,
            "lookup",
            tool=best.tool,
            arguments=best.arguments,
            prob=best.prob,
            binding=best.chance,
            score=best.score,
        )


# --- exploration (--flow-explore ε) -----------------------------------------------------

MASK = (1 << 64) - 1


class SplitMix64:
    """A small seeded stream of uniforms in [0, 1): reproducible draws for exploration."""

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK

    def uniform(self) -> float:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        return (z >> 11) / float(1 << 53)


def explore(decision: Decision, epsilon: float, rng: SplitMix64) -> tuple[Decision, dict]:
    """With probability ε, take another option that binds instead of the rule's choice, in
    proportion to its probability (../shared/spec/algorithms.md §6.4). Returns the decision
    taken and what the flow log records: every option, whether it explored, the propensity."""
    view = [
        {
            "tool": o.tool,
            "prob": o.prob,
            "habit": o.habit,
            "binding": o.chance,
            "arguments": o.arguments,
            "unbound": o.reason,
        }
        for o in decision.options
    ]
    greedy = decision.tool if decision.action == "lookup" else None
    alternatives = [
        o for o in decision.options if o.arguments is not None and o.prob > 0 and o.tool != greedy
    ]
    record = {
        "epsilon": epsilon,
        "options": view,
        "greedy": greedy,
        "explored": False,
        "propensity": 1.0,
    }
    if not alternatives or epsilon <= 0:
        return decision, record
    if rng.uniform() >= epsilon:
        record["propensity"] = 1.0 - epsilon
        return decision, record
    total = sum(o.prob for o in alternatives)
    left = rng.uniform() * total
    chosen = alternatives[-1]
    for option in alternatives:
        left -= option.prob
        if left < 0:
            chosen = option
            break
    record.update(explored=True, propensity=epsilon * chosen.prob / total)
    taken = Decision(
        decision.site,
        "lookup",
        tool=chosen.tool,
        arguments=chosen.arguments,
        prob=chosen.prob,
        binding=chosen.chance,
        score=chosen.score,
        probs=decision.probs,
        options=decision.options,
        shadow=decision.shadow,
    )
    return taken, record
