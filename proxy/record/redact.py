"""Hide credentials in what the session-log header records (docs/formats.md §1.1).

The header keeps the server command (or upstream URL) so a reader knows what was wrapped;
it must never keep the secrets people pass on command lines. What is hidden:

- the value of an option named like a secret (`--api-key X`, `--pat=X`, `-p X`, `-pX`, also
  inside an argument that is a command line, `sh -c '... --token X'`), of an assignment
  (`OPENAI_API_KEY=X`) and of a header (`X-Api-Key: X`; `Bearer` is kept);
- in URLs, the userinfo (`user:password@`) and every query value (and `a=b` fragments);
- `Password=` / `Pwd=` / `AccountKey=` ... in connection strings (`;` or space separated);
- in JSON-looking arguments, the value of every key named like a secret;
- anywhere, values shaped like a secret by stretto.logs.sensitive, the rule set `stretto
  redact` uses too: well-known token formats (`sk-…`, `ghp_…`, `xoxb-…`, `AKIA…`, Twilio's
  `SK…`, SendGrid's `SG.…`, Telegram bot tokens, Mailgun's `key-…`, JWTs, private-key
  blocks, Slack webhook paths, ...) and high-entropy strings (an AWS secret key).

Runs once per session before the first byte is forwarded, so the common argument (a path, a
plain flag) costs a few string tests: `re` is imported and an expression compiled only when
an argument needs one (each secret rule only when its hint is in the argument), `json` only
for an argument that looks like JSON.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

REDACTED = "<redacted>"

# A word of a name (split at `-`, `_`, `.`, spaces and camelCase) is secret when it contains
# one of these, or is one of _SECRET_WORDS, or contains `auth` (but `author`, unless it is
# `authorization`).
_SECRET_PARTS = ("key", "token", "secret", "passw", "credential", "cookie", "signature")
_SECRET_WORDS = frozenset(
    {"pwd", "pw", "pass", "pat", "pats", "sk", "sig", "creds", "cred", "bearer", "otp", "dsn"}
)
# Words that contain a secret part but name none.
_NOT_SECRET_WORDS = frozenset({"tokenizer", "tokenizers", "keyboard", "author", "authors"})
# A name that counts or bounds (`--max-tokens 100`, `--key-limit 5`) holds no secret.
_COUNTING_WORDS = frozenset({"max", "min", "num", "limit", "count", "size", "len", "length"})

_SHORTEST_SECRET = 12  # no rule of stretto.logs.sensitive matches a shorter text
_SCHEME_HINTS = ("bearer", "basic ", "token ")

_compiled: dict[str, re.Pattern[str]] = {}
_PATTERNS = {
    # `Bearer X`, `Basic X`, `Token X` anywhere in an argument: the scheme stays.
    "scheme": r"\b(Bearer|Basic|Token)\s+[^\s,;\"']+",
    # scheme://[userinfo@]authority[path][?query][#fragment]
    "url": r"([A-Za-z][A-Za-z0-9+.-]*://)(?:([^/?#\s\"'<>]*)@)?([^\s\"'<>]*)",
    # name=value pairs in a connection string separated by `;` (ADO.NET, ODBC, Azure)
    "semicolon_pair": r"(^|;)(\s*)([A-Za-z][\w .-]*?)(\s*=\s*)"
    r"(\{[^}]*\}?|\"[^\"]*\"?|'[^']*'?|[^;]*)",
    # name=value pairs separated by spaces or `&` (libpq keyword strings, query-like text)
    "spaced_pair": r"(?<![\w.-])([A-Za-z][\w.-]*)(\s*=\s*)('[^']*'?|\"[^\"]*\"?|[^\s&,]*)",
    # "name": value in JSON-like text that does not parse (single quotes, unquoted keys)
    "json_pair": r"([\"']?)([A-Za-z_][\w.-]*)\1(\s*:\s*)(\"(?:[^\"\\]|\\.)*\"?|'(?:[^'\\]|\\.)*'?"
    r"|[^,}\]\s]+)",
    # `--api-key X` inside one argument that is itself a command line (`sh -c '...'`)
    "inline_option": r"(?<!\S)(--?[A-Za-z][\w.-]*)(\s+)('[^']*'|\"[^\"]*\"|[^\s-]\S*)",
    "header": r"^\s*([A-Za-z0-9_-]+)\s*:\s*(.*)$",
    "assignment": r"^(-{0,2})([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$",
    "camel": r"[a-z0-9][A-Z]",
}


def _pattern(name: str) -> re.Pattern[str]:
    found = _compiled.get(name)
    if found is None:
        import re  # proxy start-up: loaded with the first pattern a value needs

        found = _compiled[name] = re.compile(_PATTERNS[name], re.DOTALL)
    return found


def _words(name: str) -> list[str]:
    if any(c.isupper() for c in name) and any(c.islower() for c in name):
        name = _pattern("camel").sub(lambda m: m.group(0)[0] + " " + m.group(0)[1], name)
    for sep in "-_.:/":
        name = name.replace(sep, " ")
    return name.lower().split()


def is_secret_name(name: str) -> bool:
    """Whether an option, variable, header, query or JSON key named so holds a secret."""
    words = _words(name)
    if _COUNTING_WORDS.intersection(words):
        return False
    for word in words:
        if word in _NOT_SECRET_WORDS:
            continue
        if word in _SECRET_WORDS or any(part in word for part in _SECRET_PARTS):
            return True
        if "auth" in word and ("author" not in word or "authoriz" in word):
            return True
    return False


def redact_command(command: list[str]) -> list[str]:
    """The command with every credential-looking value replaced by `<redacted>`."""
    out: list[str] = []
    secret_follows = False
    for arg in command:
        if secret_follows and not arg.startswith("-"):
            out.append(REDACTED)
            secret_follows = False
            continue
        secret_follows = _takes_a_secret(arg)
        out.append(arg if secret_follows else redact_argument(arg))
    return out


def _takes_a_secret(arg: str) -> bool:
    """`--api-key` or `-p`: an option whose next argument is its (secret) value."""
    if not arg.startswith("-") or "=" in arg or " " in arg:
        return False
    name = arg.lstrip("-")
    return arg == "-p" or (bool(name) and is_secret_name(name))


def redact_argument(arg: str) -> str:
    """One argument with its secrets hidden (any value after it is not considered)."""
    if arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2:
        return "-p=" + REDACTED if arg[2] == "=" else "-p" + REDACTED  # mysql's -pSECRET
    if ";" in arg and "=" in arg:
        return redact_text(arg)  # a connection string: each pair judged by its own name
    if "=" in arg and "://" not in arg.partition("=")[0]:
        assignment = _pattern("assignment").match(arg)
        if assignment:
            dashes, name, value = assignment.groups()
            if is_secret_name(name):
                return f"{dashes}{name}={REDACTED}"
            return f"{dashes}{name}={redact_text(value)}"
    if ":" in arg and "://" not in arg and not arg.lstrip().startswith(("{", "[")):
        header = _pattern("header").match(arg)
        if header and is_secret_name(header.group(1)):
            scheme = _pattern("scheme").match(header.group(2))
            kept = f"{scheme.group(1)} {REDACTED}" if scheme else REDACTED
            return f"{header.group(1)}: {kept}"
    return redact_text(arg)


def redact_text(text: str) -> str:
    """Free text (a value, a JSON document, a URL, a connection string) with secrets hidden."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        import json  # proxy start-up: loaded with the first JSON argument

        try:
            document = json.loads(stripped)
        except (ValueError, RecursionError):
            text = _pattern("json_pair").sub(_redact_json_pair, text)
        else:
            cleaned = _redact_json(document)
            if cleaned != document:
                return json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))
            return text  # nothing secret: keep the argument as it was written
    if "://" in text:
        text = _pattern("url").sub(_redact_url_match, text)
    if "=" in text:
        if ";" in text:
            text = _pattern("semicolon_pair").sub(_redact_semicolon_pair, text)
        else:
            text = _pattern("spaced_pair").sub(_redact_spaced_pair, text)
    if " -" in text:
        text = _pattern("inline_option").sub(_redact_inline_option, text)
    lowered = text.lower()
    if any(hint in lowered for hint in _SCHEME_HINTS):
        text = _pattern("scheme").sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    if len(text) < _SHORTEST_SECRET:
        return text
    # the rule set `stretto redact` uses; proxy start-up: loaded with the first long value
    from stretto.logs.sensitive import redact_secrets

    return redact_secrets(text, REDACTED)


