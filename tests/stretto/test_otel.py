"""Learning from OpenTelemetry: a trace export of the same sessions as a set of proxy logs —
written here with the OpenTelemetry SDK, following the GenAI and MCP semantic conventions —
learns the same sites, counts and binding sources."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from stretto.logs.episode import Assistant, ToolResult, User, read_episodes
from stretto.logs.otel import episodes_from_otel, read_otel, write_logs
from stretto.logs.sessionlog import LogError
from stretto.logs.steps import episode_steps
from tests.conftest import REFERENCE_HOME
from tests.stretto.lifecycle import learn_folder

SHOP = REFERENCE_HOME / "logs/shop"
MS = 1_000_000  # ns


def _text(parts: list) -> dict:
    return {"role": "user", "parts": parts}


def trace_episode(tracer, episode, start_ns: int, extras: bool) -> None:
    """One session as a GenAI agent's spans: an invoke_agent span; per LLM turn a chat span
    (the conversation so far in, the reply or the tool calls out) and an execute_tool span per
    call (with an MCP client span inside it when `extras`, and two spans that cannot be used)."""
    results = episode.results_by_key()
    conversation: list[dict] = []
    clock = [start_ns]

    def tick(ms: int) -> int:
        clock[0] += ms * MS
        return clock[0]

    root = tracer.start_span(
        "invoke_agent shop",
        start_time=tick(0),
        attributes={"gen_ai.operation.name": "invoke_agent"},
    )
    context = set_span_in_context(root)
    for event in episode.events:
        if isinstance(event, User):
            conversation.append(_text([{"type": "text", "content": event.text}]))
            continue
        if not isinstance(event, Assistant):
            continue
        parts = [{"type": "text", "content": event.text}] if event.text else []
        parts += [
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in event.calls
        ]
        output = [{"role": "assistant", "parts": parts, "finish_reason": "stop"}]
        chat = tracer.start_span(
            "chat model-x",
            context=context,
            kind=SpanKind.CLIENT,
            start_time=tick(5),
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "model-x",
                "gen_ai.input.messages": json.dumps(conversation),
                "gen_ai.output.messages": json.dumps(output),
            },
        )
        chat.end(end_time=tick(100))
        conversation.append({"role": "assistant", "parts": parts})
        for call in event.calls:
            result: ToolResult | None = results.get(call.key)
            span = tracer.start_span(
                f"execute_tool {call.name}",
                context=context,
                start_time=tick(700),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": call.id,
                    "gen_ai.tool.call.arguments": json.dumps(call.arguments),
                    "gen_ai.tool.call.result": result.content,
                },
            )
            if result.error:
                span.set_status(Status(StatusCode.ERROR, "the tool failed"))
            if extras:  # the MCP client's own span of the same call
                mcp = tracer.start_span(
                    f"tools/call {call.name}",
                    context=set_span_in_context(span),
                    kind=SpanKind.CLIENT,
                    start_time=tick(1),
                    attributes={"mcp.method.name": "tools/call", "gen_ai.tool.name": call.name},
                )
                mcp.end(end_time=tick(3))
            span.end(end_time=tick(5))
            conversation.append(
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": call.id}]}
            )
    if extras:
        for _, attributes in [
            ("without arguments", {"gen_ai.tool.call.result": "x"}),
            ("without a result", {"gen_ai.tool.call.arguments": "{}"}),
        ]:
            span = tracer.start_span(
                "execute_tool get_order_details",
                context=context,
                start_time=tick(2000),
                attributes={"gen_ai.operation.name": "execute_tool", **attributes},
            )
            span.end(end_time=tick(1))
    root.end(end_time=tick(10))


def otlp_json(request) -> dict:
    """The OTLP/JSON form of an export request: protobuf's JSON mapping, with ids as hex."""
    document = MessageToDict(request, use_integers_for_enums=True)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, Path, dict]:
    return write_export(tmp_path_factory.mktemp("otel"))


def write_export(base: Path) -> tuple[Path, Path, dict]:
    """The reference shop sessions as an OTLP/JSON and a protobuf export, and a manifest of
    their tools (manifest.json), in `base`."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.otel")
    episodes = read_episodes(SHOP)
    for i, episode in enumerate(episodes):
        trace_episode(tracer, episode, 1_790_561_040_000 * MS + i * 60_000 * MS, extras=i == 0)
    request = encode_spans(exporter.get_finished_spans())
    (base / "export.pb").write_bytes(request.SerializeToString())
    (base / "export.json").write_text(json.dumps(otlp_json(request)))
    tools = episodes[0].tools
    manifest = {
        "domain": "shop",
        "tools": {name: info.kind for name, info in tools.items()},
        "docs": {
            name: {"summary": info.summary, "args": info.args} for name, info in tools.items()
        },
    }
    (base / "manifest.json").write_text(json.dumps(manifest))
    return base / "export.json", base / "export.pb", manifest


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
