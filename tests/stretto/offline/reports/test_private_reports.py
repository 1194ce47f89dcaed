"""What the offline commands write is private (0600 files, 0700 folders) whatever the umask:
their tables hold tool arguments (replay's and evaluate's options hold bound argument values).
The commands run in this process under umask 022, and a walk of what they wrote lists every
entry that is not private."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.builders import stretto
from tests.conftest import REFERENCE_HOME
from tests.private import loose, umask

SHADOW = REFERENCE_HOME / "shadow/shop"


def test_audit_writes_private_tables_and_plot(shop_flow_path: Path, tmp_path: Path) -> None:
    out, home = tmp_path / "new/report", tmp_path / "home"
    with umask(0o022):
        done = stretto("audit", "--flow", shop_flow_path, "--sessions", SHADOW, "--out", out)
        assert done.returncode == 0, done.stderr
        done = stretto("audit", "--flow", shop_flow_path, "--sessions", SHADOW, "--home", home)
        assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} >= {"decisions.parquet", "reliability.png"}
    assert loose(tmp_path / "new") == {}
    assert any((home / "reports/shop").iterdir()) and loose(home) == {}


def test_replay_writes_private_tables_and_options(shop_flow_path: Path, tmp_path: Path) -> None:
    out, home = tmp_path / "tables", tmp_path / "home"
    replay = ["replay", "--flow", shop_flow_path, "--sessions", SHADOW, "--explore", "0"]
    with umask(0o022):
        done = stretto(*replay, "--out", out)
        assert done.returncode == 0, done.stderr
        done = stretto(*replay, "--home", home)
        assert done.returncode == 0, done.stderr
    assert (out / "options.parquet").is_file() and (out / "reliability.png").is_file()
    assert loose(out) == {}
    assert any((home / "reports/shop").iterdir()) and loose(home) == {}


def test_a_folder_the_user_named_keeps_its_mode_and_gets_private_files(
    shop_flow_path: Path, tmp_path: Path
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    out.chmod(0o755)
    with umask(0o022):
        done = stretto("audit", "--flow", shop_flow_path, "--sessions", SHADOW, "--out", out)
    assert done.returncode == 0, done.stderr
    assert loose(out) == {".": "0o755"}  # the user's own folder is left as it was


@pytest.mark.slow  # a learn run (Dagster, in process)
def test_the_served_flows_folder_is_private(tmp_path: Path) -> None:
    home, sessions = tmp_path / "home", REFERENCE_HOME / "logs/shop"
    learn = ["learn", "--sessions", sessions, "--habit-only", "--home", home]
    with umask(0o022):
        done = stretto(*learn, "--domain", "shop", "--out", home / "flows/shop.flow.json")
        assert done.returncode == 0, done.stderr
        assert loose(home / "flows") == {}  # made 0700
        (home / "flows").chmod(0o755)  # as an earlier version left it
        done = stretto(*learn, "--domain", "shop", "--out", home / "flows/shop.flow.json")
        assert done.returncode == 0, done.stderr
    assert (home / "flows/shop.flow.json").is_file()
    assert loose(home / "flows") == {}


def test_write_private_is_private_from_the_first_byte_and_whole(tmp_path: Path) -> None:
    from stretto.home import write_private

    seen = []

    def writer(temp: Path) -> None:  # as polars or matplotlib would: write what it is given
        seen.append(stat.S_IMODE(temp.stat().st_mode))
        temp.write_bytes(b"table")

    with umask(0o000):
        path = write_private(tmp_path / "a/b/t.parquet", writer)
        write_private(tmp_path / "a/t.md", "text")
    assert seen == [0o600] and path.read_bytes() == b"table"
    assert loose(tmp_path / "a") == {}

    def broken(temp: Path) -> None:
        temp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_private(path, broken)
    assert path.read_bytes() == b"table"  # the old content, and no temporary file left
    assert sorted(p.name for p in path.parent.iterdir()) == ["t.parquet"]
