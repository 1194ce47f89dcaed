"""A token file others may read (or write) is refused: `--listen-token-file` of the proxy's
listen mode, through the one check `stretto.home.read_secret` that the console can call too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stretto.home import read_secret
from tests.conftest import PROXY, SERVERS

RPC_SERVER = [sys.executable, str(SERVERS / "rpc_server.py")]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_secret_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(mode)
    with pytest.raises(ValueError) as refused:
        read_secret(token, "--listen-token-file")
    message = str(refused.value)
    assert message == (
        f"--listen-token-file {token}: other users may read or write it (mode {mode:04o}); "
        f"make it the owner's alone: chmod 600 {token}"
    )
    assert "s3cret" not in message


def test_the_owners_own_secret_is_read(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    for mode in (0o600, 0o400):
        token.chmod(mode)
        assert read_secret(token, "--token-file") == "s3cret\n"
    with pytest.raises(ValueError, match="--token-file .*/missing: cannot read: "):
        read_secret(tmp_path / "missing", "--token-file")


def test_the_listening_proxy_refuses_a_token_file_others_can_read(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o644)
    done = subprocess.run(
        [PROXY, "--listen", "127.0.0.1:0", "--listen-token-file", str(token), "--", *RPC_SERVER],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "chmod 600" in done.stderr
    assert f"--listen-token-file {token}: other users may read" in done.stderr
