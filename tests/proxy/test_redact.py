"""Credential-looking values never reach the log header."""

from proxy.redact import redact_command, redact_url


def test_options_assignments_and_headers() -> None:
    assert redact_command(
        [
            "srv",
            "--api-key",
            "K",
            "--token=T",
            "GITHUB_TOKEN=G",
            "-H",
            "Authorization: Bearer B",
            "--password",
            "P",
            "--port",
            "8080",
            "DEBUG=1",
            "--verbose",
            "file.txt",
        ]
    ) == [
        "srv",
        "--api-key",
        "<redacted>",
        "--token=<redacted>",
        "GITHUB_TOKEN=<redacted>",
        "-H",
        "Authorization: Bearer <redacted>",
        "--password",
        "<redacted>",
        "--port",
        "8080",
        "DEBUG=1",
        "--verbose",
        "file.txt",
    ]


def test_a_secret_option_followed_by_another_option_hides_nothing_else() -> None:
    assert redact_command(["srv", "--token", "--verbose"]) == ["srv", "--token", "--verbose"]


def test_urls_lose_user_password_and_secret_query_values() -> None:
    assert redact_url("https://me:pw@example.org:8443/mcp?api_key=abc&x=1") == (
        "https://example.org:8443/mcp?api_key=<redacted>&x=1"
    )
    assert redact_command(["srv", "--url=https://u:p@h/x"]) == ["srv", "--url=https://h/x"]
    assert redact_url("not a url") == "not a url"
