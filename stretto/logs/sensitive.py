"""Values whose shape is a secret or a personal identifier: the one rule set that the proxy's
header redaction (proxy/record/redact.py, the secrets) and `stretto redact` / `ingest --redact`
(stretto.logs.pseudonyms, secrets and personal identifiers) both apply (docs/formats.md
§1.1.1 and §11).

The secret rules are gitleaks-style: one regular expression per provider's token format,
adapted from detect-secrets' plugins (Yelp/detect-secrets 1.5, Apache-2.0: AWS, Slack,
Stripe, Twilio, SendGrid, Telegram, Mailchimp, npm, PyPI, JWT, private keys, Discord,
Square, GitHub, GitLab, OpenAI, Artifactory, IBM, basic auth) and gitleaks' rules (Anthropic,
Mailgun, Hugging Face, Shopify, DigitalOcean, Databricks, Postman, Linear, Doppler, Grafana,
New Relic, Atlassian, Google OAuth, Slack webhooks). detect-secrets itself is not imported:
its plugins import `requests` and its settings machinery (about 120 ms), more than the
proxy's whole start; the table below is plain `re`, each rule compiled on first use and only
run on a text holding its hint. (detect-secrets is a pinned test dependency:
tests/stretto/logs/test_sensitive.py holds this table to its plugins.) Besides the named
formats, a **high-entropy string** is a secret: a run of 20 or more base64 or base64url
characters with digits, an eighth or more capitals and as many small letters, switching
between the three at least 4 times in 10 characters and with 3.5 bits of entropy or more per
character (random, not CamelCase words or an id ending in a number), or of 32 or more hex
digits mixing digits and letters; an AWS secret key (40 such characters, `/` and `+` among
them) is one. A run holding `/` is judged whole, unless it starts with `/` (a path: then
each segment is), and a run a named rule matched in part is left to that rule.

Personal identifiers: email addresses, phone numbers (international `+…`, and North
American `(555) 123-4567` / `555-123-4567`), payment card numbers (13 to 19 digits, spaced or
not, passing the Luhn check), IBANs (passing the mod-97 check), IPv4 and IPv6 addresses, and
US social security numbers.

`secret_spans(text)` and `personal_spans(text)` give where they are (`private_key_spans(text)`
where the private-key blocks are); `sensitive(text)` whether a text holds any;
`redact_secrets(text, mark)` replaces each secret.
"""

from __future__ import annotations

import math
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

