"""Shared fixtures: paths to the real servers the tests run, and the proxy's command."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
REFERENCE_HOME = SHARED / "data/reference/crates/stretto-console/tests/fixtures/home"
SERVERS = ROOT / "tests" / "servers"
FILESYSTEM_SERVER = ROOT / "node" / "node_modules" / ".bin" / "mcp-server-filesystem"
PYTHON = sys.executable
PROXY = str(Path(sys.executable).parent / "stretto-proxy")


def demo_server(*extra: str) -> list[str]:
    return [PYTHON, str(SERVERS / "demo_server.py"), *extra]


def echo_server() -> list[str]:
    return [PYTHON, str(SERVERS / "echo_server.py")]


def filesystem_server(folder: Path) -> list[str]:
    if not FILESYSTEM_SERVER.exists():
        pytest.fail(f"{FILESYSTEM_SERVER} is missing: run `make setup` (npm install in node/)")
    return ["node", str(FILESYSTEM_SERVER), str(folder)]


def proxy(*options: str, server: list[str]) -> list[str]:
    return [PROXY, *options, "--", *server]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture(scope="session")
def shop_flow_path(tmp_path_factory) -> Path:
    """A flow learned (once per test run, by the real command) from the reference's shop logs."""
    tmp = tmp_path_factory.mktemp("shop-flow")
    out = tmp / "shop.flow.json"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "stretto"),
            "learn",
            "--sessions",
            str(REFERENCE_HOME / "logs/shop"),
            "--domain",
            "shop",
            "--habit-only",
            "--out",
            str(out),
            "--home",
            str(tmp / "home"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out
