"""`stretto init` and `stretto doctor`, as a user runs them (in this process)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from stretto.cli import main
from stretto.cli.main import build_parser
from tests.conftest import REFERENCE_HOME, ROOT

SERVER = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/home/me/notes"]
PROXY = str(Path(sys.executable).parent / "stretto-proxy")


@pytest.fixture
def no_home(monkeypatch) -> None:
    """A user who set no STRETTO_HOME."""
    monkeypatch.delenv("STRETTO_HOME", raising=False)


def init(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["init", *argv])
    out, err = capsys.readouterr()
    return status, out, err


# --- init: what it prints ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "table", "typed"),
    [("claude-desktop", "mcpServers", False), ("cursor", "mcpServers", False)],
)
def test_init_prints_the_hosts_json(host: str, table: str, typed: bool, no_home, capsys) -> None:
    status, out, err = init(capsys, "--host", host, "--", *SERVER)
    assert status == 0
    entry = json.loads(out)[table]["filesystem"]
    assert entry == {
        "command": PROXY,
        "args": ["--record", "~/.stretto/logs/filesystem", "--domain", "filesystem", "--", *SERVER],
    }
    assert Path(entry["command"]).exists()
    assert (
        "stretto learn --sessions ~/.stretto/logs/filesystem --domain filesystem --habit-only "
        "--out ~/.stretto/flows/filesystem.flow.json" in err
    )
    assert (
        "serve it: run this command again with --flow ~/.stretto/flows/filesystem.flow.json" in err
    )


def test_init_for_vscode_is_typed_under_servers(no_home, capsys) -> None:
    status, out, _ = init(capsys, "--host", "vscode", "--", *SERVER)
    assert status == 0 and json.loads(out)["servers"]["filesystem"]["type"] == "stdio"


def test_init_for_claude_code_prints_what_claude_mcp_add_json_takes(no_home, capsys) -> None:
    status, out, err = init(capsys, "--host", "claude-code", "--name", "notes", "--", *SERVER)
    assert status == 0
    entry = json.loads(out)
    assert "mcpServers" not in entry and entry["type"] == "stdio" and entry["command"] == PROXY
    assert "claude mcp add-json notes '<the JSON above>'" in err


def test_init_honours_stretto_home_and_home(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("STRETTO_HOME", str(tmp_path / "sh"))
    status, out, err = init(capsys, "--", *SERVER)
    args = json.loads(out)["mcpServers"]["filesystem"]["args"]
    assert status == 0 and args[:2] == ["--record", f"{tmp_path}/sh/logs/filesystem"]
    assert f"--out {tmp_path}/sh/flows/filesystem.flow.json" in err and "~/.stretto" not in err
    status, out, _ = init(capsys, "--home", str(tmp_path / "given"), "--", *SERVER)
    assert json.loads(out)["mcpServers"]["filesystem"]["args"][1] == (
        f"{tmp_path}/given/logs/filesystem"
    )
    assert not (tmp_path / "sh").exists() and not (tmp_path / "given").exists()  # only printed
    with pytest.raises(SystemExit):
        build_parser().parse_args(["init", "--help"])
    assert "else $STRETTO_HOME, else ~/.stretto" in " ".join(capsys.readouterr().out.split())


def test_init_serves_a_flow_under_its_domain(shop_flow_path: Path, no_home, capsys) -> None:
    status, out, err = init(capsys, "--flow", str(shop_flow_path), "--", "node", "server.js")
    assert status == 0
    args = json.loads(out)["mcpServers"]["shop"]["args"]
    assert args == [
        "--record",
        "~/.stretto/logs/shop",
        "--domain",
        "shop",
        "--flow",
        str(shop_flow_path),
        "--",
        "node",
        "server.js",
    ]
    assert f"stretto flow-diff {shop_flow_path} ~/.stretto/flows/shop.new.flow.json" in err


def test_init_shadow_and_explore_record_into_folders_of_their_own(
    shop_flow_path: Path, no_home, capsys
) -> None:
    flow = ["--flow", str(shop_flow_path), "--decider", "habit"]
    status, out, err = init(capsys, *flow, "--shadow", "--", "node", "server.js")
    args = json.loads(out)["mcpServers"]["shop"]["args"]
    assert status == 0 and args[:2] == ["--record", "~/.stretto/shadow/shop"]
    assert args[4:9] == ["--flow", str(shop_flow_path), "--flow-decider", "habit", "--flow-shadow"]
    assert f"stretto promote --flow {shop_flow_path} --shadow ~/.stretto/shadow/shop" in err
    status, out, err = init(capsys, *flow, "--shadow", "--explore", "0.2", "--", "node", "s.js")
    args = json.loads(out)["mcpServers"]["shop"]["args"]
    assert status == 0 and args[:2] == ["--record", "~/.stretto/explore/shop"]
    assert args[args.index("--flow-explore") + 1] == "0.2" and "--flow-shadow" in args
    assert f"stretto evaluate --sessions ~/.stretto/explore/shop --flow {shop_flow_path}" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "give the server's command after --"),
        (["--shadow", "--", "s"], "--shadow goes with --flow"),
        (["--decider", "habit", "--", "s"], "--decider goes with --flow"),
        (["--explore", "0.1", "--", "s"], "--explore EPS goes with --flow"),
        (["--force", "--", "s"], "--force goes with --write"),
        (["--name", "../up", "--", "s"], "--name '../up': letters, digits"),
        # the domain's own rule (stretto.logs.domain): the warehouse would quarantine its logs
        (["--name", "d" * 129, "--", "s"], "at most 128 characters"),
    ],
)
def test_init_usage_errors(argv: list[str], says: str, capsys) -> None:
    status, out, err = init(capsys, *argv)
    assert status == 2 and says in err and out == ""


def test_init_refuses_a_bad_flow(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.flow.json"
    bad.write_text("{}")
    status, out, err = init(capsys, "--flow", str(bad), "--", *SERVER)
    assert status == 1 and out == ""
    assert f"stretto: {bad}: this is not a stretto flow file" in err


# --- init --write --------------------------------------------------------------------------


def test_init_writes_a_new_configuration_file(tmp_path: Path, no_home, capsys) -> None:
    path = tmp_path / "project" / ".mcp.json"
    status, out, err = init(capsys, "--host", "claude-code", "--write", str(path), "--", *SERVER)
    assert status == 0 and out == ""
    entry = json.loads(path.read_text())["mcpServers"]["filesystem"]
    assert entry["type"] == "stdio" and entry["args"][-4:] == SERVER
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"stretto: added the `filesystem` server in {path}\n" in err
    assert "1. restart the host" in err
    assert sorted(p.name for p in path.parent.iterdir()) == [".mcp.json"]  # no backup, no temp


def test_init_merges_into_a_configuration_and_keeps_a_backup(
    tmp_path: Path, no_home, capsys
) -> None:
    path = tmp_path / "claude_desktop_config.json"
    before = {"globalShortcut": "Ctrl+Space", "mcpServers": {"other": {"command": "x"}}}
    path.write_text(json.dumps(before))
    path.chmod(0o640)
    write = ["--write", str(path), "--name", "notes", "--"]
    assert init(capsys, *write, *SERVER)[0] == 0
    after = json.loads(path.read_text())
    assert after["globalShortcut"] == "Ctrl+Space" and after["mcpServers"]["other"] == {
        "command": "x"
    }
    assert after["mcpServers"]["notes"]["args"][:2] == ["--record", "~/.stretto/logs/notes"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    (backup,) = tmp_path.glob("claude_desktop_config.json.*.bak")
    assert json.loads(backup.read_text()) == before

    # the same entry again: nothing to write
    status, _, err = init(capsys, *write, *SERVER)
    assert status == 0 and "already has this `notes` server; nothing written" in err
    assert len(list(tmp_path.glob("*.bak"))) == 1

    # a different server of the same name: refused, the file untouched; --force replaces it
    written = path.read_text()
    status, _, err = init(capsys, *write, "node", "other.js")
    assert status == 1 and path.read_text() == written
    assert f"stretto: {path}: field `mcpServers.notes`: a different server of that name" in err
    assert "give --force" in err
    status, _, err = init(capsys, "--force", *write, "node", "other.js")
    assert status == 0 and f"replaced the `notes` server in {path}" in err
    assert json.loads(path.read_text())["mcpServers"]["notes"]["args"][-2:] == ["node", "other.js"]
    assert len(list(tmp_path.glob("*.bak"))) == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object at the top"),
        ('{"mcpServers": []}', "field `mcpServers`: expected an object of servers"),
    ],
)
def test_init_refuses_a_file_it_cannot_merge_into(
    text: str, says: str, tmp_path: Path, capsys
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(text)
    status, _, err = init(capsys, "--write", str(path), "--", *SERVER)
    assert status == 1 and f"stretto: {path}: " in err and says in err
    assert path.read_text() == text and not list(tmp_path.glob("*.bak"))


# --- doctor --------------------------------------------------------------------------------


def doctor(capsys, home: Path) -> tuple[int, dict[str, tuple[str, str]], str]:
    """Its status, its rows by check ({check: (ok, detail)}) and its stderr."""
    status = main(["doctor", "--home", str(home)])
    out, err = capsys.readouterr()
    header, _, *lines = out.splitlines()
    width = header.index("  ok")  # the checks' column
    rows = {
        line[:width].rstrip(): (line[width + 2 : width + 6].strip(), line[width + 8 :])
        for line in lines
    }
    return status, rows, err


@pytest.fixture
def bare(monkeypatch, tmp_path: Path) -> Path:
    """A user right after `make setup`: no DAGSTER_HOME, the venv activated; a home path that
    does not exist yet."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ["PATH"])
    return tmp_path / "home"


