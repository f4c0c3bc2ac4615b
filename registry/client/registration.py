"""The client's own instance: what it registers, and the loop that keeps its lease.

The loop registers (204), heartbeats every renewal interval and registers again when the server
says it must: a 404 (the server forgot the instance: evicted, restarted without its state,
cancelled by someone else) or a 409 (a server holds a record newer than ours; the instance owns
its record, so it registers again with a newer `lastDirtyTimestamp`). A change of the instance's
own status (`set_status`) is a registration too, as Eureka clients send it; the status PUT is an
admin's override, not the instance's. A server that cannot be reached costs a warning and a
try on the next beat, never the loop.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from registry.client.fetcher import MAX_PAUSE, Counters
from registry.client.transport import Transport, Unavailable
from registry.common.clock import Clock
from registry.common.tasks import wait_set
from rules import InstanceStatus

log = structlog.get_logger()

DATA_CENTER = {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}


@dataclass(kw_only=True)
class OwnInstance:
    app: str
    port: int
    host_name: str
    ip_addr: str
    instance_id: str = ""  # default: host:app:port, as Spring Cloud names instances
    secure_port: int | None = None
    vip_address: str = ""  # default: the application's name, lower-cased
    secure_vip_address: str = ""
    home_page_url: str = ""  # default: http://host:port/
    status_page_url: str = ""  # default: home page + info
    health_check_url: str = ""  # default: home page + health
    metadata: Mapping[str, str] = field(default_factory=dict)
    status: InstanceStatus = InstanceStatus.UP
    renewal_interval: int = 30  # seconds between heartbeats
    lease_duration: int = 90  # seconds the server waits after the last one
    last_dirty_ms: int = 0

    def __post_init__(self) -> None:
        if not self.app:
            raise ValueError("app: an application name is needed to register")
        if not 0 < self.port < 65536:
            raise ValueError(f"port: {self.port} is not a TCP port")
        if self.renewal_interval <= 0 or self.lease_duration <= self.renewal_interval:
            raise ValueError(
                "renewal_interval and lease_duration: a lease must outlast the interval between "
                f"heartbeats (got {self.renewal_interval} s and {self.lease_duration} s)"
            )
        self.instance_id = self.instance_id or f"{self.host_name}:{self.app.lower()}:{self.port}"
        self.vip_address = self.vip_address or self.app.lower()
        self.home_page_url = self.home_page_url or f"http://{self.host_name}:{self.port}/"
        self.status_page_url = self.status_page_url or self.home_page_url + "info"
        self.health_check_url = self.health_check_url or self.home_page_url + "health"

    @property
    def path(self) -> str:
        return f"apps/{self.app.upper()}/{self.instance_id}"

    def wire(self) -> dict[str, Any]:
        """The registration body, as the Java client sends it."""
        instance: dict[str, Any] = {
            "instanceId": self.instance_id,
            "hostName": self.host_name,
            "app": self.app.upper(),
            "ipAddr": self.ip_addr,
            "status": self.status.value,
            "overriddenStatus": "UNKNOWN",
            "port": {"$": self.port, "@enabled": "true"},
            "securePort": {
                "$": self.secure_port or 443,
                "@enabled": "true" if self.secure_port else "false",
            },
            "countryId": 1,
            "dataCenterInfo": DATA_CENTER,
            "leaseInfo": {
                "renewalIntervalInSecs": self.renewal_interval,
                "durationInSecs": self.lease_duration,
            },
            "metadata": dict(self.metadata) or {"@class": "java.util.Collections$EmptyMap"},
            "homePageUrl": self.home_page_url,
            "statusPageUrl": self.status_page_url,
            "healthCheckUrl": self.health_check_url,
            "vipAddress": self.vip_address,
            "lastDirtyTimestamp": str(self.last_dirty_ms),
        }
        if self.secure_vip_address:
            instance["secureVipAddress"] = self.secure_vip_address
        return {"instance": instance}


async def local_address(server_host: str, server_port: int, *, timeout: float) -> str:
    """The address this host reaches the server from: a UDP socket connected towards it (which
    sends nothing) is given the source address the routing table picks. Loopback, said in a
    warning, when the server's name does not resolve within `timeout`."""
    loop = asyncio.get_running_loop()
    try:
        lookup = loop.getaddrinfo(server_host, server_port, type=socket.SOCK_DGRAM)
        infos = await asyncio.wait_for(lookup, timeout)
        family, _, _, _, address = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.setblocking(False)  # a datagram socket's connect never waits: say so
            probe.connect(address)
            return str(probe.getsockname()[0])
    except (OSError, TimeoutError) as exc:
        log.warning("instance_address_unknown", server=server_host, error=str(exc) or "timed out")
        return "127.0.0.1"


