"""The OpenAPI description the console serves at /api/openapi.json, made from the endpoint
table (stretto.console.api.endpoints.ENDPOINTS), so it cannot drift from the routes."""

from __future__ import annotations

from stretto import __version__

STATUS_TEXT = {
    400: "bad parameters",
    401: "no token, or a wrong one",
    403: "a mutation without the header X-Stretto-Console: 1, or the console is read-only",
    404: "not found",
    409: "conflict: a job is running, or the file exists",
    422: "cannot be used: an invalid flow, an unreadable log, bad job parameters",
    500: "an unexpected error",
}
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}


def describe(endpoints) -> dict:
    paths: dict = {}
    for endpoint in endpoints:
        operation: dict = {
            "summary": endpoint.summary,
            "operationId": endpoint.handler.__name__,
            "parameters": [
                {
                    "name": name,
                    "in": where,
                    "required": where == "path",
                    "description": text,
                    "schema": {"type": "string"},
                }
                for name, where, text in endpoint.params
            ],
            "responses": {
                "202" if endpoint.method == "POST" and endpoint.path == "/api/jobs" else "200": {
                    "description": "ok",
                    "content": {endpoint.content: {}},
                }
            },
        }
        if endpoint.body:
            operation["requestBody"] = {
                "description": endpoint.body,
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        codes = set(endpoint.errors) | ({500} if endpoint.public else {401, 500})
        if endpoint.method != "GET":
            codes.add(403)
        for code in sorted(codes):
            operation["responses"][str(code)] = {
                "description": STATUS_TEXT[code],
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
        if endpoint.public:
            operation["security"] = []
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "stretto-console",
            "version": __version__,
            "description": "The local console's JSON API (docs/console.md). Mutations also need "
            "the header `X-Stretto-Console: 1`.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "stretto_console"},
            },
        },
        "security": [{"bearer": []}, {"cookie": []}],
    }
