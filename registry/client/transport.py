"""HTTP to the registry's servers: every call bounded in time, failing over between servers.

A call goes to the server the `ServerList` names. If that server cannot be reached, times out or
answers 5xx, it is marked failed and the call is made again on the server the list goes over
to, each server at most once per call; `Unavailable` when none answered. Every other answer,
4xx included, is the caller's to read: a 404 to a heartbeat means "register again", not "this
server is broken".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from registry.client.servers import Server, ServerList
from registry.common.clock import Clock

FailoverListener = Callable[[Server, Server, str], None]


class Unavailable(Exception):
    """No server answered the call."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    server: Server


class Transport:
    def __init__(
        self,
        servers: ServerList,
        session: aiohttp.ClientSession,
        clock: Clock,
        *,
        connect_timeout: float,
        read_timeout: float,
        on_failover: FailoverListener,
    ) -> None:
        self.servers = servers
        self._session = session
        self._clock = clock
        self._connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._on_failover = on_failover
        self._using = servers.current
        self.moved = asyncio.Event()  # set (and replaced) when the client changes servers

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        read_timeout: float | None = None,
        whole: bool = True,
    ) -> Reply:
        """`method path` on the current server, then on the others while they fail. The
        answer comes within `read_timeout` as a whole, or with `whole=False` (a download
        that may be long) within `read_timeout` of each read."""
        tried: set[int] = set()
        while True:
            server = self.choose()
            if id(server) in tried:
                raise Unavailable(f"{method} {path}: no server answered")
            tried.add(id(server))
            reason = ""
            try:
                async with self._session.request(
                    method,
                    server.url + path,
                    params=params,
                    json=json,
                    headers=_with_auth(server, headers),
                    timeout=self._timeout(read_timeout, total=whole),
                ) as response:
                    body = await response.read()
                if not _failure(response.status):
                    self.servers.succeeded(server)
                    return Reply(response.status, response.headers, body, server)
                reason = f"answered {response.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = _describe(exc)
            if not self.failed(server, reason):
                raise Unavailable(f"{method} {path}: {server.url} {reason}")

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        read_timeout: float,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A GET whose body is read as it comes (a watch stream), on the current server.
        Each read waits at most `read_timeout`; a server that fails is left as for a call, and
        `Unavailable` raised, for the caller to open the stream again."""
        server = self.choose()
        try:
            async with self._session.get(
                server.url + path,
                params=params,
                headers=_with_auth(server, headers),
                timeout=self._timeout(read_timeout, total=False),
            ) as response:
                if _failure(response.status):
                    reason = f"answered {response.status}"
                    self.failed(server, reason)
                    raise Unavailable(f"GET {path}: {server.url} {reason}")
                yield response
        except (aiohttp.ClientError, TimeoutError) as exc:  # opening it, or reading it
            reason = _describe(exc)
            self.failed(server, reason)
            raise Unavailable(f"GET {path}: {server.url} {reason}") from exc

    def choose(self) -> Server:
        """The server to use now (the first again, once it may be: see `ServerList`)."""
        return self._use(self.servers.choose(self._clock.monotonic()))

    def failed(self, server: Server, reason: str) -> bool:
        """Mark `server` failed; whether the client went over to another."""
        successor = self.servers.failed(server, self._clock.monotonic())
        if successor is not None:
            self._on_failover(server, successor, reason)
            self._use(successor)
        return successor is not None

    def _use(self, server: Server) -> Server:
        if server is not self._using:
            self._using = server
            self.moved.set()
            self.moved = asyncio.Event()
        return server

    def _timeout(self, read_timeout: float | None, *, total: bool) -> aiohttp.ClientTimeout:
        read = read_timeout if read_timeout is not None else self.read_timeout
        return aiohttp.ClientTimeout(
            total=self._connect_timeout + read if total else None,
            connect=self._connect_timeout,
            sock_read=read,
        )


def _failure(status: int) -> bool:
    """Whether an answer says the server is failing: a 5xx, but for 501 (not implemented),
    which says what it does not serve."""
    return status >= 500 and status != 501


def _with_auth(server: Server, headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if server.authorization is None:
        return headers
    return {**(headers or {}), "Authorization": server.authorization}


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
