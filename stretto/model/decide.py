"""The decision after each call (../shared/spec/algorithms.md §6.1–6.3, reasons §6.6).

One implementation for everything that decides: the proxy (serving), and later audit and the
replay benchmark. Given the session so far — its step names, and what the binding knows —
it says which lookup to make, if any, with every option's probability, or why it hands back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stretto.model import defaults
from stretto.model.binding import Rules, SessionState, chance, pick
from stretto.model.calibrate import Calibration
from stretto.model.flow import habit_model, reach_model

DEFAULT_THRESHOLD = defaults.THRESHOLD
RESPOND = "respond"


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
    """A flow's decider: `reach` (default when the flow has reach counts) or `habit`."""

    def __init__(
        self, flow: dict, decider: str | None = None, threshold: float = DEFAULT_THRESHOLD
    ) -> None:
        self.flow = flow
        self.kind = decider or ("reach" if flow.get("reach") else "habit")
        if self.kind not in ("reach", "habit"):
            raise ValueError(f"unknown decider {self.kind!r} (reach or habit)")
        self.threshold = threshold
        self.habit = habit_model(flow)
        self.reach = reach_model(flow) if self.kind == "reach" else None
        self.rules = Rules.from_flow(flow["bindings"])
        self.options = {
            (s["after"], s["failed"]): sorted(s["lookups"]) for s in flow["sites"]["next"]
        }
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
        also: list[tuple[str, dict]] = (),
        every_option: bool = False,
    ) -> Decision:
        """Decide after the call `last` = (tool, failed) — the last of `history`, the session's
        step names so far — with `state` what the binding knows and `also` the calls already
        on their way in this turn. `every_option` binds every option, not only those the rule
        can take (for exploration and review)."""
        if last is None:
            return Decision(None, "hand_back", reason="the last step is not a tool call")
        site = site_name(*last)
        decision = self._decide_at(site, history, last, state, also, every_option)
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
        also: list[tuple[str, dict]],
        every_option: bool,
    ) -> Decision:
        theta = self.threshold
        if site in self.thresholds:
            if self.thresholds[site] > 1:
                return Decision(site, "hand_back", reason="the site is switched off")
            theta = self.thresholds[site]
        lookups = self.options.get(last, [])
        if not lookups:
            return Decision(site, "hand_back", reason="no lookups followed here in training")
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
        return decision

    def probabilities(self, history: list[str], last: tuple[str, bool]) -> dict[str, float]:
        """The decider's probability of each option at the site after `last` (the lookups
        learned there, and respond), without binding; {} when the site offers none."""
        lookups = self.options.get(last, [])
        if not lookups:
            return {}
        if self.kind == "reach":
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


def fnv1a64(text: str) -> int:
    h = 1469598103934665603
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) & MASK
    return h


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
