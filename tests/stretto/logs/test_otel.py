"""Learning from OpenTelemetry: a trace export of the same sessions as a set of proxy logs —
written here with the OpenTelemetry SDK, following the GenAI and MCP semantic conventions —
learns the same sites, counts and binding sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
from stretto.logs.otel import episodes_from_otel, read_otel, write_logs
from stretto.logs.sessionlog import LogError
from stretto.logs.steps import episode_steps
from tests.otel_export import SHOP, write_export
from tests.stretto.offline.lifecycle.lifecycle import learn_folder


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, Path, dict]:
    return write_export(tmp_path_factory.mktemp("otel"))


def test_each_trace_is_a_session_with_the_same_steps(export) -> None:
    path, _, manifest = export
    result = read_otel(path, manifest)
    proxy = read_episodes(SHOP)
    assert len(result.sessions) == len(proxy) == 6
    converted = episodes_from_otel(path, manifest)
    for ours, theirs in zip(converted, proxy, strict=True):
        assert [s.name() for s in episode_steps(ours)] == [s.name() for s in episode_steps(theirs)]
        assert [(type(e).__name__, getattr(e, "text", None)) for e in ours.events] == [
            (type(e).__name__, getattr(e, "text", None)) for e in theirs.events
        ]
        assert ours.agent_model == "model-x" and ours.domain == "shop"
        assert {n: t.kind for n, t in ours.tools.items()} == manifest["tools"]
    # the MCP spans inside execute_tool spans are the same calls; the two spans without
    # arguments or a result are left out and counted
    assert result.merged == 5 and result.calls == sum(len(e.calls()) for e in proxy)
    assert {k: len(v) for k, v in result.left_out.items()} == {
        "without arguments": 1,
        "without a result": 1,
    }
    line = result.summary()
    assert "1 tool spans without arguments, left out (e.g. resourceSpans[0]" in line
    assert "6 traces as sessions" in line


def test_protobuf_and_json_lines_give_the_same_logs(export) -> None:
    path, protobuf, manifest = export
    expected = [s.text for s in read_otel(path, manifest).sessions]

    def texts(source: Path) -> list[str]:
        return [
            s.text.replace(f'"otel_file":"{source.name}"', f'"otel_file":"{path.name}"')
            for s in read_otel(source, manifest).sessions
        ]

    assert texts(protobuf) == expected
    # the collector's file exporter: one request per line (blank lines skipped), and
    # protobuf requests each after its length
    document = json.dumps(json.loads(path.read_text()))
    lined = path.with_name("lines.jsonl")
    lined.write_text(document + "\n\n")
    assert texts(lined) == expected
    data = protobuf.read_bytes()
    framed = path.with_name("framed.pb")
    framed.write_bytes(len(data).to_bytes(4, "big") + data)
    assert texts(framed) == expected


def test_the_same_sites_counts_and_binding_sources_are_learned(export, tmp_path) -> None:
    path, _, _ = export
    manifest = path.with_name("manifest.json")
    write_logs(read_otel(path, json.loads(manifest.read_text())), tmp_path / "otel-logs")
    home = tmp_path / "home"
    from_otel = learn_folder(
        tmp_path / "otel-logs", tmp_path / "otel.flow.json", home, "--manifest", str(manifest)
    )
    from_proxy = learn_folder(SHOP, tmp_path / "proxy.flow.json", home, "--manifest", str(manifest))
    assert from_otel["sites"] == from_proxy["sites"] and from_otel["sites"]["next"]
    assert from_otel["habit"] == from_proxy["habit"]
    assert from_otel["reach"] == from_proxy["reach"]
    assert from_otel["bindings"] == from_proxy["bindings"]
    assert from_otel["bindings"]["sources"]
    assert from_otel["manifest"] == from_proxy["manifest"]
    assert from_otel["provenance"]["habit_episodes"] == 6
    # the export does not tell the server's input schemas: no contract is pinned
    assert from_otel["contracts"] == {} and from_proxy["contracts"]


def test_writing_again_changes_nothing(export, tmp_path) -> None:
    path, _, manifest = export
    result = read_otel(path, manifest)
    first = write_logs(result, tmp_path)
    stamps = [p.stat().st_mtime_ns for p in first]
    assert write_logs(read_otel(path, manifest), tmp_path) == first
    assert [p.stat().st_mtime_ns for p in first] == stamps


def test_bad_exports_are_refused_by_place(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    for text, message in [
        ('{"resourceMetrics": []}', "not an OTLP trace export"),
        ('{"resourceSpans": {}}', "field `resourceSpans`: expected a list"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "01"}]}]}]}',
            "field `resourceSpans[0].scopeSpans[0].spans[0].traceId`: missing",
        ),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "a", "spanId": "b", '
            '"startTimeUnixNano": "soon"}]}]}]}',
            "spans[0].startTimeUnixNano`: expected a time",
        ),
        ('{"resourceSpans": []}\n{', "bad.json:2: not JSON"),
    ]:
        bad.write_text(text)
        with pytest.raises(LogError, match=message.replace("[", r"\[").replace("]", r"\]")):
            read_otel(bad)
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(LogError, match="neither OTLP/JSON nor OTLP protobuf"):
        read_otel(bad)
