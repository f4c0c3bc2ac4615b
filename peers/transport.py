"""HTTP to one peer: the batch, start-up sync and anti-entropy calls.

Every request carries the replication header (set on the node's one ClientSession), so the
peer applies what we send as a replication, and, once credentials are configured, a signature
made with the peer credential (registry/codec/peer_signature.py): the credential itself is
never sent, so a listener a DNS answer names learns nothing it can reuse. A peer that refuses
the signature (401: a stock Eureka server, or a node of an earlier release during a rolling
upgrade) gets the credential as HTTP Basic only when it is listed in `peers` and
`credentials.peer_basic_fallback` says so; never a peer found by DNS.

A peer that has not copied its own peers yet answers our reads 403 `not_synced` (PeerSyncing):
it is starting too. Failures come back as one of the exceptions below, which say what to do
next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import structlog
from aiohttp import hdrs
from yarl import URL

from registry.codec.peer_signature import peer_key, sign
from registry.codec.wire import (
    CHECKS_HEADER,
    EPOCH_HEADER,
    PEER_HEADER,
    REPLICATION_HEADER,
    REPLICATION_USER_AGENT,
    basic_authorization,
)
from registry.common.clock import Clock
from registry.health import heap

log = structlog.get_logger()


class PeerError(Exception):
    """A call to a peer did not give an answer we can use."""


class PeerUnavailable(PeerError):
    """Worth retrying: a network error, a timeout or a 503 (`congested`: back off longer)."""

    def __init__(self, detail: str, *, congested: bool) -> None:
        super().__init__(detail)
        self.congested = congested


class PeerRefused(PeerError):
    """The peer answered, and retrying the same request would get the same answer."""


class PeerSyncing(PeerError):
    """The peer is itself still copying the registry from its own peers."""


class Signer:
    """Signs requests with the peer credential every node of the cluster shares."""

    def __init__(self, credential: str, clock: Clock) -> None:
        self._key = peer_key(credential)
        self._clock = clock
        self.basic = basic_authorization(credential)  # for `credentials.peer_basic_fallback` only

    def authorization(self, method: str, url: URL, body: bytes) -> str:
        return sign(
            self._key,
            method=method,
            host=url.raw_authority,
            target=url.raw_path_qs,
            body=body,
            now_ms=self._clock.wall_ms(),
        )


def new_session(*, connect_timeout: float, read_timeout: float) -> aiohttp.ClientSession:
    """The node's one session for all its peers (call inside the running loop). It carries
    no credential: each request is signed on its own (PeerClient)."""
    headers = {
        REPLICATION_HEADER: "true",
        PEER_HEADER: "1",
        hdrs.ACCEPT: "application/json",
        hdrs.USER_AGENT: REPLICATION_USER_AGENT,
    }
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=connect_timeout,
            sock_connect=connect_timeout,
            sock_read=read_timeout,
        ),
        connector=aiohttp.TCPConnector(limit=100, limit_per_host=8, keepalive_timeout=30),
        headers=headers,
        raise_for_status=False,
    )


class PeerClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        signer: Signer | None = None,
        *,
        basic_fallback: bool = False,
    ) -> None:
        self.url = url  # the base URL, ending in a slash: http://10.0.0.2:8761/eureka/
        self._session = session
        self._signer = signer  # None: no credentials configured, nothing to present
        # May this peer get the credential as Basic when it refuses the signature (a peer
        # listed in `peers`, with `credentials.peer_basic_fallback`), and does it now.
        self.basic_fallback = basic_fallback
        self.takes_basic = False
        # Whether the peer is a stock Eureka server (None: not known yet): batch items for one
        # leave out the fields of ours it cannot read.
        self.stock: bool | None = None
        self.epoch: str | None = None  # the peer's run, as its answers name it (ours only)
        # Whether its last call was answered (None: none made yet): any call, a batch, a
        # sync's fetch or anti-entropy's, so a node with nothing to replicate still knows.
        self.answering: bool | None = None
        # Whether it runs server-side checks, as its batch and digest answers say (None: not
        # said yet, or an earlier release that does not say).
        self.checks: bool | None = None

    def _learn(self, headers: Mapping[str, str], status: int) -> None:
        """Every answer of our nodes, errors included, names its epoch; a stock Eureka server's
        never does. Once ours, always ours: a proxy's or the server's own error page (a 502, a
        503 while it restarts) lacks the header too, and must not make our node a stock one.
        A 5xx says nothing either way."""
        if EPOCH_HEADER in headers:
            self.stock = False
            if self.epoch != headers[EPOCH_HEADER]:
                self.takes_basic = False  # restarted, maybe upgraded: sign again
            self.epoch = headers[EPOCH_HEADER]
        if CHECKS_HEADER in headers:
            self.checks = headers[CHECKS_HEADER] == "on"
        elif self.stock is None and status < 500:
            self.stock = True

    async def send_batch(self, items: list[bytes]) -> list[Any]:
        """POST the items (each already JSON); the peer's `responseList`, one answer per item."""
        document = await self._call(
            "POST",
            "peerreplication/batch/",
            data=b'{"replicationList":[' + b",".join(items) + b"]}",
            headers={hdrs.CONTENT_TYPE: "application/json"},
        )
        answers = document.get("responseList") if isinstance(document, dict) else None
        if not isinstance(answers, list):
            raise PeerRefused(f"{self.url}: the batch answer has no responseList")
        return answers

    async def fetch_registry(self) -> dict[str, Any]:
        """GET apps/: the peer's whole registry. Parsed with collections paused
        (registry/health/heap.py): at 100 000 instances the collector walked its million
        objects again and again while they were made, most of the parse's time, in every
        anti-entropy round with a stock peer."""
        return _object(await self._call("GET", "apps/", bulky=True), self.url)

    async def fetch_application(self, app: str) -> dict[str, Any] | None:
        """GET apps/{app}: one application, or None when the peer has no instance of it."""
        try:
            return _object(await self._call("GET", f"apps/{app}"), self.url)
        except _NotFound:
            return None

    async def fetch_removed(self, app: str | None = None) -> dict[str, Any]:
        """GET peerreplication/removed: the removals the peer remembers (of `app`, or all)."""
        query = "" if app is None else f"?app={quote(app, safe='')}"
        return _object(await self._call("GET", "peerreplication/removed" + query), self.url)

    async def fetch_digest(self) -> dict[str, Any]:
        """GET peerreplication/digest: the peer's per-application digests."""
        return _object(await self._call("GET", "peerreplication/digest"), self.url)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        data: bytes = b"",
        headers: dict[str, str] | None = None,
        bulky: bool = False,
    ) -> Any:
        url = URL(self.url + path)
        sent = dict(headers or {})
        signer = self._signer
        if signer is not None:
            sent[hdrs.HOST] = url.raw_authority  # what is signed is what is sent
            basic = self.takes_basic
            sent[hdrs.AUTHORIZATION] = (
                signer.basic if basic else signer.authorization(method, url, data)
            )
        try:
            async with self._session.request(
                method, url, headers=sent, data=data or None
            ) as response:
                body = await response.read()
                status = response.status
                self._learn(response.headers, status)
                self.answering = status < 500
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.answering = False
            raise _unavailable(self.url, exc) from None
        if status == 401 and signer is not None and self.basic_fallback and not basic:
            # A stock Eureka server, or one of our earlier releases: Basic, as it asks.
            self.takes_basic = True
            log.warning("peer_refuses_signature", peer=self.url, sending="basic")
            return await self._call(method, path, data=data, headers=headers, bulky=bulky)
        if status == 200:
            try:
                if not bulky:
                    return orjson.loads(body)
                with heap.collections_paused(then_freeze=False):
                    return orjson.loads(body)
            except orjson.JSONDecodeError:
                raise PeerRefused(f"{self.url}{path}: the answer is not JSON") from None
        if status in (503, 429):
            raise PeerUnavailable(f"{self.url}: {status} (busy)", congested=True)
        if status == 404:
            raise _NotFound(path)
        if status == 403 and (b'"not_synced"' in body or (self.stock and method == "GET")):
            # Ours says so; a stock Eureka server refuses reads so in its start-up window.
            raise PeerSyncing(f"{self.url}: still syncing from its peers")
        if status == 401 or (status == 403 and b'"forbidden"' in body):
            raise PeerRefused(f"{self.url}: {status}: it does not take our credentials.peer")
        raise PeerRefused(f"{self.url}{path}: {status} {body[:200].decode(errors='replace')}")


def _unavailable(url: str, exc: BaseException) -> PeerUnavailable:
    """The failure, told in words, and `exc`'s tracebacks dropped. A failed call's exceptions
    and the frames their tracebacks hold form reference cycles, which only the collector
    frees; the server freezes the heap every second (registry/health/heap.py), so cycles
    caught by a freeze were kept for good: an unreachable peer, tried every second or two,
    grew the heap 37 KB a second."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # no connection: unreachable, not busy
        error = PeerUnavailable(f"{url}: connect timed out ({exc!r})", congested=False)
    elif isinstance(exc, TimeoutError):
        error = PeerUnavailable(f"{url}: timed out ({exc!r})", congested=True)
    else:
        error = PeerUnavailable(f"{url}: {exc}", congested=False)
    seen: BaseException | None = exc
    for _ in range(8):  # the chain of causes: a few links at most
        if seen is None:
            break
        seen.__traceback__ = None
        seen = seen.__cause__ or seen.__context__
    return error


class _NotFound(PeerRefused):
    pass


def _object(document: Any, url: str) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise PeerRefused(f"{url}: expected a JSON object")
    return document
