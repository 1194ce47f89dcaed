"""The `stretto` command as a user runs it, called in this process (one test starts a process:
a reader that goes away is a process boundary)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

from stretto import __version__
from stretto.cli import main
from stretto.cli.main import build_parser
from stretto.cli.queryresult import MAX_CELL, render
from stretto.home import Paths
from tests.conftest import REFERENCE_HOME, TAU2

SERVED_SHOP = REFERENCE_HOME / "served/shop"


def test_sessions_lists_the_reference_served_logs(capsys) -> None:
    assert main(["sessions", str(SERVED_SHOP)]) == 0
    out, err = capsys.readouterr()
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][0] == "session"
    # 4 LLM turns: two replies and two turns with the agent's calls (the flow's 3 lookups
    # are the proxy's, no LLM turn: Episode.llm_turns, as the console counts them)
    assert rows[1] == ["20260928T020401.117Z-14662", "shop", "quickstart", "2", "3", "4", "2"]
    assert len(rows) == 3 and "2 session(s)" in err


def test_a_malformed_log_is_an_error_naming_file_and_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.jsonl").write_text(
        '{"stretto_mcp_log":2,"session":"s","started_unix_ms":0}\n{"t_ms":1,"from":"x","raw":""}\n'
    )
    assert main(["sessions", str(tmp_path)]) == 1
    assert f"stretto: {tmp_path}/bad.jsonl:2: field `from`" in capsys.readouterr().err


def test_no_command_prints_help_and_exits_2(capsys) -> None:
    assert main([]) == 2
    assert "sessions" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys) -> None:
    from proxy.cli import main as proxy_main

    for command, run in (("stretto", main), ("stretto-proxy", proxy_main)):
        with pytest.raises(SystemExit) as done:
            run([flag])
        assert done.value.code == 0
        assert capsys.readouterr().out == f"{command} {__version__}\n"


# --- a reader that goes away --------------------------------------------------------------


class ClosedPipe(io.StringIO):
    """stdout whose reader has gone, as `| head` leaves it."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_the_command_quietly(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["sessions", str(SERVED_SHOP)]) == 141  # 128 + SIGPIPE, as Unix tools end
    assert "Traceback" not in capsys.readouterr().err


def test_a_reader_gone_before_the_first_line_leaves_no_traceback() -> None:
    """`stretto sessions DIR | head -2` in a real pipe: what is left in the buffer when the
    interpreter exits must not raise either."""
    with tempfile.TemporaryFile() as err:
        done = subprocess.Popen(
            [sys.executable, "-m", "stretto", "sessions", str(SERVED_SHOP)],
            stdout=subprocess.PIPE,
            stderr=err,
        )
        assert done.stdout is not None
        done.stdout.close()  # the reader is gone before the command writes a line
        status = done.wait()
        err.seek(0)
        stderr = err.read().decode()
    assert status == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
