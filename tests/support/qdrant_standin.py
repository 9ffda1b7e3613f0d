"""A stand-in for a Qdrant server: a real HTTP/1.1 server on 127.0.0.1 speaking Qdrant's REST API.

No Qdrant server runs on this machine, so the real ``qdrant_client.AsyncQdrantClient`` talks
to this peer over a socket instead. It keeps collections, payload indexes and points in
memory and answers the calls :class:`core.memory.qdrant.QdrantStore` makes, in the shapes the
client's models parse::

    GET  /collections                          GET  /collections/{name}/exists
    PUT  /collections/{name}                   GET  /collections/{name}
    PUT  /collections/{name}/index             PUT  /collections/{name}/points
    POST /collections/{name}/points/scroll     POST /collections/{name}/points/query
    POST /collections/{name}/points/count      POST /collections/{name}/points/delete

Filters are evaluated for what the store sends: ``must`` lists of keyword matches, ranges and
nested filters. Like Qdrant, creating a collection that exists is a 409 and creating an index
that exists is a 200; with ``api_key`` set, a request without that ``api-key`` header is a
401. Scripted :class:`Fault`s answer chosen requests with a status, a pause, or a dropped
connection, so tests can drive the client's error paths::

    with QdrantStandIn(api_key="k") as qdrant:
        qdrant.fault(Fault(r"PUT /collections/\\w+/points", status=503, times=1))
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

__all__ = ["Fault", "QdrantStandIn"]


@dataclass
class Fault:
    """Answer the next ``times`` requests whose ``"METHOD /path"`` matches ``pattern``.

    ``delay_s`` pauses before answering (past the client's timeout, it is a timeout);
    ``status`` answers that status with Qdrant's error body instead of doing the work;
    ``drop`` closes the connection without an answer. ``headers`` go with the status.
    """

    pattern: str
    status: int | None = None
    delay_s: float = 0.0
    drop: bool = False
    times: int = 1
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Collection:
    size: int
    distance: str
    points: dict[str, tuple[dict[str, list[float]], dict[str, Any]]] = field(default_factory=dict)
    indexes: dict[str, Any] = field(default_factory=dict)


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _matches(flt: dict[str, Any] | None, payload: dict[str, Any]) -> bool:
    if not flt:
        return True
    for condition in flt.get("must") or []:
        if not _condition(condition, payload):
            return False
    should = flt.get("should")
    if should and not any(_condition(c, payload) for c in should):
        return False
    return not any(_condition(c, payload) for c in flt.get("must_not") or [])


def _condition(condition: dict[str, Any], payload: dict[str, Any]) -> bool:
    if "must" in condition or "should" in condition or "must_not" in condition:
        return _matches(condition, payload)
    value = payload.get(condition["key"])
    if condition.get("match") is not None:
        return bool(value == condition["match"].get("value"))
    bounds = condition.get("range")
    if bounds is not None:
        if not isinstance(value, int | float):
            return False
        checks = {
            "lt": value < bounds["lt"] if bounds.get("lt") is not None else True,
            "gt": value > bounds["gt"] if bounds.get("gt") is not None else True,
            "lte": value <= bounds["lte"] if bounds.get("lte") is not None else True,
            "gte": value >= bounds["gte"] if bounds.get("gte") is not None else True,
        }
        return all(checks.values())
    raise _Refusal(400, f"Bad request: the stand-in can't evaluate {condition!r}")


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def _collection_info(c: _Collection) -> dict[str, Any]:
    return {
        "status": "green",
        "optimizer_status": "ok",
        "indexed_vectors_count": 0,
        "points_count": len(c.points),
        "segments_count": 1,
        "config": {
            "params": {
                "vectors": {"content": {"size": c.size, "distance": c.distance}},
                "shard_number": 1,
                "replication_factor": 1,
                "write_consistency_factor": 1,
                "on_disk_payload": True,
            },
            "hnsw_config": {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000},
            "optimizer_config": {
                "deleted_threshold": 0.2,
                "vacuum_min_vector_number": 1000,
                "default_segment_number": 0,
                "flush_interval_sec": 5,
            },
        },
        "payload_schema": {
            name: {"data_type": schema, "points": 0} for name, schema in c.indexes.items()
        },
    }


class QdrantStandIn:
    """A scripted Qdrant REST peer in a thread of its own."""

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.collections: dict[str, _Collection] = {}
        self.requests: list[str] = []
        self.answers: list[tuple[str, int]] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("The Qdrant stand-in isn't started; call start() first.")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fault(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def count(self, pattern: str) -> int:
        """How many requests so far matched ``pattern`` (as ``"METHOD /path"``)."""
        with self._lock:
            return sum(1 for r in self.requests if re.fullmatch(pattern, r))

    def answered(self, pattern: str, status: int) -> int:
        """How many requests matching ``pattern`` were answered with ``status``."""
        with self._lock:
            return sum(1 for r, s in self.answers if s == status and re.fullmatch(pattern, r))

    def start(self) -> Self:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                stand_in._handle(self)

            do_PUT = do_POST = do_DELETE = do_PATCH = do_GET  # noqa: N815 - http.server's names

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="qdrant-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- serving ----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        path = urlsplit(handler.path).path
        line = f"{handler.command} {path}"
        with self._lock:
            self.requests.append(line)
            fault = next((f for f in self._faults if re.fullmatch(f.pattern, line)), None)
            if fault is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
        if fault is not None:
            if fault.delay_s:
                time.sleep(fault.delay_s)
            if fault.drop:
                handler.close_connection = True
                handler.connection.close()
                return
            if fault.status is not None:
                self._send(handler, fault.status, _error(f"scripted {fault.status}"), fault.headers)
                return
        if self.api_key is not None and handler.headers.get("api-key") != self.api_key:
            self._send(
                handler, 401, _error("Must provide an API key or an Authorization bearer token")
            )
            return
        try:
            body = json.loads(raw) if raw else {}
            with self._lock:
                result = self._route(handler.command, path, body)
        except _Refusal as refusal:
            self._send(handler, refusal.status, _error(refusal.message))
            return
        except (KeyError, TypeError, ValueError) as exc:  # a request the stand-in can't read
            self._send(handler, 400, _error(f"Format error in JSON body: {exc!r}"))
            return
        self._send(handler, 200, {"result": result, "status": "ok", "time": 0.0001})

    def _send(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> None:
        with self._lock:
            self.answers.append((f"{handler.command} {urlsplit(handler.path).path}", status))
        data = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            handler.close_connection = True

    def _route(self, method: str, path: str, body: dict[str, Any]) -> Any:
        parts = [p for p in path.split("/") if p]
        if parts == ["collections"] and method == "GET":
            return {"collections": [{"name": n} for n in self.collections]}
        if len(parts) < 2 or parts[0] != "collections":
            raise _Refusal(404, f"Not found: {path}")
        name, rest = parts[1], parts[2:]
        if rest == ["exists"] and method == "GET":
            return {"exists": name in self.collections}
        if not rest and method == "PUT":
            if name in self.collections:
                raise _Refusal(409, f"Wrong input: Collection `{name}` already exists!")
            params = body["vectors"]["content"]
            self.collections[name] = _Collection(params["size"], params["distance"])
            return True
        collection = self.collections.get(name)
        if collection is None:
            raise _Refusal(404, f"Not found: Collection `{name}` doesn't exist!")
        if not rest and method == "GET":
            return _collection_info(collection)
        if rest == ["index"] and method == "PUT":
            schema = body["field_schema"]
            collection.indexes[body["field_name"]] = (
                schema["type"] if isinstance(schema, dict) else schema
            )
            return {"operation_id": 1, "status": "completed"}
        if rest == ["points"] and method == "PUT":
            for point in body["points"]:
                collection.points[str(point["id"])] = (point.get("vector") or {}, point["payload"])
            return {"operation_id": 2, "status": "completed"}
        if rest == ["points", "scroll"] and method == "POST":
            return self._scroll(collection, body)
        if rest == ["points", "query"] and method == "POST":
            return self._query(collection, body)
        if rest == ["points", "count"] and method == "POST":
            flt = body.get("filter")
            return {"count": sum(1 for _, p in collection.points.values() if _matches(flt, p))}
        if rest == ["points", "delete"] and method == "POST":
            flt = body["filter"]
            for pid in [i for i, (_, p) in collection.points.items() if _matches(flt, p)]:
                del collection.points[pid]
            return {"operation_id": 3, "status": "completed"}
        raise _Refusal(404, f"Not found: {method} {path}")

    @staticmethod
    def _scroll(collection: _Collection, body: dict[str, Any]) -> dict[str, Any]:
        found = [
            (pid, payload)
            for pid, (_, payload) in collection.points.items()
            if _matches(body.get("filter"), payload)
        ]
        limit = int(body.get("limit") or 10)
        order = body.get("order_by")
        if order is not None:
            key = order["key"] if isinstance(order, dict) else order
            descending = isinstance(order, dict) and order.get("direction") == "desc"
            found.sort(key=lambda item: item[1].get(key, 0), reverse=descending)
            page, following = found[:limit], None
        else:
            found.sort(key=lambda item: item[0])
            offset = body.get("offset")
            if offset is not None:
                found = [item for item in found if item[0] >= str(offset)]
            page = found[:limit]
            following = found[limit][0] if len(found) > limit else None
        points = [{"id": pid, "payload": payload, "vector": None} for pid, payload in page]
        return {"points": points, "next_page_offset": following}

    @staticmethod
    def _query(collection: _Collection, body: dict[str, Any]) -> dict[str, Any]:
        query = body["query"]
        if isinstance(query, dict):  # {"nearest": [...]} from the client's query models
            query = query["nearest"]
        using = body.get("using") or "content"
        scored = [
            (_cosine(query, vectors[using]), pid, payload)
            for pid, (vectors, payload) in collection.points.items()
            if using in vectors and _matches(body.get("filter"), payload)
        ]
        scored.sort(key=lambda item: -item[0])
        return {
            "points": [
                {"id": pid, "version": 1, "score": score, "payload": payload}
                for score, pid, payload in scored[: int(body.get("limit") or 10)]
            ]
        }


def _error(message: str) -> dict[str, Any]:
    return {"status": {"error": message}, "time": 0.0}
