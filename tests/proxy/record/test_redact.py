"""Credential-looking values never reach the log header; paths and plain flags do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from proxy.record.redact import is_secret_name, redact_command, redact_url
from stretto.logs.sessionlog import read_session_log
from tests.conftest import echo_server, proxy
from tests.secret_shapes import SECRETS

OPENAI = "sk-proj-4fG7hK2mN9pQ3rS5tV8wX1yZ6aB0cD"
GITHUB = "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"
GITHUB_FINE = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
SLACK_BOT = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_USER = "xoxp-123456789012-123456789012-123456789012-abcdef0123456789"
AWS = "AKIAIOSFODNN7EXAMPLE"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
GOOGLE = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
GITLAB = "glpat-x1Y2z3A4b5C6d7E8f9G0"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"

# (arguments as given, the secret in them that must not survive)
SECRET_SHAPES = [
    (["--api-key", "s01"], "s01"),
    (["--api-key=s02"], "s02"),
    (["--token", "s03"], "s03"),
    (["--token=s04"], "s04"),
    (["GITHUB_TOKEN=s05"], "s05"),
    (["-H", "Authorization: Bearer s06"], "s06"),
    (["--password", "s07"], "s07"),
    (["-p", "s08"], "s08"),
    (["-ps09"], "s09"),
    (["-p=s10"], "s10"),
    (["--key", "s11"], "s11"),
    (["--openai-key", "s12"], "s12"),
    (["--pat", "s13"], "s13"),
    (["--sk", "s14"], "s14"),
    (["--pat=s15"], "s15"),
    (["--client-secret", "s16"], "s16"),
    (["--auth-token=s17"], "s17"),
    (["--credentials", "s18"], "s18"),
    (["--db-password", "s19"], "s19"),
    (["--accessKey", "s20"], "s20"),
    (["--authorization", "s21"], "s21"),
    (["OPENAI_API_KEY=s22"], "s22"),
    (["PGPASSWORD=s23"], "s23"),
    (["X-Api-Key: s24"], "s24"),
    (["https://api.example.org/mcp?key=s25"], "s25"),
    (["https://api.example.org/mcp?db=main&access_token=s26"], "s26"),
    (["https://api.example.org/mcp?k=s27"], "s27"),  # any query value, whatever its name
    (["https://me:s28@api.example.org/mcp"], "s28"),
    (["postgres://s29user:s29@db:5432/app"], "s29"),
    (["--url", "https://api.example.org/cb#access_token=s30"], "s30"),
    (["--dsn=mysql://root:s31@localhost/app"], "s31"),
    (["Server=db;Database=app;User Id=u;Password=s32;"], "s32"),
    (["Driver={ODBC 18};Server=db;Uid=u;Pwd={s33};"], "s33"),
    (["--connection", "Server=db;Password = s34 ;Encrypt=true"], "s34"),
    (["host=db user=u password=s35 dbname=app"], "s35"),
    (["DefaultEndpointsProtocol=https;AccountName=a;AccountKey=s36+/==;EndpointSuffix=x"], "s36"),
    (['{"apiKey":"s37"}'], "s37"),
    (['{"server": {"auth": {"user": "u", "password": "s38"}}}'], "s38"),
    (['--config={"secret": "s39", "port": 1}'], "s39"),
    (["{apiKey: 's40', port: 1}"], "s40"),  # JSON-looking, not JSON
    (['{"db": "postgres://u:s41@h/db"}'], "s41"),
    ([OPENAI], OPENAI),
    (["--header", f"x-upstream: {GITHUB}"], GITHUB),
    ([f"--config-value={GITHUB_FINE}"], GITHUB_FINE),
    ([SLACK_BOT], SLACK_BOT),
    (["--slack", SLACK_USER], SLACK_USER),
    (["--aws", AWS], AWS),
    ([JWT], JWT),
    (["--header=Authorization: Bearer s49"], "s49"),
    (["curl-like", "Bearer s50"], "s50"),
    ([GOOGLE], GOOGLE),
    ([GITLAB], GITLAB),
    ([STRIPE], STRIPE),
    ([PEM], "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    (["-c", "python server.py --api-key s55 --port 80"], "s55"),  # sh -c '...'
    (["-c", "node srv --token 's56 quoted' -v"], "s56 quoted"),
]

# Arguments that hold no secret and are kept exactly.
KEPT = [
    "/home/me/notes",
    "./server.py",
    "C:\\Users\\me\\data",
    "@modelcontextprotocol/server-filesystem",
    "-y",
    "-v",
    "--verbose",
    "--port",
    "8080",
    "--path",
    "/srv/data",
    "--pattern",
    "*.md",
    "--author",
    "Ann Example",
    "--max-tokens",
    "4096",
    "--tokenizer",
    "gpt2",
    "--keep-alive",
    "30",
    "--passthrough",
    "/srv/pass",
    "DEBUG=1",
    "--db=demo",
    "https://api.example.org/mcp",
    "/models/sk-learn-regressors-and-classifiers",
    "--task",
    "sk-short",
    '{"db": "demo", "limit": 5}',
    "localhost:8080",
]


@pytest.mark.parametrize(("args", "secret"), SECRET_SHAPES, ids=[s for _, s in SECRET_SHAPES])
def test_every_secret_shape_is_hidden(args: list[str], secret: str) -> None:
    redacted = redact_command(["srv", *args])
    assert secret not in json.dumps(redacted), redacted
    assert "<redacted>" in json.dumps(redacted)
    assert redacted[0] == "srv" and len(redacted) == len(args) + 1


# Issue 40, item 7: shapes the header kept before the proxy used stretto.logs.sensitive.
MISSED_BEFORE = {
    "aws secret key": ["--aws", "p8P69UA8FRzR7wfH/4whsYMYsvNdzg+uxx2uIjYP"],
    "slack webhook": ["--notify", "https://hooks.slack.com/services/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"],
    "twilio": ["--twilio", "SKb3215bab36cbd43af1f47c12f020d4d5"],
    "sendgrid": ["--mail", "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"],
    "telegram bot": ["--bot", "523984897:AA0KYj074SwpTMTEEp_qav15nvoiXJUCDNN"],
    "mailgun": ["--mailgun", "key-16ee0d81b6d2ee25cc38fad6d2d812a3"],
}  # fmt: skip


@pytest.mark.parametrize("name", list(MISSED_BEFORE))
def test_the_shapes_the_header_used_to_keep_are_hidden(name: str) -> None:
    option, value = MISSED_BEFORE[name]
    redacted = redact_command(["srv", option, value])
    assert redacted[:2] == ["srv", option] and "<redacted>" in redacted[2]
    secret = value.rsplit("/services/", 1)[-1]
    assert secret not in json.dumps(redacted), redacted


@pytest.mark.parametrize(("name", "value", "leaks"), SECRETS, ids=[n for n, _, _ in SECRETS])
def test_every_secret_of_the_shared_rule_set_is_hidden(name: str, value: str, leaks) -> None:
    """The same 36 shapes `stretto redact` never keeps (tests/stretto/logs/test_redact.py), as a
    positional argument and as an option's value."""
    for args in (["srv", value], ["srv", f"--value={value}"]):
        redacted = json.dumps(redact_command(args))
        assert [leak for leak in leaks if json.dumps(leak)[1:-1] in redacted] == [], redacted