# (name, hints, expression): the rule runs on a text holding one of its hints (None: on
# every text; a hint in lower case is looked for in the text lower-cased). Each expression is
# compiled on first use, with re.DOTALL; the boundaries keep a rule from matching inside a
# longer word.
_B = r"(?<![A-Za-z0-9_])"  # no word character before
_E = r"(?![A-Za-z0-9_])"  # none after
# A PEM private-key block (RSA, EC, ENCRYPTED, OPENSSH, PGP's `PRIVATE KEY BLOCK`, ...): BEGIN
# through its END, or to the end of the text when the END is missing.
_PRIVATE_KEY_HINT = "PRIVATE KEY"
_PRIVATE_KEY = (r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)")  # fmt: skip
Rule = tuple[str, tuple[str, ...] | None, str]
SECRET_RULES: tuple[Rule, ...] = (
    ("private key", (_PRIVATE_KEY_HINT,), _PRIVATE_KEY),
    ("github", ("gh", "github_pat_"),
     _B + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})" + _E),
    ("gitlab", ("gl",), _B + r"gl(?:pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,}" + _E),
    ("slack token", ("xox", "xapp-"),
     _B + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,})" + _E),
    ("slack webhook", ("hooks.slack.com/",),
     r"(?<=hooks\.slack\.com/)(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{8,}"),
    ("discord webhook", ("/api/webhooks/",), r"(?<=/api/webhooks/)[0-9]{6,}/[A-Za-z0-9_-]{20,}"),
    ("aws access key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
     _B + r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}" + _E),
    # sk-…, sk-proj-…, sk-ant-api03-…: a digit in the random part keeps sk-learn-… out
    ("openai or anthropic", ("sk-",), _B + r"sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}" + _E),
    ("stripe", ("_live_", "_test_", "whsec_"),
     _B + r"(?:(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})" + _E),
    ("google", ("AIza", "ya29.", "GOCSPX-"),
     _B + r"(?:AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20,}|GOCSPX-[A-Za-z0-9_-]{20,})"),
    ("jwt", ("eyJ",), _B + r"eyJ[A-Za-z0-9_=-]{8,}\.eyJ[A-Za-z0-9_=-]{8,}\.[A-Za-z0-9_=+/-]*"),
    ("twilio", ("SK", "AC"), _B + r"(?:SK|AC)[0-9a-fA-F]{32}" + _E),
    ("sendgrid", ("SG.",), _B + r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}" + _E),
    ("telegram bot", (":",), r"(?<![0-9])[0-9]{8,10}:[A-Za-z0-9_-]{35}" + _E),
    ("mailgun", ("key-",), _B + r"key-[0-9a-zA-Z]{32}" + _E),
    ("mailchimp", ("-us",), _B + r"[0-9a-f]{32}-us[0-9]{1,2}" + _E),
    ("npm", ("npm_",), _B + r"npm_[A-Za-z0-9]{36}" + _E),
    ("pypi", ("pypi-",), _B + r"pypi-AgE[A-Za-z0-9_-]{50,}" + _E),
    ("hugging face", ("hf_",), _B + r"hf_[A-Za-z0-9]{30,}" + _E),
    ("discord bot", (".",),
     _B + r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}" + _E),
    ("square", ("sq0", "EAAA"),
     _B + r"(?:sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}|EAAA[A-Za-z0-9_-]{60})" + _E),
    ("shopify", ("shp",), _B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E),
    ("digitalocean", ("_v1_",), _B + r"do[por]_v1_[a-f0-9]{64}" + _E),
    ("databricks", ("dapi",), _B + r"dapi[a-f0-9]{32}(?:-[0-9])?" + _E),
    ("artifactory", ("AKC",), _B + r"AKC[a-zA-Z0-9]{10,}" + _E),
    ("postman", ("PMAK-",), _B + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _E),
    ("linear", ("lin_api_",), _B + r"lin_api_[A-Za-z0-9]{40}" + _E),
    ("doppler", ("dp.",), _B + r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}" + _E),
    ("grafana", ("glsa_", "glc_"),
     _B + r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})"),
    ("new relic", ("NRAK-", "NRII-", "NRJS-"), _B + r"NR(?:AK|II|JS)-[A-Za-z0-9]{20,}" + _E),
    ("atlassian", ("ATATT3",), _B + r"ATATT3[A-Za-z0-9_=-]{50,}"),
    ("basic auth", ("://",), r"(?<=://)[^/\s:@\"'<>]+:[^/\s@\"'<>]+(?=@)"),
    ("bearer", ("bearer",), r"(?i:bearer)\s+[A-Za-z0-9._~+/=-]{16,}"),
)  # fmt: skip
PERSONAL_RULES: tuple[Rule, ...] = (
    ("email", ("@",), r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
     r"\.[A-Za-z]{2,}(?![A-Za-z0-9-])"),
    ("phone", None, r"(?<![\w+])(?:\+[0-9]{1,3}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{2,5}"
     r"(?:[ .-]?[0-9]{2,5}){1,4}|\([0-9]{3}\)[ ]?[0-9]{3}[ .-][0-9]{4}"
     r"|[0-9]{3}[.-][0-9]{3}[.-][0-9]{4})(?![\w])"),
    ("card", None, r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])"),
    ("iban", None, r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?"
     r"(?![A-Za-z0-9])"),
    ("ipv4", (".",), r"(?<![0-9.])(?:(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}"
     r"(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?![0-9]|\.[0-9])"),
    ("ipv6", ("::", ":"),
     r"(?<![0-9A-Za-z:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Za-z:])"),
    ("ssn", ("-",), r"(?<![0-9-])(?!000|666|9[0-9][0-9])[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}"
     r"(?![0-9-])"),
)  # fmt: skip

# further tests before a rule's expression runs, for hints that are common characters
_ALSO = {
    "discord bot": lambda text: len(text) >= 59 and text.count(".") >= 2,
    "telegram bot": lambda text: len(text) >= 44,
    "twilio": lambda text: len(text) >= 34,
}
# A high-entropy string is looked for without an expression (so a plain argument costs no
# `re`): runs of these characters, 20 or more, `=` padding after them allowed.
_RUN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
HIGH_ENTROPY = "high entropy"
MIN_RUN = 20

_compiled: dict[str, re.Pattern[str]] = {}


def _pattern(expression: str) -> re.Pattern[str]:
    found = _compiled.get(expression)
    if found is None:
        import re  # proxy: re on a rule's first use, not at start

        found = _compiled[expression] = re.compile(expression, re.DOTALL)
    return found


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts: dict[str, int] = {}
    for char in text:
        counts[char] = counts.get(char, 0) + 1
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _kind(char: str) -> int:
    return 0 if char.isdigit() else 1 if char.isupper() else 2 if char.islower() else 3


def _high_entropy(candidate: str) -> bool:
    """Whether a run of base64 (or hex) characters is random: a key, not words or a path."""
    body = candidate.rstrip("=")
    if len(body) >= 32 and all(c in "0123456789abcdefABCDEF" for c in body):
        has_digit = any(c.isdigit() for c in body)
        return has_digit and any(c.isalpha() for c in body) and entropy(body) >= 3.0
    core = body.replace("/", "").replace("+", "").replace("_", "").replace("-", "")
    if len(core) < 20 or not any(c.isdigit() for c in core):
        return False
    upper = sum(c.isupper() for c in core)
    lower = sum(c.islower() for c in core)
    if upper < len(core) / 8 or lower < len(core) / 8:
        return False
    # random text switches between upper, lower and digits about twice in three characters;
    # CamelCase words and ids with a number at the end do so rarely
    switches = sum(_kind(a) != _kind(b) for a, b in zip(core, core[1:], strict=False))
    return switches >= 0.4 * (len(core) - 1) and entropy(core) >= 3.5