def test_doctor_passes_a_newcomer_and_changes_nothing(bare: Path, capsys) -> None:
    status, rows, err = doctor(capsys, bare)
    assert status == 0, rows
    assert rows["Python 3.11"][0] == "yes" and rows["package dagster"][0] == "yes"
    assert rows["stretto-proxy on PATH"] == ("yes", PROXY)
    assert rows["STRETTO_HOME"][0] == "yes" and "not there yet" in rows["STRETTO_HOME"][1]
    assert rows["warehouse"][0] == "warn" and "`stretto ingest` makes it" in rows["warehouse"][1]
    assert rows["flows"][0] == "yes" and rows["DAGSTER_HOME"][0] == "warn"
    assert "only the Dagster UI needs it" in rows["DAGSTER_HOME"][1]
    assert "warning(s), nothing stretto itself needs" in err and "problem" not in err
    assert not bare.exists()


def test_doctor_says_how_to_put_the_proxy_on_path(bare: Path, monkeypatch, capsys) -> None:
    bin_dir = str(Path(sys.executable).parent)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p != bin_dir]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    status, rows, _ = doctor(capsys, bare)
    assert status == 0
    ok, detail = rows["stretto-proxy on PATH"]
    assert ok == "warn" and f"source {bin_dir}/activate" in detail


