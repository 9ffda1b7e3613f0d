"""#40's wire contract for the Spaces tab, served in the browser where the server lacks it.

The routes the Spaces tab reads beyond preferences and mutes (``GET /spaces/{space}`` with its
members, ``/spaces/{space}/settings``, ``/pairing``) and the contract's additions to existing
answers (``config.get``/``config.set`` in ``GET /spaces``, ``name`` on a mute) are answered here,
through Playwright's routing, only when the server answers ``GET /spaces/{space}`` with 404 or
405: a server that has them is talked to as it is. Everything else (preferences, muting and
unmuting, deleting the space) always reaches the real server.

``/pairing`` is always answered here (:class:`Pairings`): a pending pairing is made by an
unknown sender's DM through a bridge, which the UI tests don't drive.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from playwright.sync_api import Page, Request, Route

from tests.conftest import ALICE
from tests.support.server import RunningServer

NAMES = {"static:alice": "Alice", "static:bob": "Bob"}
ROLES = {"static:alice": "admin", "static:bob": "member"}


def caller(request: Request) -> str:
    token = (request.headers.get("authorization") or "").removeprefix("Bearer ")
    return "static:" + token.removesuffix("-token")


def _answer(route: Route, status: int, body: dict[str, Any]) -> None:
    route.fulfill(status=status, content_type="application/json", body=json.dumps(body))


def has_contract(server: RunningServer, space: str = "slack%3AC1") -> bool:
    """Whether the server serves GET /spaces/{space} (the routes of #40 are merged)."""
    answer = httpx.get(f"{server.url}/spaces/{space}", headers=ALICE, timeout=10)
    return answer.status_code not in {404, 405}


@dataclass
class Settings:
    """``/spaces/{space}/settings`` of one space: runtime values over the file's and the global."""

    file: dict[str, Any] = field(default_factory=lambda: {"rate_limit": 5})
    space: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(
        default_factory=lambda: {
            "rate_limit": 20,
            "trigger.match": "mention",
            "trigger.pattern": "!m",
            "trigger.media_in_groups": False,
            "ambient.max_messages": 20,
            "ambient.max_chars": 4000,
            "live_answers": True,
        }
    )
    bounds: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "rate_limit": {"min": 1, "max": 1000},
            "ambient.max_messages": {"min": 0, "max": 500},
            "ambient.max_chars": {"min": 0, "max": 100_000},
        }
    )

    def setting(self, key: str) -> dict[str, Any]:
        for source, values in (("space", self.space), ("file", self.file)):
            if key in values:
                found = {"key": key, "value": values[key], "source": source}
                break
        else:
            found = {"key": key, "value": self.defaults[key], "source": "global"}
        if key in self.bounds:
            found["bounds"] = self.bounds[key]
        return found

    def refusal(self, key: str, value: Any) -> str | None:
        default = self.defaults[key]
        bounds = self.bounds.get(key, {})
        if type(value) is not type(default):
            return f"{key} takes a value like {json.dumps(default)}."
        if "min" in bounds and not bounds["min"] <= value <= bounds["max"]:
            return f"{key} is a whole number from {bounds['min']} to {bounds['max']}."
        if key == "trigger.match" and value not in {"mention", "prefix", "always"}:
            return "trigger.match is mention, prefix or always."
        if key == "trigger.pattern" and (
            not 1 <= len(value) <= 64 or any(unicodedata.category(c) in {"Cc", "Cf"} for c in value)
        ):
            return (
                "trigger.pattern is the trigger word: 1 to 64 characters, without control or "
                "invisible characters."
            )
        return None


