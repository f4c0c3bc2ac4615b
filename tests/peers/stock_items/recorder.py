"""The stock node's only peer, as the capture tool stands it up: a small aiohttp app on
loopback that records every request the stock node sends it and relays it to a second stock
node (the replying peer), whose answer goes back: the stock node is then answered by Eureka
itself, and the fixture holds what Eureka answered each item.

A step may ask for heartbeats to be answered 404 whatever the replying peer says (a peer that
lost its copies, restarted without a store): the stock node then sends the full registration,
as it does after such an answer. The replying peer's own answer is recorded beside the one
given (`peerAnswer`), so a replay compares a node of ours with Eureka's answer to the item.
A step may also withhold its requests from the replying peer (a batch lost on the way, each
item answered 200): they are recorded with `"relayed": false`, and the replying peer learns
of the change only from what comes later, as a peer that missed a batch does.

The replying peer's own peer is this app too, under /b/: it holds only replications, which a
Eureka node sends on to nobody, so whatever arrives there is answered 200 and not recorded.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

# The request headers that tell how the stock node speaks (the rest are the HTTP client's).
HEADERS = (
    "Content-Type",
    "Content-Encoding",
    "Accept",
    "Accept-Encoding",
    "User-Agent",
    "x-netflix-discovery-replication",
)
REPLYING_PREFIX = "/b/"


class Recorder:
    """What the stock node sent since the last `take()`; `relay_to` is the replying peer's
    base URL (`http://127.0.0.1:PORT`)."""

    def __init__(self, relay_to: str) -> None:
        self.relay_to = relay_to
        self.lose_heartbeats = False
        self.withhold = False
        self._sent: list[dict[str, Any]] = []
        self._session: aiohttp.ClientSession | None = None
        self.last_ms = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.cleanup_ctx.append(self._open_session)
        return app

    def take(self) -> list[dict[str, Any]]:
        """The requests recorded since the last call, in the order they arrived."""
        sent, self._sent = self._sent, []
        return sent

    async def _open_session(self, _app: web.Application) -> Any:
        async with aiohttp.ClientSession(auto_decompress=True) as session:
            self._session = session
            yield

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()  # aiohttp has undone a Content-Encoding already
        if request.path.startswith(REPLYING_PREFIX):
            return web.Response(body=_all_applied(raw), content_type="application/json")
        at_ms = time.time_ns() // 1_000_000
        self.last_ms = at_ms
        body = _decoded(raw, request.headers.get("Content-Type", ""))
        if self.withhold:
            status, answer_raw = 200, _all_applied(raw)
        else:
            status, answer_raw = await self._relay(request, raw)
        given = _decoded(answer_raw, "application/json")
        record: dict[str, Any] = {
            "at_ms": at_ms,
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "headers": {h: request.headers[h] for h in HEADERS if h in request.headers},
            "body": body,
            "status": status,
            "relayed": not self.withhold,
            "peerAnswer": None if self.withhold else given,
        }
        if self.lose_heartbeats and isinstance(given, dict) and isinstance(body, dict):
            given = _heartbeats_lost(body, given)
            answer_raw = orjson.dumps(given)
        record["answered"] = given
        self._sent.append(record)
        return web.Response(status=status, body=answer_raw, content_type="application/json")

    async def _relay(self, request: web.Request, raw: bytes) -> tuple[int, bytes]:
        assert self._session is not None
        headers = {
            h: request.headers[h]
            for h in ("Content-Type", "Accept", "x-netflix-discovery-replication")
            if h in request.headers
        }
        async with self._session.request(
            request.method,
            self.relay_to + request.path_qs,
            data=raw or None,
            headers=headers,
        ) as answer:
            return answer.status, await answer.read()


def _decoded(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    if "json" in content_type:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return raw.decode("utf-8", errors="replace")


def _all_applied(raw: bytes) -> bytes:
    """The answer to a batch whose every item is applied."""
    try:
        items = orjson.loads(raw).get("replicationList", []) if raw else []
    except (orjson.JSONDecodeError, AttributeError):
        items = []
    return orjson.dumps({"responseList": [{"statusCode": 200} for _ in items]})


def _heartbeats_lost(batch: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`given` with every Heartbeat's answer made 404."""
    items = batch.get("replicationList", [])
    answers = list(given.get("responseList", []))
    for i, item in enumerate(items):
        if i < len(answers) and item.get("action") == "Heartbeat":
            answers[i] = {"statusCode": 404}
    return {**given, "responseList": answers}