def test_doctor_checks_dagster_home_with_warnings(
    bare: Path, tmp_path, monkeypatch, capsys
) -> None:
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    status, rows, _ = doctor(capsys, bare)
    assert status == 0 and rows["dagster.yaml"][0] == "warn"
    shutil.copy(ROOT / "pipeline" / "dagster.yaml", dagster_home / "dagster.yaml")
    status, rows, _ = doctor(capsys, bare)
    assert status == 0 and rows["DAGSTER_HOME"][0] == rows["dagster telemetry off"][0] == "yes"
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    status, rows, _ = doctor(capsys, bare)
    assert status == 0 and rows["dagster telemetry off"][0] == "warn"
    monkeypatch.setenv("DAGSTER_HOME", "relative/dagster")
    status, rows, _ = doctor(capsys, bare)
    assert status == 0 and "is not an absolute path" in rows["DAGSTER_HOME"][1]


def test_doctor_checks_the_warehouse_and_the_flows(
    bare: Path, shop_flow_path: Path, capsys
) -> None:
    shutil.copytree(REFERENCE_HOME / "logs/shop", bare / "logs/shop")
    assert main(["ingest", "--home", str(bare)]) == 0
    (bare / "flows").mkdir()
    shutil.copy(shop_flow_path, bare / "flows/shop.flow.json")
    capsys.readouterr()
    status, rows, _ = doctor(capsys, bare)
    assert status == 0
    assert rows["warehouse"][0] == "yes" and ": 6 sessions, " in rows["warehouse"][1]
    assert rows["flows"] == ("yes", f"1 of 1 valid in {bare}/flows")

    (bare / "flows/typo.flow.json").write_text('{"stretto_flow": 1}')
    status, rows, err = doctor(capsys, bare)
    assert status == 1 and rows["flows"][0] == "NO" and rows["flow typo.flow.json"][0] == "NO"
    assert f"{bare}/flows/typo.flow.json" in rows["flow typo.flow.json"][1]
    assert "stretto: 2 problem(s): flows, flow typo.flow.json" in err
    (bare / "flows/typo.flow.json").unlink()

    # what the warehouse's readers read: its committed Parquet files
    data = next((bare / "warehouse/parquet/calls").rglob("*.parquet"))
    data.write_bytes(b"not parquet")
    status, rows, err = doctor(capsys, bare)
    assert status == 1 and rows["warehouse"][0] == "NO" and "cannot be read" in rows["warehouse"][1]


