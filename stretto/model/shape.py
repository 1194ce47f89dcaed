"""What the values of a bound argument look like (docs/formats.md §3, `bindings.shapes`).

A value the binding takes from a result is passed only when it looks like the values the
agent passed for that argument in training: its characters are of the classes seen there
(ASCII digits, lower- and upper-case letters, other letters and digits, and each other
character itself) and its length in characters is within the range seen, give or take a
little (ids grow: a quarter of the longest length seen, at least 2 characters). A result is data the
server (or whoever wrote into it) controls; a line such as `../../etc/passwd` or `IGNORE
PREVIOUS INSTRUCTIONS` must never become an argument because it sits where ids usually are.

Learning (warehouse/sql/bindings.sql, section `shapes`) gives, per lookup argument, how many
strings it took, their shortest and longest length and every distinct character;
`learn_shapes` turns that into the flow's entries and `Shape` checks a value against one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DIGIT, LOWER, OTHER, UPPER = "digit", "lower", "other", "upper"
CLASSES = (DIGIT, LOWER, OTHER, UPPER)
CLASS_WORDS = {
    DIGIT: "digits",
    LOWER: "a-z",
    UPPER: "A-Z",
    OTHER: "other letters and digits",
}
SHOWN = 40  # a refused value is quoted up to this many characters
# Ids grow (user_9, then user_41): a value may be this share of the longest length seen
# longer or shorter than the range seen, and at least SLACK_MIN characters.
SLACK_SHARE = 0.25
SLACK_MIN = 2


def char_class(char: str) -> str | None:
    """The class of one character, or None for a symbol (kept as itself)."""
    if "0" <= char <= "9":
        return DIGIT
    if "a" <= char <= "z":
        return LOWER
    if "A" <= char <= "Z":
        return UPPER
    if not char.isascii() and char.isalnum():
        return OTHER
    return None


def learn_shape(tool: str, arg: str, values: int, lengths: tuple[int, int], chars) -> dict:
    """One entry of `bindings.shapes` from what the agent passed: `values` strings, of
    `lengths` (shortest, longest) characters, made of the characters `chars`."""
    classes, symbols = set(), set()
    for char in chars:
        kind = char_class(char)
        if kind is None:
            symbols.add(char)
        else:
            classes.add(kind)
    return {
        "tool": tool,
        "arg": arg,
        "values": int(values),
        "classes": sorted(classes),
        "symbols": "".join(sorted(symbols)),
        "length": [int(lengths[0]), int(lengths[1])],
    }


def learn_shapes(rows: Iterable[tuple]) -> list[dict]:
    """`bindings.shapes` from the rows of the SQL section `shapes`: (tool, arg, values,
    shortest, longest, chars)."""
    out = [
        learn_shape(tool, arg, values, (shortest, longest), chars or [])
        for tool, arg, values, shortest, longest, chars in rows
    ]
    return sorted(out, key=lambda e: (e["tool"], e["arg"]))


def shown(value: str) -> str:
    """A value as a reason quotes it: repr, cut to SHOWN characters."""
    cut = value if len(value) <= SHOWN else value[:SHOWN] + "…"
    return repr(cut)


@dataclass(frozen=True)
class Shape:
    arg: str
    classes: frozenset[str]
    symbols: frozenset[str]
    shortest: int
    longest: int

    @classmethod
    def from_entry(cls, entry: dict) -> Shape:
        return cls(
            entry["arg"],
            frozenset(entry["classes"]),
            frozenset(entry["symbols"]),
            entry["length"][0],
            entry["length"][1],
        )

    def lengths(self) -> tuple[int, int]:
        """The lengths a value may have: the range seen, widened by the slack."""
        slack = max(SLACK_MIN, int(self.longest * SLACK_SHARE))
        return max(1, self.shortest - slack), self.longest + slack

    def refusal(self, value: str) -> str | None:
        """Why `value` does not look like training's values, or None when it does."""
        why = None
        low, high = self.lengths()
        if not low <= len(value) <= high:
            why = f"{len(value)} characters"
        else:
            for char in value:
                if char in self.symbols:
                    continue
                kind = char_class(char)
                if kind is None or kind not in self.classes:
                    why = f"it has {char!r}"
                    break
        if why is None:
            return None
        return (
            f"`{self.arg}` {shown(value)} does not look like the values passed in training "
            f"({why}; learned: {describe(self)})"
        )


def describe(shape: Shape | dict) -> str:
    """`a-z, digits and '-_'; 8 to 12 characters`."""
    if isinstance(shape, dict):
        shape = Shape.from_entry(shape)
    parts = [CLASS_WORDS[c] for c in CLASSES if c in shape.classes]
    if shape.symbols:
        parts.append(repr("".join(sorted(shape.symbols))))
    made = ", ".join(parts) if parts else "nothing"
    span = (
        f"{shape.shortest} characters"
        if shape.shortest == shape.longest
        else f"{shape.shortest} to {shape.longest} characters"
    )
    low, high = shape.lengths()
    return f"{made}; {span} ({low} to {high} allowed)"


def widening(old: dict, new: dict) -> list[str]:
    """The characters `new` lets through that `old` would not (empty when none): what a
    reviewer must look at — a `/` or a space where ids had none is how a path or a sentence
    gets in. (A length range moving with the data is `length_change`.)"""
    out = []
    added = sorted(set(new["classes"]) - set(old["classes"]))
    if added:
        out.append("also " + ", ".join(CLASS_WORDS[c] for c in added))
    symbols = "".join(sorted(set(new["symbols"]) - set(old["symbols"])))
    if symbols:
        out.append(f"also {symbols!r}")
    return out


def length_change(old: dict, new: dict) -> str | None:
    """`length 39 to 47 -> 35 to 47`, or None when the range is the same."""
    if old["length"] == new["length"]:
        return None
    return (
        f"length {old['length'][0]} to {old['length'][1]} -> "
        f"{new['length'][0]} to {new['length'][1]}"
    )
