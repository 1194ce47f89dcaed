"""The rule set of secrets and personal identifiers (stretto.logs.sensitive), the one the
proxy's header redaction and `stretto redact` share (issue 40, items 2 and 7): it finds what
detect-secrets' named plugins find in the test shapes, and more; it leaves paths, ids and
words alone; and a plain command line costs the proxy no `re`."""

from __future__ import annotations

import subprocess

import pytest
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import transient_settings

from stretto.logs.sensitive import (
    personal_spans,
    private_key_spans,
    redact_secrets,
    secret_spans,
    sensitive,
)
from tests.conftest import PYTHON, ROOT
from tests.secret_shapes import PERSONAL, SECRETS

# detect-secrets' plugins that name a provider's format (its entropy and keyword plugins flag
# any long run of letters outside the quotes of source code, so they say nothing here)
UNNAMED = {"Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector", "IPPublicDetector"}
NAMED_PLUGINS = sorted(
    plugin.__name__
    for plugin in get_mapping_from_secret_type_to_class().values()
    if plugin.__name__ not in UNNAMED
)

BENIGN = [
    "/home/me/notes",
    "/tmp/pytest-of-root/pytest-12/test_a_served0/notes/note-10.md",
    "C:\\Users\\me\\data",
    "@modelcontextprotocol/server-filesystem",
    "/models/sk-learn-regressors-and-classifiers",
    "src/components/UserProfile2024/index",
    "UserProfileSettings2024Backup",
    "ProductCatalogV2Item12345",
    "mia_garcia_4516",
    "paypal_9497703",
    "#W5490111",
    "TCK-99812-ABCDEF-20240101",
    "550e8400-e29b-41d4-a716-446655440000",
    "2026-12-06T20:11:56Z",
    "12:30:45",
    "v1.2.3",
    "std::vector",
    "localhost:8080",
    "--max-tokens 4096",
    "Order #W5490111 shipped to 046229",
    "The quick brown fox jumps over the lazy dog",
    "4111 1111 1111 1112",  # fails the Luhn check
    "GB82 WEST 1234 5698 7654 33",  # fails mod 97
    "555-0132",  # too few digits for a phone
]


def detect_secrets_names(text: str) -> set[str]:
    with transient_settings({"plugins_used": [{"name": name} for name in NAMED_PLUGINS]}):
        return {found.type for found in scan_line(text)}


def test_every_shape_detect_secrets_names_is_found_and_more() -> None:
    named_by_them = []
    for name, value, leaks in SECRETS:
        line = value.replace("\n", " ")
        if detect_secrets_names(line):
            named_by_them.append(name)
        hidden = redact_secrets(value, "<R>")
        assert [leak for leak in leaks if leak in hidden] == [], (name, hidden)
    # what detect-secrets' named plugins know of the 36 is a part of what the rule set knows
    # (the rest are providers it has no plugin for, and AWS secret keys it finds only beside
    # a keyword)
    assert 15 <= len(named_by_them) < len(SECRETS)


@pytest.mark.parametrize("text", BENIGN)
def test_paths_ids_words_and_near_misses_are_not_sensitive(text: str) -> None:
    assert not sensitive(text), (secret_spans(text), personal_spans(text))


@pytest.mark.parametrize(("name", "value", "leaks"), PERSONAL, ids=[n for n, _, _ in PERSONAL])
def test_each_personal_identifier_is_found_whole_in_text(name: str, value: str, leaks) -> None:
    text = f"reach me at {value}, thanks"
    assert personal_spans(text) == [(12, 12 + len(value), personal_spans(value)[0][2])]
    assert secret_spans(text) == []  # a personal identifier, not a secret


PEM_KINDS = [
    "PRIVATE KEY",
    "RSA PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
]


@pytest.mark.parametrize("kind", PEM_KINDS)
def test_a_private_key_block_runs_from_begin_to_its_end_or_the_end_of_the_text(kind: str) -> None:
    block = f"-----BEGIN {kind}-----\nMIIBOgIBAAJBAKj34\nGkxFhD90vcNLYL\n-----END {kind}-----"
    text = f"my key: {block} (keep it safe)\n{block}\nand no more"
    first = text.index("-----BEGIN")
    second = text.index("-----BEGIN", first + 1)
    assert private_key_spans(text) == [
        (first, first + len(block)),
        (second, second + len(block)),
    ]
    cut = "my key:\n" + block.rsplit("\n", 1)[0]  # no END: to the end of the text
    assert private_key_spans(cut) == [(8, len(cut))]
    # the spans are the `private key` rule's: what the proxy's redaction replaces
    assert [(s, e) for s, e, name in secret_spans(text) if name == "private key"] == [
        (first, first + len(block)),
        (second, second + len(block)),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN CERTIFICATE-----\nMIIBOgIBAAJBAKj34\n-----END CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----\nMIIBOgIBAAJBAKj34\n-----END PUBLIC KEY-----",
        "put your PRIVATE KEY between -----BEGIN and -----END lines",
        "",
    ],
)
def test_other_pem_blocks_and_prose_hold_no_private_key_block(text: str) -> None:
    assert private_key_spans(text) == []


def test_a_plain_command_costs_the_proxy_no_re() -> None:
    code = (
        "import sys\nfrom proxy.record.redact import redact_command\n"
        "print(redact_command(sys.argv[1:])[-1], 're' in sys.modules)"
    )
    plain = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]
    done = subprocess.run(
        [PYTHON, "-c", code, *plain], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["/home/me/notes", "False"]
    secret = [*plain, "--value", "p8P69UA8FRzR7wfH/4whsYMYsvNdzg+uxx2uIjYP"]
    done = subprocess.run(
        [PYTHON, "-c", code, *secret], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["<redacted>", "False"]  # a random run: found without `re`
