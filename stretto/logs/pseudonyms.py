"""What the values of a session log become when it is pseudonymised (`stretto redact`,
stretto.logs.redact; ../shared/spec/algorithms.md §20, docs/formats.md §11).

Every value a session carries — the arguments and results of every call, the conversation,
notifications, error texts — is replaced by a salted hash, the same value by the same token in
every session, so that what learning reads is unchanged: where each argument was found in an
earlier result, whether the customer had named it, which LLM turn a call belongs to. Tool
names, JSON structure, timings, the header, `initialize` and `tools/list` are kept.

What "the same value" means follows the readers (stretto.logs.turns.result_values,
stretto.model.binding.parse_output and values_at, the warehouse's SQL): a string in a JSON
document, or a line of a text that is not JSON. So a string is rewritten line by line, and
each line keeps its surrounding whitespace and leading `#`s and has its *core* (the rest)
replaced: equal strings stay equal, trimmed lines still compare as the readers trim them,
`#W1` and `W1` keep their relation. Tokens keep the case class of what they replace, because
the binding compares lower-cased text with what the customer said while the turn rule
compares text exactly. Integers stay integers, and a string of digits gets the digits its
integer gets, because the turn rule compares numbers and strings as text. Free text (the
conversation, error messages) is rewritten word by word, after every value of the records
found in it has been replaced whole by what it became — the binding asks whether a value
appears anywhere in what the customer said — and a hashed one holding other values is
followed by what they became, in brackets, so that they are still found there.

Two passes: a census (in how many sessions each value appears; the names the tools' schemas
declare; the values of `--hash-field` keys: `Count`), then the rewrite (`Pseudonyms`). Both
walk the logs with one walker (stretto.logs.redactwalk, which says which parts of a line are
values), so what is counted is exactly what is rewritten.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from stretto.logs.sensitive import private_key_spans, sensitive, sensitive_spans

SALT_ENV = "STRETTO_REDACT_SALT"
KEEP_SHARED = 3  # a value seen in this many sessions is kept (0: none is), unless sensitive
SHORT = 3  # a value this short is kept: learning ignores it (values of 2+, siblings of 4+)
HEX_DIGITS = 12  # a token is h_ and this many hex digits
NUMBER_DIGITS = 15  # an integer's token has at least this many digits (few collisions)
MIN_VALUE = 2  # shorter values are no value to the readers (stretto.logs.turns)
KNOWN_PREFIX = SHORT + 1  # values are found in free text by this many first characters

_LEAD = re.compile(r"^[^\S\n]*#*[^\S\n]*")  # a line's leading whitespace and #s
_TRAIL = re.compile(r"[^\S\n]*$")
_DIGITS = re.compile(r"-?[0-9]+")
_WORDS = re.compile(r"(\s+)")
_INT_RANGE = (-(2**63), 2**64)  # integers the readers treat as integers (stretto.logs.turns)


class RedactError(ValueError):
    """Sessions that cannot be redacted as asked; the message says why."""


def fold(text: str) -> str:
    """Lower case, character for character (so positions in the text still match)."""
    low = text.lower()
    if len(low) == len(text) and "\u03a3" not in text:  # Σ lowers by its context
        return low
    return "".join(c if len(low := c.lower()) != 1 else low for c in text)


def _split_line(line: str) -> tuple[str, str, str]:
    lead = _LEAD.match(line)
    start = lead.end() if lead else 0
    trail = _TRAIL.search(line, start)
    end = trail.start() if trail else len(line)
    return line[:start], line[start:end], line[end:]


def _split_word(word: str) -> tuple[str, str, str]:
    """A word of free text: its punctuation on either side, and the core between."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[:start], word[start:end], word[end:]


def _number_text(value: float) -> str:
    return json.dumps(value)


def dumps(value: Any, **style: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, **style)
        text.encode("utf-8")  # a lone surrogate cannot be written as UTF-8: escape it
        return text
    except UnicodeEncodeError:
        return json.dumps(value, **style)