def test_doctor_refuses_a_home_that_is_a_file(bare: Path, capsys) -> None:
    bare.write_text("")
    status, rows, err = doctor(capsys, bare)
    assert status == 1 and rows["STRETTO_HOME"] == ("NO", f"{bare}: not a folder")
    assert "1 problem(s): STRETTO_HOME" in err


def test_doctor_checks_each_runner_and_never_prints_a_key(
    bare: Path, shop_flow_path: Path, monkeypatch, capsys
) -> None:
    """The runner a flow's arbiter names and those given with --oracle: reachable, the model
    there, the key set; --network asks one question, caching nothing."""
    from stretto.oracle.arbiter import Fold, new_arbiter
    from stretto.oracle.scores import Rates
    from tests.conftest import free_port
    from tests.stretto.oracle.apiserver import ApiServer, look_up_first, openai_chat

    flow = json.loads(shop_flow_path.read_text())
    fold = Fold([1.0, 1.0, 0.0, 0.0, 0.0], Rates(), 1)
    flow["arbiter"] = new_arbiter(model="openai://demo-model", folds=[fold]).to_json()
    (bare / "flows").mkdir(parents=True)
    (bare / "flows/shop.flow.json").write_text(json.dumps(flow))
    secret = "sk-ant-do-not-print-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ApiServer() as api:
        models = {"object": "list", "data": [{"id": "demo-model", "object": "model"}]}
        api.route("GET", "/models", lambda seen: (200, {}, models))
        api.route("POST", "/chat/completions", openai_chat(look_up_first))
        monkeypatch.setenv("OPENAI_BASE_URL", api.url)

        def run(*options: str) -> tuple[int, str, str]:
            status = main(["doctor", "--home", str(bare), *options])
            out, err = capsys.readouterr()
            return status, out, err

        status, out, err = run("--oracle", "claude://claude-haiku-4-5")
        assert api.requests_to("/chat/completions") == []  # checked, not asked
        asked_status, asked, _ = run("--network")
        assert len(api.requests_to("/chat/completions")) == 1
    row = next(line for line in out.splitlines() if line.startswith("oracle openai://"))
    assert "(shop.flow.json)" in row and " yes " in row and "lists demo-model" in row
    claude = next(line for line in out.splitlines() if line.startswith("oracle claude://"))
    assert " NO " in claude and "cannot reach http://127.0.0.1:" in claude
    assert status == 1 and "oracle claude://claude-haiku-4-5 (--oracle)" in err
    assert secret not in out + err
    network = next(line for line in asked.splitlines() if line.startswith("oracle openai://"))
    assert asked_status == 0 and "answered a question (get_order_status at 1.00" in network
    assert not (bare / "oracle-cache").exists()


# --- init --server: several servers of one host session ------------------------------------


