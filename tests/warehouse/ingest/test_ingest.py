"""Ingest: real logs in, Parquet and DuckDB views out, nothing lost, nothing read twice."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from stretto.logs.merged import read_episodes
from stretto.stdio_client import StdioClient
from tests.builders import HEADER, LogBuilder, stretto, wait_until
from tests.conftest import PYTHON, REFERENCE_HOME, SERVERS, proxy
from tests.warehouse.helpers import ingest, mismatches, rows
from warehouse import store
from warehouse.ingest.batches import limit_memory
from warehouse.ingest.discover import discover
from warehouse.ingest.steps import derive_steps
from warehouse.layout import Layout

STRETTO = str(Path(sys.executable).parent / "stretto")


def home_with(tmp_path: Path, **folders: Path) -> Path:
    home = tmp_path / "home"
    for domain, source in folders.items():
        shutil.copytree(source, home / "logs" / domain)
    return home


def test_reference_logs_agree_with_the_episode_reader(tmp_path: Path) -> None:
    home = home_with(
        tmp_path,
        shop=REFERENCE_HOME / "logs/shop",
        served=REFERENCE_HOME / "served/shop",
        shadow=REFERENCE_HOME / "shadow/shop",
        retail=REFERENCE_HOME / "logs/retail",
    )
    meta = ingest(home)
    assert meta["files read"] == 12  # *.flow.jsonl and *.confirm.jsonl are not session logs
    assert meta["lines read"] == meta["lines ingested"] and meta["lines quarantined"] == 0
    assert mismatches(home) == []
    (sessions,) = rows(home, "SELECT count(*) AS n, count(DISTINCT domain) AS d FROM sessions")
    assert sessions == {"n": 12, "d": 2}  # the served and shadow logs say domain "shop" too
    lookups = rows(
        home, "SELECT tool, count(*) AS n FROM calls WHERE by_proxy GROUP BY tool ORDER BY tool"
    )
    assert lookups == [{"tool": "get_order_details", "n": 4}, {"tool": "get_user_details", "n": 2}]
    kinds = rows(home, "SELECT DISTINCT tool, kind, contract FROM tools ORDER BY tool")
    assert kinds[0] == {
        "tool": "cancel_pending_order",
        "kind": "write",
        "contract": "order_id:string!, reason:string!",
    }
    # every call answered and counted against the reader's episodes
    episodes = read_episodes(home / "logs/shop")
    (count,) = rows(
        home,
        "SELECT count(*) AS n FROM calls WHERE domain = 'shop' "
        "AND session IN (SELECT session FROM sessions WHERE file LIKE '%/shop/%')",
    )
    assert count["n"] == sum(len(e.calls()) for e in episodes)


def test_tricky_turns_agree_with_the_episode_reader(tmp_path: Path) -> None:
    logs = tmp_path / "home/logs/hand"
    logs.mkdir(parents=True)
    cases = {
        "values": LogBuilder()
        .say(0, "user", "order W7 please")
        .client_call(10, 1, "find")
        .result(20, 1, '{"orders": ["W7", "W8"], "n": 12}')
        .client_call(30, 2, "get", order="W7")
        .result(40, 2, "fine")
        .client_call(50, 3, "get", order="W8")
        .result(60, 3, "a\n  line two \nW9")
        .client_call(70, 4, "get", order="W9", n=12)
        .result(80, 4, "ok")
        .client_call(90, 5, "get", order="line two")
        .result(95, 5, "ok"),
        "parallel": LogBuilder()
        .client_call(0, 1, "a")
        .client_call(1, 2, "b")
        .result(5, 2, "x")
        .result(6, 1, "y", error=True)
        .client_call(7, 3, "c"),
        "lookups": LogBuilder()
        .client_call(0, 1, "find")
        .result(5, 1, "u1")
        .proxy_call(6, "stretto-1", "get", id="u1")
        .result(8, "stretto-1", "d")
        .result(14, 1, "u1 + lookups", sender="proxy")
        .say(20, "assistant", "done")
        .say(30, "user", "thanks")
        .client_call(40, "1", "find")
        .result(41, "1", "again"),
        "reused": LogBuilder()
        .client_call(0, 7, "a")
        .client_call(5, 7, "b")
        .result(9, 7, "r")
        .say(700, "assistant", " ")
        .client_call(800, 8, "c"),
    }
    for name, builder in cases.items():
        builder.lines[0] = {**HEADER, "session": name}
        (logs / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in builder.lines))
    cancel = LogBuilder().client_call(0, 1, "slow")
    cancel._add(
        5,
        "client",
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
    )
    cancel.client_call(2000, 2, "next").result(2010, 2, "ok").result(2020, 1, "late")
    cancel.lines[0] = {**HEADER, "session": "cancel"}
    (logs / "cancel.jsonl").write_text("".join(json.dumps(x) + "\n" for x in cancel.lines))
    ingest(tmp_path / "home")
    assert mismatches(tmp_path / "home") == []
    turns = rows(
        tmp_path / "home",
        "SELECT call_id, turn FROM calls WHERE session = 'values' ORDER BY sent_seq",
    )
    assert [t["turn"] for t in turns] == [0, 0, 1, 2, 2]
    (cancelled,) = rows(
        tmp_path / "home",
        "SELECT cancelled, status, result_text FROM calls "
        "WHERE session = 'cancel' AND call_id = '1'",
    )
    assert cancelled == {"cancelled": True, "status": "ok", "result_text": "late"}


def test_lines_with_unicode_are_cut_by_characters_not_bytes(tmp_path: Path) -> None:
    """Raw UTF-8 in compact lines, as the proxy writes them (never re-escaped)."""
    logs = tmp_path / "home/logs/hand"
    logs.mkdir(parents=True)
    texts = ["café ☕", "naïve e\u0301 🙂🙂", "line\u2028separator", "日本語のメモ"]
    builder = LogBuilder().say(0, "user", texts[0])
    for i, text in enumerate(texts, start=1):
        builder.client_call(10 * i, i, "find", query=text).result(10 * i + 5, i, text)
    builder.lines[0] = {**HEADER, "session": "unicode"}
    (logs / "unicode.jsonl").write_text(
        "".join(
            json.dumps(x, ensure_ascii=False, separators=(",", ":")) + "\n" for x in builder.lines
        ),
        encoding="utf-8",
    )
    done = ingest(tmp_path / "home")
    assert done["lines quarantined"] == 0
    assert mismatches(tmp_path / "home") == []
    got = rows(tmp_path / "home", "SELECT result_text FROM calls ORDER BY sent_seq")
    assert [r["result_text"] for r in got] == texts


@pytest.mark.slow  # three ingest runs
def test_a_second_run_reads_nothing_and_a_changed_file_replaces_its_rows(tmp_path: Path) -> None:
    home = home_with(tmp_path, shop=REFERENCE_HOME / "logs/shop")
    first = ingest(home)
    assert first["files read"] == 6
    again = ingest(home)
    assert again["files read"] == 0 and again["lines read"] == 0
    log = sorted((home / "logs/shop").glob("*.jsonl"))[0]
    lines = log.read_text().splitlines(keepends=True)
    session = json.loads(lines[0])["session"]
    before = rows(home, f"SELECT count(*) AS n FROM messages WHERE session = '{session}'")[0]["n"]
    log.write_text("".join(lines[:-3]))  # the file shrinks by three lines
    changed = ingest(home)
    assert changed["files read"] == 1
    after = rows(home, f"SELECT count(*) AS n FROM messages WHERE session = '{session}'")[0]["n"]
    assert after == before - 3
    assert rows(home, "SELECT count(*) AS n FROM sessions")[0]["n"] == 6
    assert mismatches(home) == []
    # touching a file without changing it is noticed by its hash: nothing is ingested
    log.touch()
    assert ingest(home)["files read"] == 0


def test_bad_lines_are_quarantined_and_nothing_is_lost(tmp_path: Path) -> None:
    home = home_with(tmp_path, shop=REFERENCE_HOME / "logs/shop")
    good = sorted((home / "logs/shop").glob("*.jsonl"))
    lines = good[0].read_text().splitlines(keepends=True)
    lines.insert(5, "{this is not json\n")
    lines.insert(8, '{"t_ms": 3, "from": "nobody", "raw": "x"}\n')
    lines.insert(9, "\n")
    good[0].write_text("".join(lines) + '{"t_ms":99,"from":"ser')  # and a torn last line
    future = home / "logs/shop/future.jsonl"
    future.write_text(
        '{"stretto_mcp_log": 9, "session": "f", "started_unix_ms": 0}\n'
        '{"t_ms": 0, "from": "client", "raw": "x"}\n'
    )
    (home / "logs/shop/empty.jsonl").write_text("")
    meta = ingest(home)
    assert (
        meta["lines read"]
        == meta["lines ingested"] + meta["lines quarantined"] + meta["lines dropped"]
    )
    assert meta["lines quarantined"] == 4 and meta["lines dropped"] == 2
    quarantined = rows(home, "SELECT file, line, error, raw FROM quarantine ORDER BY file, line")
    by_file = {}
    for q in quarantined:
        by_file.setdefault(Path(q["file"]).name, []).append(q)
    bad = by_file[good[0].name]
    assert [(q["line"], q["error"]) for q in bad] == [
        (6, "not JSON"),
        (9, "field `from`: expected one of client, server, proxy, context"),
    ]
    assert bad[0]["raw"] == "{this is not json"
    future_rows = by_file["future.jsonl"]
    assert len(future_rows) == 2 and "unknown session-log version 9" in future_rows[0]["error"]
    assert by_file["empty.jsonl"][0]["error"] == "empty: no header line"
    # the rest of the damaged file is still ingested
    (session,) = rows(
        home,
        f"SELECT lines_read, lines_ingested, lines_quarantined, lines_dropped, "
        f"torn_last_line FROM sessions WHERE file = 'logs/shop/{good[0].name}'",
    )
    assert session == {
        "lines_read": len(lines) + 1,
        "lines_ingested": len(lines) - 3,
        "lines_quarantined": 2,
        "lines_dropped": 2,
        "torn_last_line": True,
    }
    assert rows(home, "SELECT count(*) AS n FROM sessions")[0]["n"] == 6


def has_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (one of its /proc/PID/fd links)."""
    try:
        return any(fd.resolve() == path.resolve() for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it ended, or a descriptor closed while looking
        return False


@pytest.mark.slow  # two ingest processes racing
def test_a_second_run_at_once_waits_or_fails_clearly(tmp_path: Path) -> None:
    home = home_with(tmp_path, shop=REFERENCE_HOME / "logs/shop")
    layout = Layout.at(home)
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        with store.ingest_lock(layout, 0, print):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        busy = subprocess.run(
            [STRETTO, "ingest", "--home", str(home), "--wait", "0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert busy.returncode == 1
        assert (
            "another ingest run (pid" in busy.stderr and "is writing the warehouse" in busy.stderr
        )
        waiting = subprocess.Popen(
            [STRETTO, "ingest", "--home", str(home), "--wait", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(
            lambda: waiting.poll() is not None or has_open(waiting.pid, layout.lock),
            "the waiting run to reach the lock",
            120,
        )
        # The lapse is what is tested: a run told to wait, having reached the held lock, is
        # still waiting a while later (its retries are 0.2 s apart; `--wait 0` failed at once).
        time.sleep(1)
        assert waiting.poll() is None  # still waiting for the lock
    finally:
        release.set()
        holder.join()
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert "ingested 6 file(s)" in out
    assert mismatches(home) == []


def test_ingest_and_sql_from_the_command_line(tmp_path: Path) -> None:
    home = home_with(tmp_path, shop=REFERENCE_HOME / "logs/shop")
    done = stretto("ingest", "--home", home)
    assert done.returncode == 0, done.stderr
    lines = sum(len(p.read_text().splitlines()) for p in (home / "logs/shop").glob("*.jsonl"))
    assert done.stdout.startswith(
        f"stretto: ingested 6 file(s) (0 unchanged): {lines} lines read, {lines} ingested"
    )
    query = "SELECT agent_model, count(*) AS sessions FROM sessions GROUP BY 1"
    table = stretto("sql", "--home", home, query)
    assert table.stdout.splitlines()[2].split() == ["quickstart", "6"]
    as_json = stretto("sql", "--home", home, query, "--format", "json")
    assert json.loads(as_json.stdout) == [{"agent_model": "quickstart", "sessions": 6}]
    as_csv = stretto("sql", "--home", home, query, "--format", "csv")
    assert as_csv.stdout == "agent_model,sessions\nquickstart,6\n"
    wrong = stretto("sql", "--home", home, "SELECT * FROM nope")
    assert wrong.returncode == 1 and "query failed" in wrong.stderr
    nothing = stretto("sql", "--home", tmp_path / "none", "SELECT 1")
    assert nothing.returncode == 1 and "run `stretto ingest` first" in nothing.stderr


def test_a_deep_answer_through_the_proxy_is_ingested_as_answered(tmp_path: Path) -> None:
    """A server answers with valid JSON nested 1,000 deep (deeper than Python's json goes):
    the proxy logs it as a message, not raw, and ingest counts the call as answered (ok), as
    the episode reader does (learning keeps the call)."""
    home = tmp_path / "home"
    server = [PYTHON, str(SERVERS / "brittle_server.py")]
    with StdioClient(proxy("--record", str(home / "logs/deep"), server=server)) as client:
        client.initialize()
        client.send_line(
            b'{"jsonrpc":"2.0","id":2,"method":"tools/call",'
            b'"params":{"name":"deep","arguments":{"depth":1000}}}\n'
        )
        answer = client.read_line(10)  # (json.loads would give up on it)
        assert answer is not None and answer.endswith(b"[[[[" + b"]" * 1000 + b"}}\n")
        assert client.close() == 0
    done = stretto("ingest", "--home", home)
    assert done.returncode == 0, done.stderr
    assert "0 quarantined" in done.stdout
    (call,) = rows(home, "SELECT tool, status, result_text FROM calls")
    assert call == {"tool": "deep", "status": "ok", "result_text": "nested 1000 deep"}
    kinds = rows(home, "SELECT kind, count(*) AS n FROM messages GROUP BY kind ORDER BY kind")
    assert kinds == [{"kind": "notification", "n": 1}, {"kind": "request", "n": 2},
                     {"kind": "response", "n": 2}]  # fmt: skip
    assert mismatches(home) == []


@pytest.mark.parametrize(
    "table", ["sessions", "messages", "calls", "context", "tools", "steps", "quarantine"]
)
def test_every_table_is_a_view_even_before_it_has_rows(tmp_path: Path, table: str) -> None:
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    ingest(home)
    assert rows(home, f"SELECT count(*) AS n FROM {table}") == [{"n": 0}]


@pytest.mark.slow  # worker processes against one process
def test_batches_in_parallel_workers_give_the_same_tables(tmp_path: Path, monkeypatch) -> None:
    """One pool of worker processes hashes the logs (as for a large run) and ingests them."""
    from warehouse.ingest import batches as engine
    from warehouse.ingest import discover as finder
    from warehouse.ingest.workers import worker_pool

    home = home_with(
        tmp_path, shop=REFERENCE_HOME / "logs/shop", served=REFERENCE_HOME / "served/shop"
    )
    layout = Layout.at(home)
    monkeypatch.setattr(engine, "BATCH_FILES", 3)  # 8 files -> 3 batches
    monkeypatch.setattr(finder, "SPREAD_FILES", 1)  # hashed on the workers
    threaded = discover(layout, store.known_state(layout))
    with worker_pool(2) as pool:
        assert not multiprocessing.active_children()  # started on first use
        plan = discover(layout, store.known_state(layout), pool=pool)
        assert multiprocessing.active_children()  # hashed there
        assert plan.read == threaded.read and len(plan.read) == 8
        assert len(list(engine.batches(plan.read))) == 3
        store.begin_run(layout, "parallel")
        stats = engine.ingest_files(plan.read, "parallel", layout, pool=pool, workers=2)
    assert stats.files == 8 and stats.balanced
    store.commit_run(layout, "parallel", stats.logs, stats.data)
    derive_steps(layout, "parallel-steps")
    assert mismatches(home) == []
    assert rows(home, "SELECT count(DISTINCT session) AS n FROM calls") == [{"n": 8}]


def test_a_batch_of_one_partition_and_one_of_several_write_the_same_rows(
    tmp_path: Path, monkeypatch
) -> None:
    """A batch whose rows all fall in one partition is written one file per table; one with
    several through DuckDB's PARTITION_BY: the same rows, in the same domain=/day= folders."""
    from warehouse.ingest import batches as engine

    tables = ("sessions", "messages", "calls", "context", "tools")

    def ingested(name: str, batch_files: int) -> tuple[dict, set[str]]:
        home = home_with(
            tmp_path / name,
            shop=REFERENCE_HOME / "logs/shop",
            retail=REFERENCE_HOME / "logs/retail",
        )
        # and a session that says nothing: no context rows, in a partition of its own
        quiet = LogBuilder().client_call(0, 1, "find").result(5, 1, "u1")
        quiet.lines[0] = {**HEADER, "session": "quiet", "started_unix_ms": 86_400_000}
        (home / "logs" / "hand").mkdir()
        (home / "logs" / "hand" / "quiet.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in quiet.lines)
        )
        monkeypatch.setattr(engine, "BATCH_FILES", batch_files)
        layout = Layout.at(home)
        plan = discover(layout, store.known_state(layout))
        store.begin_run(layout, name)
        stats = engine.ingest_files(plan.read, name, layout, workers=1)
        store.commit_run(layout, name, stats.logs, stats.data)
        found = {
            table: sorted(
                (
                    tuple(sorted(r.items()))
                    for r in rows(home, f"SELECT * EXCLUDE (ingest_id) FROM {table}")
                ),
                key=repr,
            )
            for table in tables
        }
        folders = {"/".join(Path(d["path"]).parts[-3:-1]) for d in stats.data}
        # a table none of a batch's files has rows for (one log has no context lines) gets
        # no file: the one-file write's empty file is not kept
        assert all(d["rows"] > 0 for d in stats.data)
        kept = (home / "warehouse" / "parquet").rglob("*.parquet")
        assert {p.relative_to(home).as_posix() for p in kept} == {d["path"] for d in stats.data}
        return found, folders

    together, folders = ingested("together", 100)
    one_each, folders_each = ingested("one_each", 1)
    assert len(folders) > 1 and folders == folders_each
    assert all(f.startswith("domain=") and "/day=" in f for f in folders)
    assert together == one_each and all(together[t] for t in ("sessions", "calls"))


def test_a_warehouse_written_before_a_column_existed_still_reads(tmp_path: Path) -> None:
    """Parquet files from before `sessions.reward` was added: the column reads as NULL."""
    import pyarrow.parquet as pq

    home = tmp_path / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    ingest(home)
    layout = Layout.at(home)
    for path in layout.table_dir("sessions").rglob("*.parquet"):
        table = pq.read_table(path, partitioning=None)
        pq.write_table(table.drop_columns(["reward"]), path)
    got = rows(home, "SELECT count(*) AS n, count(reward) AS with_reward FROM sessions")
    assert got == [{"n": 6, "with_reward": 0}]


def test_batches_keep_every_worker_busy_to_the_end() -> None:
    """More than one batch: a multiple of the workers, of even size, the files in order."""
    from warehouse.ingest import batches as engine
    from warehouse.ingest.discover import LogFile

    sizes = [20_000 + (i * 7919) % 50_000 for i in range(10_000)]  # 449 MB: 5 batches of 96 MB
    files = [LogFile(f"/l/{i}", f"l/{i}", n, 0, "h", f"s{i}", "d") for i, n in enumerate(sizes)]
    for workers, count in ((1, 5), (2, 6), (4, 8)):
        found = list(engine.batches(files, workers))
        assert [f for batch in found for f in batch] == files
        assert len(found) == count
        totals = [sum(f.size for f in batch) for batch in found]
        assert max(totals) - min(totals) < 2 * max(sizes)
        assert max(totals) <= engine.BATCH_BYTES
    # one batch's worth stays one batch (read in process, no worker started)
    assert len(list(engine.batches(files[:100], 2))) == 1


def test_a_connection_past_its_memory_limit_spills_into_the_folder_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps and ingest batches are held to a memory limit; what does not fit goes under the
    run's staging folder, never to DuckDB's default `.tmp` in the folder the user is in."""
    monkeypatch.chdir(tmp_path)
    spill = tmp_path / "warehouse/staging/run-1/spill"
    con = duckdb.connect()
    try:
        limit_memory(con, "64MB", spill)
        # ~160 MB of rows, then a window over them: both past the limit
        con.execute("CREATE TEMP TABLE t AS SELECT i, hash(i) AS h FROM range(10000000) r(i)")
        assert any(p.name.endswith(".tmp") for p in spill.iterdir())
        ranked = con.execute(
            "SELECT count(*), max(r) FROM (SELECT row_number() OVER (PARTITION BY i % 5000 "
            "ORDER BY h) AS r FROM t)"
        ).fetchall()
    finally:
        con.close()
    assert ranked == [(10_000_000, 2_000)]
    assert not (tmp_path / ".tmp").exists()


def test_batches_share_a_database_per_run_and_thread(tmp_path: Path) -> None:
    """A run's batches in one thread work on cursors of one database (their temp tables their
    own); a new run opens another; two threads' runs never close each other's."""
    from warehouse.ingest import batches as engine

    try:
        first = engine.batch_connection(tmp_path / "run-1/spill")
        first.execute("CREATE TEMP TABLE batch AS SELECT 1 AS x")
        second = engine.batch_connection(tmp_path / "run-1/spill")
        second.execute("CREATE TEMP TABLE batch AS SELECT 2 AS x")  # its own temp table
        assert first.execute("SELECT x FROM batch").fetchall() == [(1,)]
        second.execute("CREATE TEMP TABLE big AS SELECT range AS i FROM range(1000)")

        other: list[object] = []

        def another_run() -> None:
            try:
                engine.batch_connection(tmp_path / "run-2/spill").execute("SELECT 1").fetchall()
                engine.close_batch_database()
            except Exception as exc:  # noqa: BLE001 (reported below)
                other.append(exc)

        thread = threading.Thread(target=another_run)
        thread.start()
        thread.join()
        assert other == []
        # this thread's database is still open: the other run neither shared nor closed it
        assert second.execute("SELECT count(*) FROM big").fetchall() == [(1000,)]
        # a new run here does close it
        engine.batch_connection(tmp_path / "run-3/spill")
        with pytest.raises(duckdb.ConnectionException):
            second.execute("SELECT 1")
    finally:
        engine.close_batch_database()