def parse_json(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


# the census ----------------------------------------------------------------------------------


@dataclass
class Census:
    """In how many sessions each value (folded core) appears, and the names kept or hashed
    whatever their count."""

    hash_fields: frozenset[str] = frozenset()
    sessions: dict[str, int] = field(default_factory=dict)
    values: set[str] = field(default_factory=set)  # folded cores of data (not words)
    declared: set[str] = field(default_factory=set)  # what tools/list names
    forced: set[str] = field(default_factory=set)  # values of --hash-field keys, and words
    # cores of at most SHORT characters once written longer (`#W1a`): hashed everywhere
    lengthened: set[str] = field(default_factory=set)
    # values shaped like a secret or a personal identifier (stretto.logs.sensitive): hashed
    # however many sessions share them
    sensitive: set[str] = field(default_factory=set)
    _last: dict[str, int] = field(default_factory=dict)
    judged: set[str] = field(default_factory=set)  # every value core sensitive() looked at
    session: int = 0

    def add(self, core: str, data: bool = True, written: int = 0) -> None:
        """A value's core, seen in this session; `written` = its length as written (with
        its leading #s)."""
        key = fold(core)
        if not key:
            return
        if len(key) <= SHORT < written:
            self.lengthened.add(key)
        if core not in self.judged:
            self.judged.add(core)
            if sensitive(core):
                self.sensitive.add(key)
        if self._last.get(key) != self.session:
            self._last[key] = self.session
            self.sessions[key] = self.sessions.get(key, 0) + 1
        if data:
            self.values.add(key)

    def declare(self, tools_result: Any) -> None:
        """The names a tools/list answer declares: tools, schema properties, enum values."""

        def schema(node: Any) -> None:
            if isinstance(node, dict):
                if isinstance(node.get("properties"), dict):
                    self.declared.update(fold(k.strip()) for k in node["properties"])
                if isinstance(node.get("enum"), list):
                    self.declared.update(
                        fold(v.strip()) for v in node["enum"] if isinstance(v, str)
                    )
                for item in node.values():
                    schema(item)
            elif isinstance(node, list):
                for item in node:
                    schema(item)

        tools = tools_result.get("tools") if isinstance(tools_result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict):
                if isinstance(tool.get("name"), str):
                    self.declared.add(fold(tool["name"].strip()))
                schema([tool.get("inputSchema"), tool.get("outputSchema")])


class Count:
    """The walker's values, counted (the census pass): each is returned as it is."""

    def __init__(self, census: Census) -> None:
        self.census = census

    def named(self, key: str) -> bool:
        return fold(key.strip()) in self.census.hash_fields

    def string(self, value: str, forced: bool = False) -> str:
        for line in value.split("\n"):
            core = _split_line(line)[1]
            self.census.add(core, written=len(line.strip()))
            if forced and core:
                self.census.forced.add(fold(core))
                for word in core.split():
                    if word_core := _split_word(word)[1]:
                        self.census.forced.add(fold(word_core))
        return value

    def integer(self, value: int, forced: bool = False) -> int:
        self.string(str(value), forced)
        return value

    def number(self, value: float, forced: bool = False) -> float:
        self.census.add(_number_text(value), data=False)
        if forced:
            self.census.forced.add(_number_text(value))
        return value

    def text(self, value: str, words: bool = True) -> str:
        if words:
            for word in value.split():
                self.census.add(_split_word(word)[1], data=False)
        return value

    def tools(self, result: Any) -> None:
        self.census.declare(result)


# tokens ----------------------------------------------------------------------------------------


class Pseudonyms:
    """Which values are hashed, and their tokens."""

    def __init__(self, salt: str, census: Census, keep_shared: int = KEEP_SHARED) -> None:
        if not salt:
            raise RedactError("the salt is empty")
        self.salt = salt.encode("utf-8", "surrogatepass")
        self.census = census
        self.keep_shared = keep_shared
        self._hashed: dict[str, bool] = {}
        self._tokens: dict[str, str] = {}
        # Values found in free text by their first characters, longest first: the hashed
        # ones are replaced there, the kept ones kept whole (their words are not hashed, so a
        # shared name the customer typed still reads as the name in the records).
        self._known: dict[str, list[str]] = {}
        for key in census.values:
            if len(key) >= KNOWN_PREFIX and (self.hashed(key) or not self._forced_word(key)):
                self._known.setdefault(key[:KNOWN_PREFIX], []).append(key)
        for keys in self._known.values():
            keys.sort(key=lambda k: (-len(k), k))
        self._short = {  # values kept for their length
            k for k in census.values if MIN_VALUE <= len(k) <= SHORT and not self.hashed(k)
        }

    def _forced_word(self, key: str) -> bool:
        return any(fold(_split_word(w)[1]) in self.census.forced for w in key.split())

    def hashed(self, core: str) -> bool:
        known = self._hashed.get(core)
        if known is None:
            known = self._hashed[core] = self._decide(core)
        return known

    def _decide(self, core: str) -> bool:
        key = fold(core)
        if not key:
            return False
        if key in self.census.forced:
            return True
        # the census judged every value of the logs once; a flow log's values, not in it, here
        if key in self.census.sensitive or (core not in self.census.judged and sensitive(core)):
            return True  # a secret or a personal identifier is never kept, however shared
        if key in self.census.declared:
            return False
        if len(key) <= SHORT and key not in self.census.lengthened:
            return False
        return self.keep_shared == 0 or self.census.sessions.get(key, 0) < self.keep_shared

    def _digest(self, key: str, counter: int = 0) -> bytes:
        suffix = b"" if counter == 0 else b"\0%d" % counter
        return hashlib.sha256(
            self.salt + b"\0" + key.encode("utf-8", "surrogatepass") + suffix
        ).digest()

    def token(self, core: str) -> str:
        """The token of a hashed core: digits for digits (an integer's sign and a leading 0
        kept), else `h_` and 12 hex digits, upper-case `H_` when the core has capitals (its
        hex upper-cased too when the core is all capitals)."""
        token = self._tokens.get(core)
        if token is None:
            token = self._tokens[core] = self._token(core)
        return token

    def _token(self, core: str) -> str:
        key = fold(core)
        if _DIGITS.fullmatch(core):
            return self._digits(core)
        digits = self._digest(key).hex()[:HEX_DIGITS]
        if core == key:
            return f"h_{digits}"
        return f"H_{digits.upper()}" if core == core.upper() else f"H_{digits}"

    def _digits(self, core: str) -> str:
        sign, digits = ("-", core[1:]) if core.startswith("-") else ("", core)
        width = max(len(digits), NUMBER_DIGITS)
        in_range = len(digits) <= 20 and _INT_RANGE[0] <= int(core) < _INT_RANGE[1]
        for counter in range(64):
            number = int.from_bytes(self._digest(core, counter) * 2, "big")
            body = str(number)[-(width - 1) :].rjust(width - 1, "0")
            first = "0" if digits.startswith("0") and len(digits) > 1 else str(1 + number % 9)
            token = sign + first + body
            if width > 20 or (_INT_RANGE[0] <= int(token) < _INT_RANGE[1]) == in_range:
                return token
        return core  # not reached: about half of all draws are in range

    # what the walker asks of the rewrite pass (see Count for the census pass)

    def named(self, key: str) -> bool:
        return False  # what --hash-field names is in the census's forced set already

    def tools(self, result: Any) -> None:
        pass

    def line(self, line: str) -> str:
        lead, core, trail = _split_line(line)
        return lead + self.token(core) + trail if self.hashed(core) else line

    def string(self, value: str, forced: bool = False) -> str:
        """A string of data, line by line; every line of a private-key block (where
        stretto.logs.sensitive's `private key` rule finds one) hashed, whatever its count:
        its body lines alone look like nothing."""
        lines = value.split("\n")
        blocks = private_key_spans(value)
        if not blocks:
            return "\n".join(self.line(line) for line in lines)
        out, start = [], 0
        for line in lines:
            end = start + len(line)
            lead, core, trail = _split_line(line)
            in_block = any(s < end and start < e for s, e in blocks)
            out.append(lead + self.token(core) + trail if in_block and core else self.line(line))
            start = end + 1  # past the line's \n
        return "\n".join(out)

    def integer(self, value: int, forced: bool = False) -> int:
        text = str(value)
        return int(self.token(text)) if self.hashed(text) else value

    def number(self, value: float, forced: bool = False) -> float:
        """A float with its digits replaced (the readers compare no floats)."""
        text = _number_text(value)
        if not self.hashed(text):
            return value
        mantissa, e, exponent = text.partition("e")
        digits = iter(str(int.from_bytes(self._digest("float:" + text) * 2, "big")))
        out = "".join(next(digits) if ch.isdigit() else ch for ch in mantissa)
        replaced = float(out + e + exponent)
        return value if replaced in (float("inf"), float("-inf")) else replaced

    def text(self, value: str, words: bool = True) -> str:
        """Free text: every value of the records found in it replaced whole by what it became
        (a kept one only where it stands as words of its own), then (with `words`) every
        other word hashed or kept by its own count."""
        folded = fold(value)
        out: list[str] = []
        start = i = 0
        # secrets and personal identifiers, hashed whole first (a phone number is several
        # words; a value of the records found in the text never runs into one)
        spans = sensitive_spans(value) if len(value) >= 7 else []
        ends = dict(spans)
        starts = [s for s, _ in spans]
        next_span = 0
        while i < len(value):
            while next_span < len(starts) and starts[next_span] < i:
                next_span += 1
            upto = starts[next_span] if next_span < len(starts) else len(value)
            length = ends[i] - i if i in ends else self._known_at(folded, i, upto - i + 1)
            if not length:
                i += 1
                continue
            out.append(self._words(value[start:i]) if words else value[start:i])
            out.append(self._found(value[i : i + length], folded[i : i + length]))
            i = start = i + length
        out.append(self._words(value[start:]) if words else value[start:])
        return "".join(out)

    def _found(self, found: str, folded: str) -> str:
        """What a value of the records found in free text becomes: its token, followed in
        brackets by what became of the values inside it (`las vegas` holds `LAS`, a user id
        the last name) so that they are still found in the text, as the binding looks for
        them there; a kept value as it is, followed by the tokens of hashed values inside."""
        inside: list[tuple[str, bool]] = []
        i = 0
        while i < len(found):
            length = self._known_at(folded, i, len(found))
            if length:
                part = found[i : i + length]
                inside.append((self._found(part, folded[i : i + length]), self.hashed(part)))
                i += length
            else:
                i += 1
        if not self.hashed(found):
            hidden = [text for text, hashed in inside if hashed]
            return found + (f"[{' '.join(hidden)}]" if hidden else "")
        for word in found.split():  # short values (kept as they are) that are words of it
            core = _split_word(word)[1]
            if fold(core) in self._short:
                inside.append((core, False))
        shown = " ".join(text for text, _ in inside)
        return self.token(found) + (f"[{shown}]" if shown else "")

    def _known_at(self, folded: str, i: int, below: int) -> int:
        """The length of the longest value of the records at `folded[i:]` shorter than
        `below` (a kept one only between word boundaries), or 0."""
        for key in self._known.get(folded[i : i + KNOWN_PREFIX], ()):
            if len(key) < below and folded.startswith(key, i):
                end = i + len(key)
                if self.hashed(key) or (
                    (i == 0 or not folded[i - 1].isalnum())
                    and (end == len(folded) or not folded[end].isalnum())
                ):
                    return len(key)
        return 0

    def _words(self, text: str) -> str:
        pieces = _WORDS.split(text)
        for i in range(0, len(pieces), 2):  # even pieces are words, odd ones whitespace
            lead, core, trail = _split_word(pieces[i])
            if core and self.hashed(core):
                pieces[i] = lead + self.token(core) + trail
        return "".join(pieces)
