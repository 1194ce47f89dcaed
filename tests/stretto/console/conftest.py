"""Fixtures of the console's tests: data directories (the reference's fixture home with a
flow learned from its shop logs; a copy of the walkthrough's home) and a real uvicorn server."""

from __future__ import annotations

import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from stretto.console.app import create_app
from stretto.console.cli import server_for
from stretto.console.state import Options
from tests.builders import wait_until
from tests.conftest import REFERENCE_HOME, Walked, free_port

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WRITE = AUTH | {"X-Stretto-Console": "1"}


@pytest.fixture
def home(tmp_path: Path, shop_flow_path: Path) -> Path:
    """The reference console's fixture home (recorded, served and shadow logs; two flows in
    the reference's own encoding, which this stretto refuses) plus a flow learned from its
    shop logs under flows/."""
    data = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME, data)
    (data / "flows").mkdir()
    shutil.copy(shop_flow_path, data / "flows" / "shop.flow.json")
    return data


def client_for(data: Path, **options) -> TestClient:
    options.setdefault("token", TOKEN)
    return TestClient(create_app(Options(data=data, **options)))


@pytest.fixture
def client(home: Path) -> TestClient:
    return client_for(home)


@pytest.fixture(scope="module")
def walkthrough_home(walked: Walked, tmp_path_factory) -> Path:
    """A copy of the walkthrough's home (tests/conftest.py runs it once per test session) for
    one test module: the console writes its jobs and trash under it."""
    data = tmp_path_factory.mktemp("walkthrough") / ".stretto"
    shutil.copytree(walked.home, data, symlinks=True)
    return data


@contextmanager
def served(options: Options):
    """The console on a real uvicorn server on a free loopback port, set up as stretto-console
    sets it up; its base URL."""
    port = free_port()
    app = create_app(options)
    server = server_for(app, "127.0.0.1", port)  # as stretto-console serves it
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "the console to start", 30)
    if not server.started:
        raise RuntimeError("the console did not start")
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join()
