"""The gateway's OpenAPI 3.1 document, generated from its routes and the operations' Structs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from skald.messages.catalog import OPS
from skald.runtime import __version__
from skald.runtime.doors.gateway_compat import HTTP_STATUS, ISO_TIMES


def openapi(routes: Sequence[Any]) -> dict[str, Any]:
    """An OpenAPI 3.1 document generated from the routes and the operations' request and response
    Structs: each success response is the envelope around the operation's own result type, each
    error status the envelope around a typed error, each query parameter typed from its field."""
    ops = [OPS[r.op] for r in routes]
    structs = sorted({t for op in ops for t in (op.request, op.result) if isinstance(t, type)},
                     key=lambda t: t.__name__)
    schemas, components = msgspec.json.schema_components(structs, ref_template="#/components/schemas/{name}")
    by_type = dict(zip(structs, schemas, strict=True))
    for op in ops:  # the gateway answers these times as ISO-8601 strings, as OpenViking does
        if op.name in ISO_TIMES:
            _iso_fields(components, by_type.get(op.result, {}), set())
    error = {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"enum": sorted(c for c in HTTP_STATUS if c != "OK")}, "message": {"type": "string"},
        "details": {"type": "object"}}}
    components["Error"] = error

    def envelope(result: dict[str, Any] | None) -> dict[str, Any]:
        if result is None:
            return {"type": "object", "required": ["status", "error"], "properties": {
                "status": {"const": "error"}, "error": {"$ref": "#/components/schemas/Error"}}}
        return {"type": "object", "required": ["status", "result"], "properties": {
            "status": {"const": "ok"}, "result": result}}

    by_status: dict[int, list[str]] = {}
    for code, status in HTTP_STATUS.items():
        if code != "UNIMPLEMENTED":  # only OpenViking's routes that Skald lacks answer it, none of these
            by_status.setdefault(status, []).append(code)
    upload_result = {"type": "object", "properties": {"temp_file_id": {"type": "string"}, "size": {"type": "integer"}}}
    paths: dict[str, Any] = {}
    for r in routes:
        op = OPS[r.op]
        result = upload_result if r.kind == "upload" else by_type.get(op.result, {
            "description": "list mode: memories, resources, skills; context mode: entries, rendered, stats"})
        responses = {str(s): {"description": " or ".join(codes), "content": {"application/json": {
            "schema": envelope(result if s == 200 else None)}}} for s, codes in by_status.items()}
        item: dict[str, Any] = {"summary": op.summary, "operationId": r.op.replace(".", "_") + "_" + r.method.lower(),
                                "description": f"NATS subject `skald.v1.{r.op}`.", "responses": responses}
        if r.kind in ("body", "resource", "compat"):
            item["requestBody"] = {"required": True, "content": {"application/json": {"schema": by_type[op.request]}}}
        elif r.kind == "upload":
            item["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": {
                "type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}}}}
        elif r.kind == "query":
            comp = components.get(op.request.__name__, {})
            props, required = comp.get("properties", {}), set(comp.get("required", ()))
            item["parameters"] = [{"name": f, "in": "query", "required": f in required, "schema": props.get(f, {})}
                                  for f in op.request.__struct_fields__]
        else:
            item["parameters"] = [{"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}}]
            if r.method == "POST":
                item["requestBody"] = {"content": {"application/json": {"schema": by_type[op.request]}}}
        paths.setdefault(r.path, {})[r.method.lower()] = item
    return {"openapi": "3.1.0", "info": {"title": "Skald (OpenViking-compatible HTTP gateway)", "version": __version__},
            "components": {"schemas": components, "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"apiKey": []}, {"bearer": []}], "paths": paths}


def _iso_fields(components: dict[str, Any], schema: dict[str, Any], seen: set[str]) -> None:
    """`*_at` numbers of a response (and the structs it holds) become date-time strings."""
    ref = schema.get("$ref", "")
    name = ref.rsplit("/", 1)[-1] if ref else ""
    if name:
        if name in seen or name not in components:
            return
        seen.add(name)
        schema = components[name]
    for field, sub in (schema.get("properties") or {}).items():
        if field.endswith("_at") and sub.get("type") == "number":
            schema["properties"][field] = {"type": "string", "format": "date-time"}
        else:
            _iso_fields(components, sub, seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _iso_fields(components, schema[key], seen)
    for alt in schema.get("anyOf", ()):
        _iso_fields(components, alt, seen)