def test_a_slack_webhook_upstream_is_recorded_without_its_path() -> None:
    url = "https://hooks.slack.com/services/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"
    assert redact_url(url) == "https://hooks.slack.com/<redacted>"


def test_paths_plain_flags_and_harmless_values_are_kept() -> None:
    assert redact_command(["srv", *KEPT]) == ["srv", *KEPT]


def test_what_stays_around_a_secret() -> None:
    assert redact_command(
        [
            "srv",
            "--api-key",
            "K",
            "--token=T",
            "GITHUB_TOKEN=G",
            "-H",
            "Authorization: Bearer B",
            "--port",
            "8080",
            "-p",
            "P",
            "https://u:p@h.example/x?db=main&key=k#frag",
            "Server=db;Password=pw;Database=app",
            '{"apiKey": "a", "port": 1}',
        ]
    ) == [
        "srv",
        "--api-key",
        "<redacted>",
        "--token=<redacted>",
        "GITHUB_TOKEN=<redacted>",
        "-H",
        "Authorization: Bearer <redacted>",
        "--port",
        "8080",
        "-p",
        "<redacted>",
        "https://<redacted>@h.example/x?db=<redacted>&key=<redacted>#frag",
        "Server=db;Password=<redacted>;Database=app",
        '{"apiKey":"<redacted>","port":1}',
    ]


def test_a_secret_option_followed_by_another_option_hides_nothing_else() -> None:
    assert redact_command(["srv", "--token", "--verbose"]) == ["srv", "--token", "--verbose"]


def test_urls_lose_userinfo_and_query_values() -> None:
    assert redact_url("https://me:pw@example.org:8443/mcp?api_key=abc&x=1") == (
        "https://<redacted>@example.org:8443/mcp?api_key=<redacted>&x=<redacted>"
    )
    assert redact_command(["srv", "--url=https://u:p@h/x"]) == [
        "srv",
        "--url=https://<redacted>@h/x",
    ]
    assert redact_url("not a url") == "not a url"


def test_secret_names() -> None:
    for name in ("apiKey", "X-Api-Key", "OPENAI_API_KEY", "pat", "sk", "Pwd", "oauth", "auth"):
        assert is_secret_name(name), name
    for name in ("path", "pattern", "port", "author", "max_tokens", "db", "task", "verbose"):
        assert not is_secret_name(name), name


def test_the_recorded_header_and_the_log_hold_no_secret(logs: Path) -> None:
    """End to end: the header the proxy writes keeps none of the shapes above."""
    args = [a for shape, _ in SECRET_SHAPES for a in shape]
    done = subprocess.run(
        proxy("--record", str(logs), server=[*echo_server(), *args]),
        input=b'{"jsonrpc":"2.0","method":"notifications/x"}\n',
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (log_path,) = logs.glob("*.jsonl")
    text = log_path.read_text()
    leaked = [secret for _, secret in SECRET_SHAPES if secret in text]
    assert leaked == []
    header = read_session_log(log_path).header
    assert header.server_command[:2] == echo_server()
    assert len(header.server_command) == 2 + len(args)