def test_init_configures_several_servers_at_once(tmp_path: Path, no_home, capsys) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}}))
    servers = [
        "--server",
        "github=npx -y @modelcontextprotocol/server-github",
        "--server",
        "docs=node '/srv/my docs/server.js' --port 3",
    ]
    status, out, err = init(capsys, "--name", "work", *servers)
    assert status == 0
    printed = json.loads(out)["mcpServers"]
    assert list(printed) == ["github", "docs"]
    assert printed["github"] == {
        "command": PROXY,
        "args": [
            "--record",
            "~/.stretto/logs/work",
            "--domain",
            "work",
            "--server-name",
            "github",
            "--",
            "npx",
            "-y",
            "@modelcontextprotocol/server-github",
        ],
    }
    assert printed["docs"]["args"][4:] == [
        "--server-name",
        "docs",
        "--",
        "node",
        "/srv/my docs/server.js",
        "--port",
        "3",
    ]

    # written in one go beside what the file had, one backup
    status, _, err = init(capsys, "--name", "work", "--write", str(path), *servers)
    assert status == 0 and f"added the `github`, `docs` servers in {path}" in err
    config = json.loads(path.read_text())["mcpServers"]
    assert config["other"] == {"command": "x"} and config["github"] == printed["github"]
    assert config["docs"] == printed["docs"]
    assert len(list(tmp_path.glob("*.bak"))) == 1
    status, _, err = init(capsys, "--name", "work", "--write", str(path), *servers)
    assert status == 0 and "already has these `github`, `docs` servers; nothing written" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--server", "github=npx srv"], "--server needs --name"),
        (["--name", "w", "--server", "git::hub=npx srv"], "give NAME=COMMAND"),
        (["--name", "w", "--server", "github="], "--server github: no command after '='"),
        (["--name", "w", "--server", "a=x", "--server", "a=y"], "--server a: given twice"),
        (["--name", "w", "--server", "a=x", "--", "node", "s.js"], "give either --server"),
    ],
)
def test_init_refuses_servers_given_wrongly(capsys, no_home, argv, said) -> None:
    status, out, err = init(capsys, *argv)
    assert status == 2 and out == "" and said in err


# --- init: a server that will not start, a flow learning would overwrite ----------------------


def test_init_warns_when_the_server_command_will_not_start(tmp_path: Path, no_home, capsys) -> None:
    """The configuration is printed all the same (it may be for another machine), with a
    warning on stderr naming why the host would fail to start the server."""
    plain = tmp_path / "plain.js"
    plain.write_text("")
    for command, said in [
        ("/does/not/exist", "/does/not/exist does not exist"),
        ("no-such-mcp-server-here", "'no-such-mcp-server-here' is not found on PATH"),
        (str(plain), f"{plain} is not executable"),
        (str(tmp_path), f"{tmp_path} is not a file"),
    ]:
        status, out, err = init(capsys, "--name", "notes", "--", command, "x")
        assert status == 0 and json.loads(out)["mcpServers"]["notes"]["args"][-2:] == [command, "x"]
        assert f"stretto: warning: {said}: the host will fail to start the server\n" in err
    status, _, err = init(
        capsys, "--name", "w", "--server", f"a={sys.executable} -V", "--server", "b=/nope/srv"
    )
    assert status == 0 and err.count("warning") == 1
    assert "stretto: warning: --server b: /nope/srv does not exist" in err
    status, _, err = init(capsys, "--name", "notes", "--", sys.executable, "server.py")
    assert status == 0 and "warning" not in err


def test_init_never_suggests_npx_downloads(capsys) -> None:
    status, _, err = init(capsys)
    assert status == 2 and "npx -y @" not in err  # README: an installed server, not a download
    assert "/node_modules/.bin/mcp-server-filesystem ~/notes" in err
    help_text = build_parser()._subparsers._group_actions[0].choices["init"].format_help()
    assert "npx -y" not in help_text


def test_init_next_steps_never_learn_over_a_flow_there(tmp_path: Path, capsys) -> None:
    """Without --flow, the steps learn into HOME/flows/NAME.flow.json only while no flow is
    there: else into NAME.new.flow.json, compared with flow-diff (learn --out overwrites)."""
    home = tmp_path / "home"
    argv = ["--home", str(home), "--name", "notes", "--", sys.executable, "server.py"]
    served = home / "flows" / "notes.flow.json"
    status, _, err = init(capsys, *argv)
    assert status == 0 and f"--habit-only --out {served}\n" in err
    served.parent.mkdir(parents=True)
    served.write_text("{}")
    status, _, err = init(capsys, *argv)
    new = home / "flows" / "notes.new.flow.json"
    assert status == 0 and f"--out {served}" not in err
    assert f"--habit-only --out {new}\n" in err and f"stretto flow-diff {served} {new}" in err
    assert f"run this command again with --flow {new}" in err
