"""`DiscoveryClient`: registers an instance, keeps a live copy of the registry, answers lookups.

    async with DiscoveryClient("http://127.0.0.1:8761/eureka/", app="orders", port=8080) as c:
        billing = c.pick("billing")          # an UP instance, round-robin; no IO
        async for change in c.changes("billing"): ...

Two background loops do the IO: `registry.client.registration` keeps the lease,
`registry.client.fetcher` keeps the copy; they share nothing but the transport, so a fetch that
fails never holds up a heartbeat. Lookups read the copy only.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import weakref
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from urllib.parse import urlsplit

import aiohttp
import structlog

from registry.client.fetcher import Counters, Fetcher
from registry.client.local_copy import LocalCopy, matches
from registry.client.model import Change, Instance
from registry.client.registration import OwnInstance, Registration, local_address
from registry.client.servers import Server, ServerList, parse_servers
from registry.client.transport import Transport, Unavailable
from registry.common.clock import Clock, SystemClock
from registry.common.tasks import Loops, wait_set
from rules import InstanceStatus

log = structlog.get_logger()


class NoInstance(LookupError):
    """No UP instance of the application or VIP is known."""


class DiscoveryClient:
    """A Eureka client on asyncio, for our server (push) and any Eureka server (polling).

    `servers`: base URLs, comma-separated, credentials in the URL; the client sticks to the
    first that answers. `app` and `port` name the instance it registers; `register=False`
    makes a pure discovery client. Entering registers, starts the heartbeats and waits up to
    `start_timeout` for the first full fetch (a failed one does not stop anything: the
    client keeps trying); leaving, or the surrounding task being cancelled, cancels the
    instance's lease.
    """

    def __init__(
        self,
        servers: str,
        *,
        app: str = "",
        port: int = 0,
        register: bool = True,
        instance_id: str = "",
        host_name: str = "",
        ip_addr: str = "",
        secure_port: int | None = None,
        vip_address: str = "",
        secure_vip_address: str = "",
        home_page_url: str = "",
        status_page_url: str = "",
        health_check_url: str = "",
        metadata: Mapping[str, str] | None = None,
        status: InstanceStatus = InstanceStatus.UP,
        renewal_interval: int = 30,
        lease_duration: int = 90,
        fetch_interval: float = 30.0,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        return_after: float = 300.0,
        start_timeout: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._servers = ServerList(parse_servers(servers), return_after=return_after)
        self._clock = clock or SystemClock()
        self._own: OwnInstance | None = None
        self._detect_ip = not ip_addr  # found on entering, from the route to the server
        if register:
            if not app or not port:
                raise ValueError("app and port name the instance to register (or register=False)")
            self._own = OwnInstance(
                app=app,
                port=port,
                host_name=host_name or socket.gethostname(),
                ip_addr=ip_addr or "0.0.0.0",
                instance_id=instance_id,
                secure_port=secure_port,
                vip_address=vip_address,
                secure_vip_address=secure_vip_address,
                home_page_url=home_page_url,
                status_page_url=status_page_url,
                health_check_url=health_check_url,
                metadata=dict(metadata or {}),
                status=status,
                renewal_interval=renewal_interval,
                lease_duration=lease_duration,
            )
        self._fetch_interval = fetch_interval
        self._timeouts = (connect_timeout, read_timeout)
        self._start_timeout = start_timeout
        self.stats = Counters()
        self._copy = LocalCopy()
        self._turns: dict[str, itertools.count[int]] = {}  # pick's turns, by name
        self._subscribers: weakref.WeakSet[Changes] = weakref.WeakSet()
        self._changed: asyncio.Event | None = None  # made while someone waits for a change
        self._loops = Loops(self._clock)
        self._session: aiohttp.ClientSession | None = None
        self._registration: Registration | None = None
        self._fetcher: Fetcher | None = None
        self._closing: asyncio.Future[None] | None = None

    # -- lookups: no IO, answered from the copy --------------------------------------------

    def instances(self, app_or_vip: str, *, all_statuses: bool = False) -> tuple[Instance, ...]:
        """The UP instances of an application or VIP address (all of them with
        `all_statuses`), ordered by id; empty when none is known."""
        return self._copy.instances(app_or_vip, up_only=not all_statuses)

    def pick(self, app_or_vip: str) -> Instance:
        """One UP instance, taking each in turn; `NoInstance` when there is none."""
        up = self._copy.instances(app_or_vip)
        if not up:
            raise NoInstance(f"no UP instance of {app_or_vip!r} is known")
        turn = self._turns.setdefault(app_or_vip.upper(), itertools.count())
        return up[next(turn) % len(up)]

    def applications(self) -> list[str]:
        """The names of the applications the copy holds."""
        return self._copy.applications()

    def changes(self, app_or_vip: str | None = None) -> Changes:
        """The changes to an application or VIP (every change with None) from now on, as an
        async iterator of ADDED, MODIFIED and DELETED; it ends when the client closes. A full
        fetch that replaces the copy (at the start, or after a resync) shows as the changes
        that it made."""
        stream = Changes(self, app_or_vip)
        self._subscribers.add(stream)
        if self._closing is not None:
            stream.close()  # nothing will come: it ends at once
        return stream

    async def wait_for(
        self, app_or_vip: str, count: int = 1, *, timeout: float = 30.0
    ) -> tuple[Instance, ...]:
        """Wait until at least `count` UP instances are known; TimeoutError after `timeout`."""
        deadline = self._clock.monotonic() + timeout
        while len(found := self.instances(app_or_vip)) < count:
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{len(found)} UP instance(s) of {app_or_vip!r} after {timeout} s, "
                    f"waited for {count}"
                )
            if self._changed is None:
                self._changed = asyncio.Event()
            await wait_set(self._clock, self._changed, remaining)
        return found

    @property
    def sync_mode(self) -> str:
        """How the copy is kept up to date now: `watch` (the SSE stream), `long_poll`,
        `delta` (polled every `fetch_interval`, as stock clients), or `none` (no server has
        answered a full fetch yet)."""
        return "none" if self._fetcher is None else self._fetcher.mode

    @property
    def server(self) -> str:
        """The base URL of the server the client uses now (without credentials)."""
        return self._servers.current.url

    # -- the instance's own status ----------------------------------------------------------

    @property
    def instance(self) -> OwnInstance | None:
        """What this client registers (None for a pure discovery client)."""
        return self._own

    async def set_status(self, status: InstanceStatus) -> None:
        """Register the instance's own new status (STARTING, UP, DOWN, ...) at once."""
        if self._registration is None:
            raise RuntimeError("set_status: this client registers no instance")
        await self._registration.set_status(status)

    # -- life cycle -------------------------------------------------------------------------

    async def __aenter__(self) -> DiscoveryClient:
        self._session = aiohttp.ClientSession()
        try:
            await self._start(self._session)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _start(self, session: aiohttp.ClientSession) -> None:
        connect, read = self._timeouts
        transport = Transport(
            self._servers,
            session,
            self._clock,
            connect_timeout=connect,
            read_timeout=read,
            on_failover=self._failed_over,
        )
        fetcher = self._fetcher = Fetcher(
            transport,
            self._copy,
            self._clock,
            self.stats,
            self._publish,
            fetch_interval=self._fetch_interval,
        )
        if self._own is not None:
            if self._detect_ip:
                first = urlsplit(self._servers.servers[0].url)
                default = 443 if first.scheme == "https" else 80
                self._own.ip_addr = await local_address(
                    first.hostname or "", first.port or default, timeout=self._timeouts[0]
                )
            self._registration = Registration(transport, self._clock, self.stats, self._own)
            self._loops.start(self._registration.run, name="registry_client_lease")
        self._loops.start(fetcher.run, name="registry_client_fetch")
        await wait_set(self._clock, fetcher.first_fetch, self._start_timeout)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the loops, cancel the instance's lease, end every `changes` iterator; within
        `connect_timeout + read_timeout` as a whole. The close is shielded from the caller's
        cancellation (a service's shutdown is one) and waited for even then."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        try:
            await asyncio.shield(self._closing)
        except asyncio.CancelledError:
            await asyncio.wait((self._closing,))  # a third cancellation gives up on it
            raise

    async def _close(self) -> None:
        await self._loops.stop()
        if self._registration is not None:
            try:
                async with asyncio.timeout(sum(self._timeouts)):
                    await self._registration.cancel()
            except (Unavailable, TimeoutError) as exc:  # its lease runs out on its own
                log.warning("instance_cancel_failed", error=str(exc) or "timed out")
        for stream in list(self._subscribers):
            stream.close()
        if self._session is not None:
            await self._session.close()

    def _publish(self, changes: list[Change]) -> None:
        if changes and self._subscribers:
            for stream in self._subscribers:
                stream.offer(changes)
        if changes and self._changed is not None:
            self._changed.set()
            self._changed = None

    def _failed_over(self, left: Server, to: Server, reason: str) -> None:
        self.stats.failovers += 1
        log.warning("registry_failover", left=left.url, to=to.url, reason=reason)


class Changes:
    """An async iterator of the changes to one application or VIP (see `changes`). One that
    is dropped unread is forgotten with its queue; `close` ends one that is still held."""

    def __init__(self, client: DiscoveryClient, name: str | None) -> None:
        self._client = client
        self._name = name
        self._queue: asyncio.Queue[Change | None] = asyncio.Queue()
        self._ended = False

    def offer(self, changes: list[Change]) -> None:
        for change in changes:
            if matches(change, self._name):
                self._queue.put_nowait(change)

    def close(self) -> None:
        """Stop taking changes; iteration ends after those already taken."""
        self._client._subscribers.discard(self)
        self._queue.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[Change]:
        return self

    async def __anext__(self) -> Change:
        if self._ended:
            raise StopAsyncIteration
        change = await self._queue.get()
        if change is None:
            self._ended = True
            raise StopAsyncIteration
        return change
