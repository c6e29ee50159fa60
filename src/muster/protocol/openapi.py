"""OpenAPI 3.1 descriptions of the daemons' HTTP APIs, built from their Starlette routes and
the pydantic models that validate their bodies (what is described is what is checked).

Starlette makes no OpenAPI document by itself. ``document(...)`` walks the routes and
describes each method and path: its path parameters, the query parameters its handler
reads (``queries``, keyed by path), its JSON body (``bodies``: the very model the handler validates
with; a POST without one takes any JSON object) and the error shape every route answers
with. The controller's tables are ``ctld.openapi``'s, the agent's ``agent.openapi``'s;
each daemon serves its document at ``GET /openapi.json`` behind its usual authentication.
Only the daemons import this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from starlette.routing import Route

from muster import __version__

__all__ = ["document"]

_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "code": {"type": "string"}},
    "required": ["error"],
}


def _schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in schema.pop("$defs", {}).items():
        components[name] = sub
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(
    method: str,
    path: str,
    bodies: Mapping[tuple[str, str], type[BaseModel]],
    queries: Mapping[str, list[str]],
    components: dict[str, Any],
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{method.lower()}_{re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_')}",
        "responses": {
            "200": {"description": "done", "content": {"application/json": {"schema": {"type": "object"}}}},
            "default": {"description": "refused, with the reason", "content": {"application/json": {"schema": _ERROR}}},
        },
    }
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", path)
    ]
    if method == "GET":
        params += [{"name": q, "in": "query", "schema": {"type": "string"}} for q in queries.get(path, [])]
    if params:
        op["parameters"] = params
    if method == "POST":
        model = bodies.get((method, path))
        schema = _schema(model, components) if model is not None else {"type": "object"}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    return op


def document(
    title: str,
    routes: Iterable[Any],
    bodies: Mapping[tuple[str, str], type[BaseModel]],
    queries: Mapping[str, list[str]],
    security: dict[str, Any],
    notes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The description of ``routes`` (Starlette ``Route`` objects; others are skipped).

    ``security`` is the OpenAPI security scheme every operation needs; ``notes`` maps a
    path prefix to a description for the operations under it."""
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, Any] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            op = _operation(method, route.path, bodies, queries, components)
            for prefix, text in (notes or {}).items():
                if route.path.startswith(prefix):
                    op["description"] = text
            paths.setdefault(route.path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": __version__},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(components.items())), "securitySchemes": {"auth": security}},
        "security": [{"auth": []}],
    }