def _runs(text: str) -> list[tuple[int, int]]:
    """(start, end) of each run of 20 or more base64 characters, with up to two `=` of
    padding after it."""
    if "re" in sys.modules:  # as good as loaded: the expression is faster than the loop
        runs = _pattern(r"[A-Za-z0-9+/_-]{20,}={0,2}").finditer(text)
        return [(m.start(), m.end()) for m in runs]
    out, start, n = [], -1, len(text)
    for i in range(n + 1):
        if i < n and text[i] in _RUN:
            if start < 0:
                start = i
            continue
        if start >= 0:
            end = i
            while end < n and end - i < 2 and text[end] == "=":
                end += 1
            if end - start >= MIN_RUN:
                out.append((start, end))
            start = -1
    return out


def _random(candidate: str) -> list[tuple[int, int]]:
    """The random parts of a run, relative to it: the whole (a key; an AWS secret key has `/`
    in it) unless it starts with `/`, else each `/`-separated part that is (a path's
    segment)."""
    if not candidate.startswith("/") and _high_entropy(candidate):
        return [(0, len(candidate))]
    if "/" not in candidate:
        return []
    out, start = [], 0
    for part in candidate.split("/"):
        if len(part) >= MIN_RUN and _high_entropy(part):
            out.append((start, start + len(part)))
        start += len(part) + 1
    return out


def _luhn(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = int(char)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def _ipv6(text: str) -> bool:
    import ipaddress  # proxy: only an IPv6-like text needs it

    if text.count(":") < 2 or sum(c.isalnum() for c in text) < 2:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _phone(text: str) -> bool:
    return 8 <= sum(c.isdigit() for c in text) <= 15


def _checked(name: str, found: str) -> bool:
    """Whether a match of the rule `name` is what the rule means (its checksum, its entropy)."""
    if name == "card":
        digits = found.replace(" ", "").replace("-", "")
        return 13 <= len(digits) <= 19 and _luhn(digits)
    if name == "iban":
        return _iban(found)
    if name == "ipv6":
        return _ipv6(found)
    if name == "phone":
        return _phone(found)
    return True


def _spans(rules: tuple[Rule, ...], text: str) -> list[tuple[int, int, str]]:
    out = []
    lowered = None
    for name, hints, expression in rules:
        if hints is not None:
            if name == "bearer":
                lowered = text.lower() if lowered is None else lowered
                if not any(hint in lowered for hint in hints):
                    continue
            elif not any(hint in text for hint in hints):
                continue
        if name in _ALSO and not _ALSO[name](text):
            continue
        pattern, pos = _pattern(expression), 0
        while (match := pattern.search(text, pos)) is not None:
            if match.end() > match.start() and _checked(name, match.group()):
                out.append((match.start(), match.end(), name))
                pos = match.end()
            else:  # not what the rule means; a match may still start inside it
                pos = match.start() + 1
    if rules is SECRET_RULES:  # a run that a named rule matched in part is that rule's
        named = list(out)
        for start, end in _runs(text):
            for s, e in _random(text[start:end]):
                s, e = start + s, start + e
                if not any(s < n_end and n_start < e for n_start, n_end, _ in named):
                    out.append((s, e, HIGH_ENTROPY))
    out.sort()
    merged: list[tuple[int, int, str]] = []
    for start, end, name in out:  # overlapping spans are one (the first rule's name)
        if merged and start < merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, name))
    return merged


def secret_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, rule name) of each secret in `text`, in order, not overlapping."""
    return _spans(SECRET_RULES, text)


def personal_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, rule name) of each personal identifier in `text`."""
    return _spans(PERSONAL_RULES, text)


def private_key_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each PEM private-key block in `text`, by the `private key` rule: from
    its BEGIN marker through its END marker, or to the end of the text when the END is
    missing. `stretto redact` hashes every line one touches (stretto.logs.pseudonyms)."""
    if _PRIVATE_KEY_HINT not in text:
        return []
    return [match.span() for match in _pattern(_PRIVATE_KEY).finditer(text)]


def sensitive_spans(text: str) -> list[tuple[int, int]]:
    """Where `text` holds a secret or a personal identifier: sorted, overlaps merged."""
    spans = sorted((s, e) for s, e, _ in secret_spans(text) + personal_spans(text))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def sensitive(text: str) -> bool:
    """Whether `text` holds a secret or a personal identifier anywhere."""
    if len(text) < 7:  # the shortest rule (an IPv4 address, 1.2.3.4) has 7 characters
        return False
    return bool(secret_spans(text) or personal_spans(text))


def redact_secrets(text: str, mark: str) -> str:
    """`text` with each secret replaced by `mark`."""
    spans = secret_spans(text)
    if not spans:
        return text
    out, last = [], 0
    for start, end, _ in spans:
        out.append(text[last:start])
        out.append(mark)
        last = end
    out.append(text[last:])
    return "".join(out)