def redact_url(url: str) -> str:
    """The URL without its userinfo and with every query value hidden."""
    return redact_text(url)


def _redact_url_match(match: re.Match[str]) -> str:
    scheme, userinfo, rest = match.group(1), match.group(2), match.group(3)
    authority_and_path, _, fragment = rest.partition("#")
    before_query, question, query = authority_and_path.partition("?")
    out = scheme + (f"{REDACTED}@" if userinfo is not None else "") + before_query
    if question:
        out += "?" + _redact_query(query)
    if fragment or rest.endswith("#"):
        out += "#" + (_redact_query(fragment) if "=" in fragment else fragment)
    return out


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        name, equals, _ = pair.partition("=")
        pairs.append(f"{name}={REDACTED}" if equals else pair)
    return "&".join(pairs)


def _redact_semicolon_pair(match: re.Match[str]) -> str:
    start, space, name, equals, value = match.groups()
    if is_secret_name(name):
        value = REDACTED
    elif "://" in value:
        value = _pattern("url").sub(_redact_url_match, value)
    return f"{start}{space}{name}{equals}{value}"


def _redact_spaced_pair(match: re.Match[str]) -> str:
    name, equals, value = match.groups()
    if is_secret_name(name) and not value.startswith(REDACTED):  # a URL's, already hidden
        value = REDACTED
    return f"{name}{equals}{value}"


def _redact_inline_option(match: re.Match[str]) -> str:
    option, space, value = match.groups()
    if option == "-p" or is_secret_name(option.lstrip("-")):
        value = REDACTED
    return f"{option}{space}{value}"


def _redact_json_pair(match: re.Match[str]) -> str:
    quote, name, colon, value = match.groups()
    if not is_secret_name(name):
        return match.group(0)
    return f'{quote}{name}{quote}{colon}"{REDACTED}"'


def _redact_json(value: object) -> object:
    if isinstance(value, dict):
        # A secret key's value goes whole (an object too); null, "" and flags say nothing.
        return {
            key: REDACTED
            if is_secret_name(key) and item not in (None, "") and not isinstance(item, bool)
            else _redact_json(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact_json(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
