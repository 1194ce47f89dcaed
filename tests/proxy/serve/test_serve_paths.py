"""A value injected into a server's result never becomes a lookup's path (issue 40, item 5):
a flow learned from sessions that read an index file and then each note it lists, served
around the official filesystem server, makes no lookup of a listed path that leaves the
folder the agent's own paths were in — `notes/../private/keys.md`, or `private/keys.md`
beside the notes — though the server would answer both (they are inside its folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.stdio_client import StdioClient
from tests.conftest import Agent, filesystem_server, notes_flow, proxy


@pytest.fixture(scope="module")
def served_folder(tmp_path_factory) -> tuple[Path, Path]:
    """The server's folder (notes, their indexes, a private file) and a flow learned from six
    sessions that read an index, then each note it lists."""
    base = tmp_path_factory.mktemp("paths")
    folder = base / "fs"
    notes, private = folder / "notes", folder / "private"
    notes.mkdir(parents=True)
    private.mkdir()
    (private / "keys.md").write_text("the private keys\n")
    for i in range(1, 13):
        (notes / f"note-{i}.md").write_text(f"note {i}\n")
    flow = notes_flow(
        base, [reads_an_index(notes, i) for i in range(6)], folder=folder, domain="fs"
    )
    return folder, flow


def reads_an_index(notes: Path, session: int) -> Agent:
    """An agent that reads an index of three notes (written for this session), then each."""
    listed = [str(notes / f"note-{1 + (session * 2 + k) % 12}.md") for k in range(3)]
    index = notes / f"index-{session}.md"
    index.write_text("\n".join(listed) + "\n")

    def read(agent: StdioClient) -> None:
        agent.call_tool("read_text_file", {"path": str(index)})
        for path in listed:
            agent.call_tool("read_text_file", {"path": path})

    return read


def serve(folder: Path, flow: Path, tmp: Path, listed: list[str]) -> tuple[list, list]:
    """Serve one session whose agent reads an index listing `listed`: the proxy's lookups
    (tool, arguments) and the flow log's decisions."""
    index = folder / "notes" / f"index-{tmp.name}.md"
    index.write_text("\n".join(listed) + "\n")
    logs = tmp / "logs"
    command = proxy(
        "--record", str(logs), "--domain", "fs", "--flow", str(flow),
        "--flow-threshold", "0", server=filesystem_server(folder),
    )  # fmt: skip
    with StdioClient(command) as agent:
        agent.initialize()
        agent.list_tools()
        agent.call_tool("read_text_file", {"path": str(index)})
        agent.close()
    (log,) = logs.glob("*[0-9].jsonl")
    lines = [json.loads(x) for x in log.read_text().splitlines()[1:]]
    lookups = [
        (m["params"]["name"], m["params"]["arguments"])
        for x in lines
        if x["from"] == "proxy"
        and isinstance(m := x.get("message"), dict)
        and m.get("method") == "tools/call"
    ]
    flow_log = [json.loads(x) for x in log.with_suffix(".flow.jsonl").read_text().splitlines()]
    return lookups, [d for d in flow_log if "action" in d]


def test_the_flow_reads_a_listed_note(served_folder, tmp_path) -> None:
    folder, flow = served_folder
    shapes = json.loads(flow.read_text())["bindings"]["shapes"]
    (shape,) = [s for s in shapes if s["tool"] == "read_text_file"]
    assert shape["roots"] == [str(folder / "notes")]
    note = str(folder / "notes" / "note-7.md")
    lookups, _ = serve(folder, flow, tmp_path / "a", [note, str(folder / "notes/note-8.md")])
    assert lookups and lookups[0] == ("read_text_file", {"path": note})


@pytest.mark.parametrize(
    ("attack", "why"),
    [
        ("notes/../private/keys.md", "is never passed: it has a `..` segment"),
        ("notes/../../../../etc/passwd", "is never passed: it has a `..` segment"),
        ("private/keys.md", "leaves the folders the agent's paths were in"),
    ],
)
def test_a_listed_path_outside_the_training_folders_is_never_looked_up(
    served_folder, tmp_path, attack: str, why: str
) -> None:
    folder, flow = served_folder
    value = f"{folder}/{attack}"
    # the index's first line: what the binding takes (a note after it, so the index is lines)
    lookups, decisions = serve(folder, flow, tmp_path / "b", [value, f"{folder}/notes/note-3.md"])
    assert lookups == []
    assert decisions and decisions[0]["action"] == "hand_back"
    assert why in decisions[0]["reason"], decisions[0]["reason"]