class SpaceContract:
    """Parts B of the contract for the test's ``slack:C1`` (members Alice, admin, and Bob)."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.settings = Settings()
        self.deleted = False

    def install(self, page: Page) -> None:
        page.route(lambda url: urlsplit(url).path.startswith("/spaces"), self.handle)

    def handle(self, route: Route, request: Request) -> None:
        parts = [unquote(part) for part in urlsplit(request.url).path.split("/")[1:]]
        who = caller(request)
        admin = ROLES.get(who) == "admin"
        if parts == ["spaces"] and request.method == "GET":
            answer = route.fetch()
            body = answer.json()
            for space in body.get("spaces", []):
                extra = ["config.get", "config.set"] if space["role"] == "admin" else ["config.get"]
                space["permissions"] = sorted({*space["permissions"], *extra})
            _answer(route, answer.status, body)
        elif len(parts) == 2 and request.method == "GET":
            members = [{"id": key, "name": NAMES[key], "role": role} for key, role in ROLES.items()]
            space = {"spaceId": parts[1], "platform": "slack", "isDm": False, "title": None}
            _answer(route, 200, {"ok": True, "space": space, "members": members})
        elif len(parts) == 3 and parts[2] == "mutes" and request.method == "GET":
            answer = route.fetch()
            body = answer.json()
            for mute in body.get("mutes", []):
                mute["name"] = NAMES.get(mute["person"])
            _answer(route, answer.status, body)
        elif len(parts) >= 3 and parts[2] == "settings":
            self.settings_route(route, request, parts, admin)
        else:
            route.fallback()

    def settings_route(self, route: Route, request: Request, parts: list[str], admin: bool) -> None:
        space = parts[1]
        store = self.settings
        if len(parts) == 3 and request.method == "GET":
            settings = [store.setting(key) for key in store.defaults]
            _answer(route, 200, {"ok": True, "spaceId": space, "settings": settings})
            return
        key = parts[3] if len(parts) == 4 else ""
        if key not in store.defaults:
            _answer(route, 404, {"ok": False, "error": f"There is no setting {key!r}."})
        elif not admin:
            _answer(route, 403, {"ok": False, "error": f"Only an admin of {space} may do this."})
        elif request.method == "PUT":
            value = json.loads(request.post_data or "{}").get("value")
            refusal = store.refusal(key, value)
            if refusal:
                _answer(route, 400, {"ok": False, "error": refusal})
                return
            store.space[key] = value
            _answer(route, 200, {"ok": True, "spaceId": space, "setting": store.setting(key)})
        elif request.method == "DELETE":
            store.space.pop(key, None)
            _answer(route, 200, {"ok": True, "spaceId": space, "setting": store.setting(key)})
        else:
            route.fallback()


class Pairings:
    """Part C of the contract: pending pairings, approvers (Alice) and the others (403)."""

    def __init__(self) -> None:
        self.pending = [
            {
                "code": "K7QX2M",
                "platform": "telegram",
                "account": "telegram:5550001",
                "name": "Carol",
                "requestedAt": "2026-12-07T01:00:00+00:00",
                "expiresAt": "2026-12-07T02:00:00+00:00",
            },
            {
                "code": "P3RT9A",
                "platform": "slack",
                "account": "slack:U0DAVE",
                "name": None,
                "requestedAt": "2026-12-07T01:05:00+00:00",
                "expiresAt": "2026-12-07T02:05:00+00:00",
            },
        ]
        self.decided: list[str] = []

    def install(self, page: Page) -> None:
        page.route(lambda url: urlsplit(url).path.startswith("/pairing"), self.handle)

    def handle(self, route: Route, request: Request) -> None:
        parts = urlsplit(request.url).path.split("/")[1:]
        if ROLES.get(caller(request)) != "admin":
            _answer(route, 403, {"ok": False, "error": "Only an admin may approve pairings."})
        elif parts == ["pairing"] and request.method == "GET":
            _answer(route, 200, {"ok": True, "pairings": self.pending})
        elif len(parts) == 3 and request.method == "POST" and parts[2] in {"approve", "deny"}:
            found = [p for p in self.pending if p["code"] == parts[1]]
            if not found:
                _answer(route, 404, {"ok": False, "error": "No pairing has this code."})
                return
            self.pending.remove(found[0])
            self.decided.append(f"{parts[2]} {parts[1]}")
            if parts[2] == "approve":
                _answer(route, 200, {"ok": True, "pairing": found[0], "approved": True})
            else:
                _answer(route, 200, {"ok": True, "code": parts[1], "denied": True})
        else:
            route.fallback()
