"""An OpenTelemetry export of the reference shop sessions, as a GenAI agent's SDK would write
it (OTLP/JSON and protobuf), for the tests that learn from traces."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from stretto.logs.episode import Assistant, ToolResult, User
from stretto.logs.merged import read_episodes
from tests.conftest import REFERENCE_HOME

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
