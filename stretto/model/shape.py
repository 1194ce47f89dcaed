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

Two more rules hold for every value taken from a result (issue 40): one with a control
character, a `..` path segment or a URL scheme never binds (`never_binds`); and a path — an
argument whose training values had `/` or `\\` — may not leave the folders the agent's own
values were in (`roots`: the values' folders, normalised, those with the same first segment
merged into their longest common folder): the value, normalised, must be at or under one of
them (absolute under an absolute one, relative under a relative one).
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
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
# a `..` segment (also percent-encoded), and a URL scheme (`file:`, `https://`, ...)
_DOTDOT = re.compile(r"(?:^|[/\\])(?:\.|%2e){2}(?:$|[/\\])", re.IGNORECASE)
_SCHEME = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]+://|^(?:file|data|javascript|vbscript):",
    re.IGNORECASE,
)
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def never_binds(value: str) -> str | None:
    """Why a value from a result may never be passed, whatever training saw, or None: a
    control character (or a line separator, or a bidirectional override), a `..` segment, a
    URL scheme."""
    for char in value:
        if char in _BIDI or unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return f"it has the control character {char!r}"
    if _DOTDOT.search(value):
        return "it has a `..` segment"
    if _SCHEME.search(value):
        return "it has a URL scheme"
    return None


def is_path(symbols: Iterable[str]) -> bool:
    """Whether an argument whose training values had these symbols takes paths."""
    return any(s in ("/", "\\") for s in symbols)


def normalise(path: str) -> str:
    """A path with `\\` as `/`, `.` segments, doubled and trailing `/` gone."""
    return posixpath.normpath(path.replace("\\", "/")) if path else "."


def folder_of(value: str) -> str:
    """The folder a value of a path argument is in (`.` for a bare relative name)."""
    path = normalise(value)
    if "/" not in path:
        return "."
    head = path.rsplit("/", 1)[0]
    return head or "/"


def minimal_roots(folders: Iterable[str]) -> list[str]:
    """The roots of these folders (sorted): normalised, those with the same first segment
    (`/srv`, `/home`, `notes`, `C:`) replaced by their longest common folder, those inside
    another dropped. The agent that read `/srv/notes/meetings/a.md` and
    `/srv/notes/projects/b.md` read in `/srv/notes`: a note beside them is not elsewhere."""
    groups: dict[str, list[str]] = {}
    for folder in {normalise(f) for f in folders}:
        head = folder.split("/")[1 if folder.startswith("/") else 0]
        groups.setdefault(("/" if folder.startswith("/") else "") + head, []).append(folder)
    common = sorted(posixpath.commonpath(group) or "." for group in groups.values())
    out: list[str] = []
    for folder in common:
        if not any(is_under(folder, root) for root in out):
            out.append(folder)
    return out


def is_under(path: str, root: str) -> bool:
    """Whether a normalised path is `root` or inside it (absolute under absolute, relative
    under relative)."""
    if root == "/":
        return path.startswith("/")
    if root == ".":
        return not path.startswith("/") and path != ".." and not path.startswith("../")
    return path == root or path.startswith(root + "/")


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


def learn_shape(
    tool: str, arg: str, values: int, lengths: tuple[int, int], chars, folders=()
) -> dict:
    """One entry of `bindings.shapes` from what the agent passed: `values` strings, of
    `lengths` (shortest, longest) characters, made of the characters `chars`, in `folders`
    (the folder of each, for a path argument)."""
    classes, symbols = set(), set()
    for char in chars:
        kind = char_class(char)
        if kind is None:
            symbols.add(char)
        else:
            classes.add(kind)
    entry = {
        "tool": tool,
        "arg": arg,
        "values": int(values),
        "classes": sorted(classes),
        "symbols": "".join(sorted(symbols)),
        "length": [int(lengths[0]), int(lengths[1])],
    }
    if is_path(symbols):
        entry["roots"] = minimal_roots(folders or ["."])
    return entry


def learn_shapes(rows: Iterable[tuple]) -> list[dict]:
    """`bindings.shapes` from the rows of the SQL section `shapes`: (tool, arg, values,
    shortest, longest, chars[, folders])."""
    out = [
        learn_shape(tool, arg, values, (shortest, longest), chars or [], *rest)
        for tool, arg, values, shortest, longest, chars, *rest in rows
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
    roots: tuple[str, ...] | None = None  # a path argument's folders in training

    @classmethod
    def from_entry(cls, entry: dict) -> Shape:
        roots = entry.get("roots")
        return cls(
            entry["arg"],
            frozenset(entry["classes"]),
            frozenset(entry["symbols"]),
            entry["length"][0],
            entry["length"][1],
            None if roots is None else tuple(roots),
        )

    def lengths(self) -> tuple[int, int]:
        """The lengths a value may have: the range seen, widened by the slack."""
        slack = max(SLACK_MIN, int(self.longest * SLACK_SHARE))
        return max(1, self.shortest - slack), self.longest + slack

    def refusal(self, value: str) -> str | None:
        """Why `value` does not look like training's values, or None when it does."""
        never = never_binds(value)
        if never is not None:
            return f"`{self.arg}` {shown(value)} is never passed: {never}"
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
        if why is None and self.roots is not None:
            path = normalise(value)
            if not any(is_under(path, root) for root in self.roots):
                return (
                    f"`{self.arg}` {shown(value)} leaves the folders the agent's paths were in "
                    f"(learned: {', '.join(repr(r) for r in self.roots)})"
                )
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
    under = "" if shape.roots is None else "; under " + ", ".join(repr(r) for r in shape.roots)
    return f"{made}; {span} ({low} to {high} allowed){under}"


def widening(old: dict, new: dict) -> list[str]:
    """The characters `new` lets through that `old` would not, and the folders its paths may
    be in that `old`'s may not (empty when none): what a reviewer must look at — a `/` or a
    space where ids had none is how a path or a sentence gets in. (A length range moving with
    the data is `length_change`.)"""
    out = []
    added = sorted(set(new["classes"]) - set(old["classes"]))
    if added:
        out.append("also " + ", ".join(CLASS_WORDS[c] for c in added))
    symbols = "".join(sorted(set(new["symbols"]) - set(old["symbols"])))
    if symbols:
        out.append(f"also {symbols!r}")
    old_roots, new_roots = old.get("roots"), new.get("roots")
    if old_roots is not None and new_roots is not None:
        outside = [r for r in new_roots if not any(is_under(r, o) for o in old_roots)]
        if outside:
            out.append("also paths under " + ", ".join(repr(r) for r in outside))
    return out


def length_change(old: dict, new: dict) -> str | None:
    """`length 39 to 47 -> 35 to 47`, or None when the range is the same."""
    if old["length"] == new["length"]:
        return None
    return (
        f"length {old['length'][0]} to {old['length'][1]} -> "
        f"{new['length'][0]} to {new['length'][1]}"
    )
