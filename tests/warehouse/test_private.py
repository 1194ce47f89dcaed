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

import duckdb
import pytest

from stretto.cli.main import main
from stretto.home import make_private, private_dirs, private_tree
from tests.conftest import REFERENCE_HOME, TAU2
from tests.private import loose
from tests.warehouse.helpers import ingest, rows
from warehouse import store
from warehouse.layout import Layout

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
    # the views read the warehouse; its files themselves are not opened by the query
    ("SELECT * FROM read_parquet('{home}/warehouse/parquet/calls/**/*.parquet')", "Permission"),
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
    code, out, _ = sql(home, "EXPLAIN SELECT * FROM calls", capsys)
    assert code == 0
    # and the refusals left the warehouse working
    assert ingest(home)["files read"] == 0
    assert rows(home, "SELECT count(*) AS n FROM messages")[0]["n"] > 0


def snapshot(*roots: Path) -> dict[Path, bytes]:
    """Every file under the roots, with its bytes."""
    return {p: p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


def calls_count(home: Path) -> int:
    return rows(home, "SELECT count(*) AS n FROM calls")[0]["n"]


# Statements EXPLAIN ANALYZE runs (it executes what it wraps): each must leave every file as it
# was and make none; {calls} is one of the calls table's own Parquet files, {cwd} where the
# command runs (DuckDB's default temp directory, {cwd}/.tmp/, was an allowed one).
WRAPPED = [
    "COPY (SELECT * FROM calls WHERE false) TO '{calls}' (FORMAT parquet)",
    "COPY (SELECT * FROM calls WHERE false) TO '{calls}' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY (SELECT 1 AS x) TO '{cwd}/.tmp/out.csv'",
    "COPY (SELECT 1 AS x) TO '{home}/warehouse/parquet/calls/evil.parquet' (FORMAT parquet)",
    "INSERT INTO calls SELECT * FROM calls",
    "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA profiling_output = '{cwd}/profile.json'",
    "SELECT * FROM read_text('{cwd}/outside.txt')",
    "SELECT * FROM glob('{cwd}/*')",
    "SELECT * FROM read_csv('{cwd}/outside.txt')",
    "SELECT * FROM read_csv('{home}/logs/shop/*.jsonl')",
]


def places(home: Path, cwd: Path) -> dict[str, str]:
    calls = sorted((home / "warehouse/parquet/calls").rglob("*.parquet"))[0]
    return {"home": str(home), "calls": str(calls), "cwd": str(cwd)}


@pytest.mark.parametrize("attack", WRAPPED)
def test_explain_analyze_cannot_write_a_file_or_read_outside_the_warehouse(
    home: Path, attack: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / "outside.txt").write_text("secret\n")
    count, before = calls_count(home), snapshot(home, tmp_path)
    code, out, err = sql(home, "EXPLAIN ANALYZE " + attack.format(**places(home, tmp_path)), capsys)
    assert code == 1 and out == "" and err.startswith("stretto: query failed: "), err
    assert snapshot(home, tmp_path) == before  # not a byte changed, no file made
    assert calls_count(home) == count


# The same statements straight on the connection the user's SQL gets, no statement check in
# front: the engine itself refuses them.
BARE = [
    *WRAPPED,
    "ATTACH '{cwd}/other.duckdb' AS other",
    "EXPORT DATABASE '{cwd}/export'",
    "INSTALL httpfs",
    "SET temp_directory = '{cwd}/spill'",
    "RESET lock_configuration",
    "PRAGMA enable_profiling = 'json'",
    "SELECT * FROM read_parquet('{calls}')",
]


@pytest.mark.parametrize("attack", BARE)
def test_the_users_connection_refuses_files_whatever_the_statement(
    home: Path, attack: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / "outside.txt").write_text("secret\n")
    count, before = calls_count(home), snapshot(home, tmp_path)
    with store.reading(Layout.at(home), confined=True) as reader:
        with pytest.raises(duckdb.Error):
            reader.con.sql(attack.format(**places(home, tmp_path)))
        # what it may do (make a table in its own memory) leaves nothing behind
        reader.con.sql("CREATE TABLE t AS SELECT * FROM calls")
    assert snapshot(home, tmp_path) == before
    assert calls_count(home) == count


def test_the_readme_queries_still_run_over_the_views(home: Path, capsys) -> None:
    queries = [  # README.md's, and a join, the catalogue and a plan
        "SELECT agent_model, count(*) AS sessions, sum(lines_read) AS lines FROM sessions "
        "GROUP BY 1 ORDER BY 2 DESC",
        "SELECT tool, count(*) AS made, count(*) FILTER (WHERE status <> 'ok') AS failed, "
        "round(100.0 * failed / made, 1) AS pct FROM calls WHERE NOT by_proxy "
        "GROUP BY 1 ORDER BY failed DESC, made DESC LIMIT 10",
        "SELECT tool, count(*) AS lookups, count(*) FILTER (WHERE status = 'ok') AS ok "
        "FROM calls WHERE by_proxy GROUP BY 1 ORDER BY 2 DESC",
        "SELECT file, line, error FROM quarantine",
        "SELECT s.domain, s.day, count(*) AS n FROM steps JOIN sessions s USING (session) "
        "GROUP BY ALL",
        "EXPLAIN SELECT * FROM calls",
        "SELECT table_name FROM information_schema.tables ORDER BY 1",
    ]
    for query in queries:
        code, out, err = sql(home, query, capsys)
        assert code == 0 and err == "", (query, err)
    assert calls_count(home) > 0


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
    assert loose(home / "warehouse") == {}


def test_a_warehouse_written_before_is_made_private_by_the_next_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    old = home / "warehouse/parquet/calls/domain=x"
    old.mkdir(parents=True, mode=0o755)
    (old / "part-old.parquet").write_bytes(b"PAR1")
    (old / "part-old.parquet").chmod(0o644)
    ingest(home)
    assert loose(home / "warehouse") == {}


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
    assert loose(home / "cache") == {}
    logs = tmp_path / "imported"
    trace = TAU2 / "results/sierra-tau2_trace/e2e_retail_baseline.json"
    tools = TAU2 / "domains/tau2_tools.json"
    done = run_with_umask(
        [STRETTO, "import-tau2", "--tools", str(tools), "--out", str(logs / "retail"), str(trace)]
    )
    assert done.returncode == 0, done.stderr
    assert loose(logs / "retail") == {} and any((logs / "retail").iterdir())


def test_the_helpers_never_follow_a_link_and_leave_existing_parents_alone(tmp_path: Path) -> None:
    outside = tmp_path / "users-own"
    outside.mkdir(mode=0o755)
    outside.chmod(0o755)
    parent_mode = stat.S_IMODE(tmp_path.stat().st_mode)
    made = private_dirs(tmp_path / "home/a/b")
    assert loose(tmp_path / "home") == {} and made == tmp_path / "home/a/b"
    assert stat.S_IMODE(tmp_path.stat().st_mode) == parent_mode  # the home's parent is not ours
    (made / "link").symlink_to(outside, target_is_directory=True)
    (made / "f").write_text("x")
    os.chmod(made / "f", 0o644)
    private_tree(tmp_path / "home")
    make_private(made / "link")
    assert loose(tmp_path / "home") == {}
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