class Registration:
    def __init__(
        self, transport: Transport, clock: Clock, stats: Counters, own: OwnInstance
    ) -> None:
        self.own = own
        self._transport = transport
        self._clock = clock
        self._stats = stats
        self._registered = False
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one call at a time: a status change waits for a beat
        self._rng = random.Random()

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                async with self._lock:
                    if self._registered:
                        await self._heartbeat()
                    else:
                        await self._register()
                failures = 0
                pause = self.own.renewal_interval if self._registered else 0.0
            except Unavailable as exc:
                self._stats.heartbeat_failures += 1
                failures += 1
                pause = min(self.own.renewal_interval, MAX_PAUSE, 2 ** (failures - 1))
                pause *= self._rng.uniform(0.5, 1.0)
                log.warning("registry_heartbeat_failed", error=str(exc), retry_in=round(pause, 2))
            self._wake.clear()
            await wait_set(self._clock, self._wake, pause)

    async def set_status(self, status: InstanceStatus) -> None:
        """Change the instance's own status and register it; `Unavailable` if no server took
        it now (the loop sends it again on its next beat)."""
        async with self._lock:
            self.own.status = status
            self._dirty()
            try:
                await self._register()
            except Unavailable:
                self._wake.set()  # the loop tries again now, with its backoff
                raise

    async def cancel(self) -> None:
        """Take the instance out of the registry, if it was ever in it. The loop has stopped:
        this does not queue behind a status change still waiting for its answer."""
        if not self._stats.registrations:
            return  # nothing to take out; a DELETE could take out a successor's lease
        reply = await self._transport.call("DELETE", self.own.path)
        self._registered = False
        log.info(
            "instance_cancelled",
            app=self.own.app,
            instance_id=self.own.instance_id,
            status=reply.status,
        )

    async def _register(self) -> None:
        if not self.own.last_dirty_ms:
            self._dirty()
        reply = await self._transport.call(
            "POST", f"apps/{self.own.app.upper()}", json=self.own.wire()
        )
        if reply.status not in (200, 204):
            self._registered = False
            detail = reply.body[:300].decode("utf-8", "replace")
            raise Unavailable(f"registration refused ({reply.status}): {detail}")
        self._registered = True
        self._stats.registrations += 1
        log.info(
            "instance_registered",
            app=self.own.app,
            instance_id=self.own.instance_id,
            status=self.own.status.value,
            server=reply.server.url,
        )

    async def _heartbeat(self) -> None:
        params = {
            "status": self.own.status.value,
            "lastDirtyTimestamp": str(self.own.last_dirty_ms),
        }
        reply = await self._transport.call("PUT", self.own.path, params=params)
        if reply.status == 200:
            self._stats.heartbeats += 1
            return
        if reply.status in (404, 409):
            log.info(
                "instance_reregistering", instance_id=self.own.instance_id, status=reply.status
            )
            self._dirty()
            self._registered = False
            await self._register()
            return
        detail = reply.body[:300].decode("utf-8", "replace")
        raise Unavailable(f"heartbeat refused ({reply.status}): {detail}")

    def _dirty(self) -> None:
        """The record changed: a newer `lastDirtyTimestamp` than any the server holds of ours."""
        self.own.last_dirty_ms = max(self._clock.wall_ms(), self.own.last_dirty_ms + 1)
