"""openapi.yaml as a test oracle: responses and event payloads checked against its schemas."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).resolve().parents[2] / "openapi.yaml"


@cache
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(DOCUMENT.read_text())
    return loaded


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    resource: Resource[Any] = Resource.from_contents(document(), default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource("openapi.yaml", resource)
    return jsonschema.Draft202012Validator(
        _rebase(schema),
        registry=registry,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def _rebase(node: Any) -> Any:
    """Point local ``#/components`` references at the registered document."""
    if isinstance(node, dict):
        return {
            key: "openapi.yaml" + value
            if key == "$ref" and isinstance(value, str) and value.startswith("#/")
            else _rebase(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_rebase(item) for item in node]
    return node


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = document()
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def template_of(path: str) -> str:
    """The documented path ``path`` matches: itself, or a template such as ``/spaces/{space}``."""
    paths = document()["paths"]
    if path in paths:
        return path
    for template in paths:
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            return str(template)
    return path


def response_schema(
    method: str, path: str, status: int, media: str = "application/json"
) -> dict[str, Any]:
    operation = document()["paths"][template_of(path)][method.lower()]
    response = _resolve(operation["responses"][str(status)])
    schema: dict[str, Any] = response["content"][media]["schema"]
    return schema


def check_response(response: httpx.Response, path: str | None = None) -> None:
    """The response's status is documented for its route and its body fits the schema."""
    request = response.request
    route = path or request.url.path
    media = response.headers.get("content-type", "").split(";")[0]
    schema = response_schema(request.method, route, response.status_code, media)
    if media == "application/json":
        _validator(schema).validate(response.json())


def check_event(name: str, data: dict[str, Any]) -> None:
    events = document()["paths"]["/turn"]["post"]["responses"]["200"]["content"][
        "text/event-stream"
    ]["x-events"]
    _validator(events[name]).validate(data)
