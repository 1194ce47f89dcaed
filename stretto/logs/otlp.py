"""Reading an OTLP trace export (docs/formats.md §1.6): OTLP/JSON (`resourceSpans` →
`scopeSpans` → `spans`; one document, or one per line as the collector's file exporter writes)
or OTLP protobuf (an `ExportTraceServiceRequest`, or a run of them each after its 4-byte
big-endian length), into flat spans with their attributes as Python values. What the spans
mean is stretto.logs.otel's business.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stretto.logs.sessionlog import LogError

STATUS_ERROR = 2


@dataclass
class Span:
    trace: str
    id: str
    parent: str
    name: str
    start_ns: int
    end_ns: int
    attrs: dict[str, Any]
    failed: bool
    status_message: str
    service: str | None
    where: str  # the span's place in the file, for messages


def _any_value(value: Any) -> Any:
    """An OTLP/JSON AnyValue as a Python value."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return _attributes((value["kvlistValue"] or {}).get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _attributes(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        return {}
    return {
        kv["key"]: _any_value(kv.get("value"))
        for kv in items
        if isinstance(kv, dict) and isinstance(kv.get("key"), str)
    }


def _nanos(value: Any, path: Path, where: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LogError(path, None, "expected a time in ns since the epoch", where) from None


def _spans(document: Any, path: Path, line: int | None, out: list[Span]) -> bool:
    """The spans of one export document; False when it holds no `resourceSpans`."""
    if not isinstance(document, dict) or "resourceSpans" not in document:
        return False
    resources = document["resourceSpans"]
    if not isinstance(resources, list):
        raise LogError(path, line, "expected a list", "resourceSpans")
    for r, resource in enumerate(resources):
        at = f"resourceSpans[{r}]"
        if not isinstance(resource, dict):
            raise LogError(path, line, "expected an object", at)
        service = _attributes((resource.get("resource") or {}).get("attributes")).get(
            "service.name"
        )
        for s, scope in enumerate(resource.get("scopeSpans") or []):
            if not isinstance(scope, dict) or not isinstance(scope.get("spans", []), list):
                raise LogError(
                    path, line, "expected an object with a list of spans", f"{at}.scopeSpans[{s}]"
                )
            for k, span in enumerate(scope.get("spans", [])):
                where = f"{at}.scopeSpans[{s}].spans[{k}]"
                if not isinstance(span, dict):
                    raise LogError(path, line, "expected a span object", where)
                for key in ("traceId", "spanId"):
                    if not isinstance(span.get(key), str) or not span[key]:
                        raise LogError(path, line, "missing", f"{where}.{key}")
                status = span.get("status") or {}
                attrs = _attributes(span.get("attributes"))
                code = status.get("code") if isinstance(status, dict) else None
                failed = code in (STATUS_ERROR, "STATUS_CODE_ERROR") or "error.type" in attrs
                out.append(
                    Span(
                        trace=span["traceId"],
                        id=span["spanId"],
                        parent=span.get("parentSpanId") or "",
                        name=str(span["name"]) if isinstance(span.get("name"), str) else "",
                        start_ns=_nanos(
                            span.get("startTimeUnixNano", 0), path, f"{where}.startTimeUnixNano"
                        ),
                        end_ns=_nanos(
                            span.get("endTimeUnixNano", 0), path, f"{where}.endTimeUnixNano"
                        ),
                        attrs=attrs,
                        failed=failed,
                        status_message=(status.get("message") or "")
                        if isinstance(status, dict)
                        else "",
                        service=service if isinstance(service, str) else None,
                        where=(f"line {line}: " if line else "") + where,
                    )
                )
    return True


def _hex_ids(document: dict) -> dict:
    """Protobuf's JSON mapping writes ids as base64; OTLP/JSON as hex."""
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return document


def _protobuf_documents(data: bytes, path: Path) -> list[dict]:
    try:
        # an optional package: only OTLP protobuf needs opentelemetry-proto
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        raise LogError(
            path, None, "reading OTLP protobuf needs the opentelemetry-proto package"
        ) from None
    chunks = [data]
    offset, framed = 0, []
    while offset + 4 <= len(data):  # the collector's file exporter: length-prefixed messages
        (size,) = struct.unpack(">I", data[offset : offset + 4])
        framed.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    if offset == len(data) and framed:
        chunks = framed
    documents = []
    for chunk in chunks:
        message = ExportTraceServiceRequest()
        try:
            message.ParseFromString(chunk)
        except DecodeError as exc:
            raise LogError(path, None, f"neither OTLP/JSON nor OTLP protobuf ({exc})") from None
        document = MessageToDict(message, use_integers_for_enums=True)
        documents.append(_hex_ids(document))
    return documents


def read_spans(path: str | Path) -> tuple[list[Span], Path]:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogError(path, None, f"cannot read: {exc.strerror or exc}") from None
    spans: list[Span] = []
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            found = _spans(json.loads(data), path, None, spans)
        except ValueError:  # one document per line
            found = False
            for number, line in enumerate(data.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    document = json.loads(line)
                except ValueError as exc:
                    raise LogError(path, number, f"not JSON ({exc})") from None
                found = _spans(document, path, number, spans) or found
        if not found:
            raise LogError(path, None, "not an OTLP trace export: no `resourceSpans`")
    else:
        for document in _protobuf_documents(data, path):
            _spans(document, path, None, spans)
    return spans, path
