"""Nothing leaks: `stretto sql` reads the warehouse and nothing else and writes nothing, and
whatever ingest, learn and import write under the home is 0600 (files) / 0700 (folders),
whatever the umask."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.home import make_private, private_dirs, private_tree
from tests.conftest import REFERENCE_HOME, TAU2
from tests.warehouse.helpers import ingest, rows

STRETTO = str(Path(sys.executable).parent / "stretto")


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("sql") / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    ingest(home)
    return home


def sql(home: Path, query: str, capsys) -> tuple[int, str, str]:
    code = main(["sql", "--home", str(home), query])
    out, err = capsys.readouterr()
    return code, out, err


REFUSED = [
    ("SELECT * FROM read_text('/etc/passwd')", "Permission Error"),
    ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
    ("SELECT * FROM glob('/root/*')", "Permission Error"),
    ("SELECT * FROM read_json('{home}/logs/shop/*.jsonl')", "Permission Error"),
    ("SELECT * FROM read_parquet('{home}/warehouse/registry/*.parquet')", "Permission Error"),
    ("COPY (SELECT 1) TO '{home}/../leak.csv'", "refused: COPY"),
    ("COPY (SELECT 1) TO '{home}/warehouse/parquet/messages/evil.parquet'", "refused: COPY"),
    ("SELECT 1; COPY (SELECT 1) TO '{home}/x.csv'", "refused: COPY"),
    ("EXPORT DATABASE '{home}/export'", "refused: EXPORT"),
    ("ATTACH '{home}/other.duckdb'", "refused: ATTACH"),
    ("SET enable_external_access = true", "refused: SET"),
    ("INSTALL httpfs", "refused"),
    ("CREATE TABLE t AS SELECT 1", "refused: CREATE"),
]


@pytest.mark.parametrize(("query", "why"), REFUSED)
def test_stretto_sql_refuses_to_read_or_write_outside_the_warehouse(
    home: Path, query: str, why: str, capsys
) -> None:
    before = sorted(p for p in home.rglob("*"))
    code, out, err = sql(home, query.format(home=home), capsys)
    assert code == 1 and out == ""
    assert err.startswith("stretto: query failed: ") and why in err and err.count("\n") == 1
    assert sorted(p for p in home.rglob("*")) == before
    assert not (home.parent / "leak.csv").exists()


def test_stretto_sql_still_reads_every_table_and_the_warehouse_files(home: Path, capsys) -> None:
    code, out, _ = sql(home, "SELECT count(*) AS n FROM sessions", capsys)
    assert code == 0 and out.split()[-3] == "6"
    parquet = home / "warehouse/parquet/sessions"
    query = f"SELECT count(*) AS n FROM read_parquet('{parquet}/**/*.parquet')"
    code, out, _ = sql(home, query, capsys)
    assert code == 0
    code, out, _ = sql(home, "EXPLAIN SELECT * FROM calls", capsys)
    assert code == 0
    # and the refusals left the warehouse working
    assert ingest(home)["files read"] == 0
    assert rows(home, "SELECT count(*) AS n FROM messages")[0]["n"] > 0


def modes(root: Path) -> dict[str, str]:
    """Every entry under root that is not private, with its mode."""
    loose = {}
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            continue
        want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if stat.S_IMODE(info.st_mode) != want:
            loose[str(path.relative_to(root))] = oct(stat.S_IMODE(info.st_mode))
    return loose


def run_with_umask(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=600, preexec_fn=lambda: os.umask(0o022)
    )


@pytest.mark.slow  # ingests under several umasks
def test_everything_ingest_writes_is_private_whatever_the_umask(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    done = run_with_umask([STRETTO, "ingest", "--home", str(home)])
    assert done.returncode == 0, done.stderr
    assert (home / "warehouse/stretto.duckdb").exists() and (home / "warehouse/registry").is_dir()
    assert modes(home / "warehouse") == {}


def test_a_warehouse_written_before_is_made_private_by_the_next_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    old = home / "warehouse/parquet/calls/domain=x"
    old.mkdir(parents=True, mode=0o755)
    (old / "part-old.parquet").write_bytes(b"PAR1")
    (old / "part-old.parquet").chmod(0o644)
    ingest(home)
    assert modes(home / "warehouse") == {}


@pytest.mark.slow  # a whole ingest and learn under a strict umask
def test_the_learn_cache_and_imported_logs_are_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = tmp_path / "shop.flow.json"
    done = run_with_umask(
        [
            STRETTO,
            "learn",
            "--sessions",
            str(REFERENCE_HOME / "logs/shop"),
            "--domain",
            "shop",
            "--habit-only",
            "--out",
            str(out),
            "--home",
            str(home),
        ]  # fmt: skip
    )
    assert done.returncode == 0, done.stderr
    assert modes(home / "cache") == {}
    logs = tmp_path / "imported"
    trace = TAU2 / "results/sierra-tau2_trace/e2e_retail_baseline.json"
    tools = TAU2 / "domains/tau2_tools.json"
    done = run_with_umask(
        [STRETTO, "import-tau2", "--tools", str(tools), "--out", str(logs / "retail"), str(trace)]
    )
    assert done.returncode == 0, done.stderr
    assert modes(logs / "retail") == {} and any((logs / "retail").iterdir())


def test_the_helpers_never_follow_a_link_and_leave_existing_parents_alone(tmp_path: Path) -> None:
    outside = tmp_path / "users-own"
    outside.mkdir(mode=0o755)
    outside.chmod(0o755)
    parent_mode = stat.S_IMODE(tmp_path.stat().st_mode)
    made = private_dirs(tmp_path / "home/a/b")
    assert modes(tmp_path / "home") == {} and made == tmp_path / "home/a/b"
    assert stat.S_IMODE(tmp_path.stat().st_mode) == parent_mode  # the home's parent is not ours
    (made / "link").symlink_to(outside, target_is_directory=True)
    (made / "f").write_text("x")
    os.chmod(made / "f", 0o644)
    private_tree(tmp_path / "home")
    make_private(made / "link")
    assert modes(tmp_path / "home") == {}
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