def test_a_reader_gone_mid_output_ends_the_command_with_141(
    tmp_path: Path, unbuffered: bool
) -> None:
    """`stretto sessions DIR | head -2` on more output than a pipe holds: the write the
    reader left half-taken ends the command with 141 (as SIGPIPE ends Unix tools), never 0
    with the rest dropped — with PYTHONUNBUFFERED too (stdout then writes to its file
    directly, and Python does not retry a short write)."""
    from tests.builders import shop_log, write_logs

    folder = write_logs(tmp_path / "logs", [shop_log(i) for i in range(4000)])  # ~230 KB
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryFile() as err:
        done = subprocess.Popen(
            [sys.executable, "-m", "stretto", "sessions", str(folder)],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        assert done.stdout is not None
        first = os.read(done.stdout.fileno(), 200)  # the table has begun: `head -2`
        done.stdout.close()
        status = done.wait()
        err.seek(0)
        stderr = err.read().decode()
    assert first.startswith(b"session ")
    assert status == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


# --- help ---------------------------------------------------------------------------------


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_command_help_ends_with_examples_that_parse(name: str) -> None:
    parser = subcommands()[name]
    help_text = parser.format_help()
    examples = help_text.split("\nexamples:\n")[1].strip().splitlines()
    assert 1 <= len(examples) <= 2, help_text
    commands = [line.strip() for line in examples if line.strip().startswith("stretto ")]
    assert commands, f"no `stretto {name}` example"
    for line in commands:
        words = shlex.split(line, comments=True)
        words = words[: words.index("|")] if "|" in words else words
        assert words[1] == name
        build_parser().parse_args(words[1:])  # exits 2 on an option that does not exist


def test_learn_needs_an_oracle_an_arbiter_or_habit_only(capsys) -> None:
    usage = subcommands()["learn"].format_usage()
    assert "[--habit-only]" in usage and "[--oracle URI]" in usage
    assert main(["learn", "--sessions", ".", "--domain", "d", "--out", "x.flow.json"]) == 2
    assert "learn needs --oracle URI to fit the flow's arbiter" in capsys.readouterr().err


def test_init_usage_names_every_option() -> None:
    """init's usage line is written by hand (the server's command follows --)."""
    init = subcommands()["init"]
    usage = init.format_usage()
    options = {o for a in init._actions for o in a.option_strings if o.startswith("--")}
    assert {o for o in options if o not in usage} == {"--help"}
    assert "--decider" in options and "--home" in options and "-- SERVER" in usage
    (decider,) = [a for a in init._actions if "--decider" in a.option_strings]
    assert f"[--decider {{{','.join(decider.choices)}}}]" in usage  # what it accepts
    assert set(decider.choices) == {"arbiter", "reach", "habit"}


@pytest.mark.parametrize(
    ("argv", "option", "near"),
    [
        (
            ["learn", "--sesions", "d", "--domain", "x", "--habit-only", "--out", "f"],
            "--sesions",
            "--sessions",
        ),
        (["learn", "--sesions", "d"], "--sesions", "--sessions"),  # not "required: --domain"
        (["ingest", "--hoem", "h"], "--hoem", "--home"),
        (["init", "--nmae", "notes", "--", "server"], "--nmae", "--name"),
        (["audit", "--flow=f", "--sesions=d"], "--sesions", "--sessions"),
    ],
)
def test_a_misspelt_option_is_named_with_the_nearest_one(
    argv: list[str], option: str, near: str, capsys
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: stretto {argv[0]} ")  # the command's usage, not stretto's
    assert err.rstrip().splitlines()[-1] == (
        f"stretto {argv[0]}: error: unknown option {option} (did you mean {near}?)"
    )


def test_an_option_nothing_is_near_and_other_usage_errors(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["ingest", "--zzzzzz"])
    err = capsys.readouterr().err
    assert "unknown option --zzzzzz (`stretto ingest --help` lists them)" in err
    with pytest.raises(SystemExit):
        main(["learn", "--o", "x"])  # the start of several: argparse's own message
    assert "ambiguous option: --o could match" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["learn", "--sessions", "d"])  # no misspelling: what is missing
    err = capsys.readouterr().err
    assert err.startswith("usage: stretto learn ") and "required: --domain, --out" in err
    # an abbreviation argparse takes is no misspelling: init runs, and wants a server
    assert main(["init", "--na", "notes"]) == 2
    assert "give the server's command after --" in capsys.readouterr().err


def test_threshold_defaults_to_the_proxys() -> None:
    """Neither the proxy nor the offline commands fix a threshold when none is given: each
    serves the flow at its own (stretto.model.decide.served_threshold), else the default."""
    from proxy.cli import parse_args
    from stretto.model.decide import DEFAULT_THRESHOLD, served_threshold

    served, _ = parse_args(["--", "server"])
    parser = build_parser()
    for argv in (
        ["flow-show", "f"],
        ["replay", "--flow", "f", "--sessions", "d"],
        ["search", "--flow", "f", "--sessions", "d"],
        ["promote", "--flow", "f", "--shadow", "d"],
    ):
        assert parser.parse_args(argv).threshold is None is served.flow_threshold
    assert served_threshold({}) == DEFAULT_THRESHOLD
    assert served_threshold({"serving": {"threshold": 0.2}}) == 0.2
    assert served_threshold({"serving": {"threshold": 0.2}}, 0.5) == 0.5


# --- the home -----------------------------------------------------------------------------


def test_the_home_comes_from_stretto_home_and_reports_go_under_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRETTO_HOME", str(tmp_path / "home"))
    paths = Paths.at()
    assert paths.home == (tmp_path / "home").resolve()
    assert paths.logs == paths.home / "logs" and paths.warehouse == paths.home / "warehouse"
    assert (paths.shadow, paths.explore) == (paths.home / "shadow", paths.home / "explore")
    folder = paths.report_folder("shop", "audit", when=0)
    assert folder == paths.home / "reports" / "shop" / "audit-19700101T000000"
    assert Paths.at(tmp_path / "other").home == (tmp_path / "other").resolve()


# --- stretto sql ----------------------------------------------------------------------------


def query(sql: str):
    return duckdb.connect().sql(sql).to_arrow_table()


ODD = query(
    "SELECT 'quickstart' AS name, 'nan'::DOUBLE AS nan, 'inf'::DOUBLE AS inf, "
    "'-inf'::DOUBLE AS ninf, 1.5 AS x, [1, 2] AS list, {'a': 1, 'b': 'x'} AS struct, "
    "[{'q': 'é'}] AS deep, NULL::INTEGER[] AS no_list, NULL AS nothing, sum(3) AS total, "
    "repeat('abcdefghij', 10) AS long, 'a' || chr(10) || 'b' AS lines"
)


def test_sql_json_is_valid_json_with_null_for_nan_and_infinities() -> None:
    text = render(ODD, "json")
    rows = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert rows == [
        {
            "name": "quickstart",
            "nan": None,
            "inf": None,
            "ninf": None,
            "x": 1.5,
            "list": [1, 2],
            "struct": {"a": 1, "b": "x"},
            "deep": [{"q": "é"}],
            "no_list": None,
            "nothing": None,
            "total": 3,  # DuckDB's sum is a decimal: written as a number
            "long": "abcdefghij" * 10,
            "lines": "a\nb",
        }
    ]
    assert json.loads(render(query("SELECT 1 AS x WHERE false"), "json")) == []


def test_sql_csv_writes_nested_values_as_json() -> None:
    (header, row) = list(csv.reader(io.StringIO(render(ODD, "csv"))))
    cells = dict(zip(header, row, strict=True))
    assert json.loads(cells["list"]) == [1, 2]
    assert json.loads(cells["struct"]) == {"a": 1, "b": "x"}
    assert json.loads(cells["deep"]) == [{"q": "é"}]
    assert cells["no_list"] == "" and cells["nothing"] == ""
    assert cells["lines"] == "a\nb" and cells["long"] == "abcdefghij" * 10
    assert math.isnan(float(cells["nan"])) and cells["total"] == "3"


def test_sql_table_is_aligned_with_long_cells_cut() -> None:
    table = query(
        "SELECT * FROM (VALUES ('a', 1, NULL), ('bbbbbb', 22, 'x')) t(name, n, note) "
        "UNION ALL SELECT repeat('c', 100), 333, 'y' || chr(10) || 'z'"
    )
    lines = render(table, "table").splitlines()
    assert lines[0].split() == ["name", "n", "note"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    starts = [lines[0].index("n "), lines[0].index("note")]
    for line in lines[2:5]:  # every row's cells start under their column's name
        assert line[starts[0] - 2 : starts[0]] == "  " and line[starts[0]] != " "
    assert lines[2].split() == ["a", "1"]  # a null is an empty cell
    assert lines[4].startswith("c" * (MAX_CELL - 1) + "…  333  y\\nz")
    assert lines[-1] == "(3 rows)"


def test_sql_numbers_repeated_column_names() -> None:
    rows = json.loads(render(query("SELECT 1 AS a, 2 AS a"), "json"))
    assert rows == [{"a": 1, "a_1": 2}]


@pytest.fixture(scope="module")
def warehouse_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("sql") / "home"
    shutil.copytree(REFERENCE_HOME / "logs/shop", home / "logs/shop")
    assert main(["ingest", "--home", str(home)]) == 0
    return home


def test_sql_on_the_warehouse(warehouse_home: Path, capsys) -> None:
    capsys.readouterr()
    sql = (
        "SELECT agent_model, count(*) AS sessions, sum(lines_read) AS lines "
        "FROM sessions GROUP BY 1"
    )
    assert main(["sql", "--home", str(warehouse_home), sql, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["agent_model"] == "quickstart" and row["sessions"] == 6
    assert isinstance(row["lines"], int) and row["lines"] > 0
    assert main(["sql", "--home", str(warehouse_home), sql]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:2] == ["quickstart", "6"]
    assert main(["sql", "--home", str(warehouse_home), "SELECT * FROM nope"]) == 1
    assert "query failed" in capsys.readouterr().err


# --- a domain that does not fit --------------------------------------------------------------


def test_learn_refuses_a_domain_no_log_is_of(tmp_path: Path, capsys) -> None:
    argv = ["learn", "--sessions", str(REFERENCE_HOME / "logs/shop"), "--habit-only"]
    out = tmp_path / "x.flow.json"
    assert main([*argv, "--domain", "shpo", "--out", str(out), "--home", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "no session in" in err and "is of the domain 'shpo'; its logs are of: shop (6)" in err
    assert not out.exists() and not (tmp_path / "cache").exists()  # refused before any work
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (
        main(
            ["learn", "--sessions", str(empty), "--domain", "shop", "--habit-only"]
            + ["--out", str(out)]
        )
        == 1
    )
    assert (
        f"stretto: {empty}: no session logs (*.jsonl) in it or below it" in capsys.readouterr().err
    )


def test_learn_warns_when_some_logs_are_of_another_domain(tmp_path: Path, capsys) -> None:
    out = tmp_path / "shop.flow.json"
    argv = ["learn", "--sessions", str(REFERENCE_HOME / "logs"), "--domain", "shop"]
    assert main([*argv, "--habit-only", "--out", str(out), "--home", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 of 7 sessions in" in err
    assert "another domain than 'shop' (retail (1), shop (6)); the shop flow learns from all" in err
    assert json.loads(out.read_text())["manifest"]["domain"] == "shop"


def test_replay_and_search_refuse_episodes_of_another_domain(shop_flow_path: Path, capsys) -> None:
    airline = TAU2 / "results/sierra-model_training/gpt-4.1_airline_default_gpt-4.1_1trials.json.gz"
    for command in ("replay", "search"):
        assert main([command, "--flow", str(shop_flow_path), "--results", str(airline)]) == 2
        assert capsys.readouterr().err == (
            f"stretto: {airline}: a results file of the airline domain, not the flow's shop "
            f"({shop_flow_path})\n"
        )
    retail = REFERENCE_HOME / "logs/retail"
    assert main(["replay", "--flow", str(shop_flow_path), "--sessions", str(retail)]) == 2
    assert capsys.readouterr().err == (
        f"stretto: {retail}: sessions of another domain than the flow's shop ({shop_flow_path}): "
        "retail (1)\n"
    )
    assert main(["replay", "--flow", str(shop_flow_path), "--sessions", str(SERVED_SHOP)]) == 0


@pytest.fixture(scope="module")
def shop_and_retail(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A shop flow (learned from six shop sessions), and a folder of three retail sessions."""
    from tests.builders import learn, shop_log, write_logs

    tmp = tmp_path_factory.mktemp("domains")
    shop = write_logs(tmp / "shop", [shop_log(i) for i in range(6)])
    flow = tmp / "shop.flow.json"
    assert learn(shop, flow, tmp / "home").returncode == 0
    retail = []
    for i in range(3):
        log = shop_log(100 + i)
        log.lines[0]["domain"] = "retail"
        retail.append(log)
    return flow, write_logs(tmp / "retail", retail), tmp


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "--flow", "{flow}", "--sessions", "{other}", "--out", "{out}"],
        ["evaluate", "--sessions", "{other}", "--flow", "{flow}", "--out", "{out}"],
        ["promote", "--flow", "{flow}", "--shadow", "{other}", "--out", "{out}"],
        ["stage", "--flow", "{flow}", "--sessions", "{other}", "--home", "{out}"],
        ["replay", "--flow", "{flow}", "--sessions", "{other}", "--out", "{out}"],
        ["search", "--flow", "{flow}", "--sessions", "{other}", "--out", "{out}"],
        ["drift", "--flow", "{flow}", "--sessions", "{other}", "--out", "{out}"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_flow_and_sessions_of_another_domain_are_refused(
    shop_and_retail: tuple[Path, Path, Path], argv: list[str], capsys
) -> None:
    """Every command that reads sessions with a flow refuses sessions of another domain the
    same way (one check, stretto.cli.options.check_domain), exit 2, and writes nothing."""
    flow, other, tmp = shop_and_retail
    out = tmp / f"out-{argv[0]}"
    words = [w.format(flow=flow, other=other, out=out) for w in argv]
    served = flow.read_bytes()
    assert main(words) == 2
    out_, err = capsys.readouterr()
    assert err == (
        f"stretto: {other}: sessions of another domain than the flow's shop ({flow}): retail (3)\n"
    )
    assert out_ == "" and not out.exists()
    assert flow.read_bytes() == served
    assert not (flow.parent / "shop.staged.flow.json").exists()


def test_a_log_that_names_no_domain_is_of_no_other_domain(
    shop_and_retail: tuple[Path, Path, Path], capsys
) -> None:
    """A log whose header names no domain may be of any: beside the flow's own domain it is
    never counted as another one, neither by the commands that read sessions with a flow nor
    by `learn --domain`."""
    from tests.builders import shop_log, write_logs

    flow, retail, tmp = shop_and_retail
    unnamed = []
    for i in range(2):
        log = shop_log(200 + i)
        del log.lines[0]["domain"]
        unnamed.append(log)
    folder = write_logs(tmp / "unnamed", unnamed)
    out = tmp / "out-unnamed"
    assert main(["replay", "--flow", str(flow), "--sessions", str(folder), "--out", str(out)]) == 0
    learned = tmp / "unnamed.flow.json"
    argv = ["learn", "--sessions", str(folder), "--domain", "shop", "--habit-only"]
    assert main([*argv, "--out", str(learned), "--home", str(tmp / "home")]) == 0
    assert "another domain" not in capsys.readouterr().err
    for path in retail.glob("*.jsonl"):
        (folder / path.name).write_bytes(path.read_bytes())
    assert main(["replay", "--flow", str(flow), "--sessions", str(folder), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"stretto: {folder}: sessions of another domain than the flow's shop ({flow}): retail (3)\n"
    )


def test_audit_with_nothing_to_score_says_so_and_exits_1(
    shop_and_retail: tuple[Path, Path, Path], capsys
) -> None:
    """Sessions where the agent called no tool: no decision to score (not "Agreement: 0.0%")."""
    from tests.builders import HEADER, LogBuilder, write_logs

    flow, _, tmp = shop_and_retail
    quiet = []
    for i in range(2):
        log = LogBuilder()
        log.lines[0] = {**HEADER, "session": f"q-{i}", "domain": "shop"}
        log.say(1, "user", "Hello?").say(2, "assistant", "Hello.")
        quiet.append(log)
    folder = write_logs(tmp / "quiet", quiet)
    out = tmp / "quiet-audit"
    assert main(["audit", "--flow", str(flow), "--sessions", str(folder), "--out", str(out)]) == 1
    printed, err = capsys.readouterr()
    assert printed == "" and not out.exists()
    assert err == (
        f"stretto: nothing to score: the 2 session(s) in {folder} hold no decision the flow "
        "makes (a result of the agent's call that something followed); nothing written\n"
    )


@pytest.mark.slow  # an ingest of 3,000 sessions, interrupted, then done again
def test_ctrl_c_during_ingest_is_one_line_and_130_and_the_next_ingest_recovers(
    tmp_path: Path,
) -> None:
    """SIGINT to a real `stretto ingest` mid-run (once its staging folder is there): one line
    on stderr, not Dagster's traceback nor DuckDB's "Query interrupted", status 130; the next
    ingest removes the partial run and the warehouse then holds every session."""
    import signal

    from tests.builders import shop_log, stretto, wait_until, write_logs

    home = tmp_path / "home"
    write_logs(home / "logs" / "shop", [shop_log(i) for i in range(3000)])
    staging = home / "warehouse" / "staging"
    with tempfile.TemporaryFile() as err:
        done = subprocess.Popen(
            [sys.executable, "-m", "stretto", "ingest", "--home", str(home)],
            stdout=subprocess.PIPE,
            stderr=err,
        )
        wait_until(  # the run has begun writing (or has ended: the assertions below say so)
            lambda: done.poll() is not None or (staging.is_dir() and any(staging.iterdir())),
            "the ingest run to begin writing",
            120,
        )
        done.send_signal(signal.SIGINT)
        out, _ = done.communicate()
        err.seek(0)
        stderr = err.read().decode()
    assert (done.returncode, stderr) == (
        130,
        "stretto: interrupted; the next ingest removes the partial run\n",
    )
    assert out == b""
    again = stretto("ingest", "--home", home)
    assert again.returncode == 0, again.stderr
    assert not staging.is_dir() or not any(staging.iterdir())  # the partial run is gone
    counted = stretto(
        "sql", "SELECT count(*) AS n FROM sessions", "--format", "json", "--home", home
    )
    assert json.loads(counted.stdout) == [{"n": 3000}]
