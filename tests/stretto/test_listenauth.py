"""stretto.listenauth: the one set of rules for who may use a listening server (the proxy's
--listen, the console, `stretto serve`): the loopback address, the token file, the token."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from stretto.listenauth import (
    family_of,
    is_loopback,
    no_auth_problem,
    same_token,
    split_address,
    token_of,
    url_host,
)


def test_loopback_is_an_address_or_localhost_never_a_name_looked_up():
    """The one rule the servers allow --no-auth by: a loopback address, or `localhost`; any
    other name is refused without a lookup (what it resolves to may change before binding)."""
    for host in ("127.0.0.1", "127.1.2.3", "::1", "localhost", "LocalHost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "192.168.1.10", "evil.example", "localhost.", "ip6-localhost"):
        assert not is_loopback(host), host


def test_a_token_file_is_made_private_once_then_read(tmp_path: Path) -> None:
    default = tmp_path / "home" / "serve.token"
    token, file, made = token_of(None, default, "--token-file")
    assert (file, made) == (str(default), True) and len(token) == 64
    assert stat.S_IMODE(default.stat().st_mode) == 0o600
    assert stat.S_IMODE(default.parent.stat().st_mode) == 0o700
    assert token_of(None, default, "--token-file") == (token, str(default), False)
    given = tmp_path / "given.token"
    given.write_text("s3cret\n")
    given.chmod(0o644)
    with pytest.raises(ValueError, match="--token-file .*given.token: other users may read"):
        token_of(str(given), default, "--token-file")
    given.chmod(0o600)
    assert token_of(str(given), default, "--token-file") == ("s3cret", str(given), False)


def test_the_token_is_a_string_that_matches_exactly() -> None:
    assert same_token("s3cret", b"s3cret")
    for given in ("s3cre", "s3cret ", "", None, 7, ["s3cret"], "\ud800"):
        assert not same_token(given, b"s3cret"), given


def test_a_listen_address_is_host_and_port_ipv6_in_brackets() -> None:
    """The --listen of the proxy, the console and `stretto serve`, read by one rule."""
    assert split_address("127.0.0.1:8808", "E") == ("127.0.0.1", 8808)
    assert split_address("localhost:0", "E") == ("localhost", 0)  # 0: any free port
    assert split_address("[::1]:7600", "E") == ("::1", 7600)
    assert split_address("[::]:65535", "E") == ("::", 65535)
    assert (family_of("::1"), family_of("127.0.0.1")) == (socket.AF_INET6, socket.AF_INET)
    for written in ("127.0.0.1:8808", "[::1]:7600", "localhost:0"):  # written back as given
        host, port = split_address(written, "E")
        assert f"{url_host(host)}:{port}" == written
    for bad in ("nowhere", "127.0.0.1", ":8808", "[]:80", "localhost:http", "h:65536", "[::1]"):
        with pytest.raises(ValueError, match="--listen '.*': expected HOST:PORT, e.g. E"):
            split_address(bad, "E")
    with pytest.raises(ValueError, match=r"an IPv6 address goes in brackets, e.g. \[::1\]:80"):
        split_address("::1:80", "E")


def test_no_auth_only_on_loopback() -> None:
    assert no_auth_problem("::1", "--token") is None
    assert no_auth_problem("0.0.0.0", "--token") == (
        "--no-auth: only on a loopback address (127.0.0.1, ::1, localhost), not 0.0.0.0: "
        "give --token"
    )
