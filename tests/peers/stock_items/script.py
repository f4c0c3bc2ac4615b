"""What the capture tool asks of the stock node, in order: every client or admin call that makes
a Eureka server replicate (its PeerAwareInstanceRegistryImpl sends Register, Heartbeat, Cancel,
StatusUpdate and DeleteStatusOverride), in the shapes clients send them, and the calls Eureka
answers without replicating (a heartbeat or cancel of an unknown instance).

A request is made when its step runs: a registration carries the time as its
lastDirtyTimestamp, and a heartbeat the one its client registered with, as a client's do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from tests.helpers import instance_doc

JSON_BODY = {"Content-Type": "application/json"}
XML_BODY = {"Content-Type": "application/xml"}


@dataclass(frozen=True)
class Call:
    """One request to the stock node; `path` is below /eureka/."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


@dataclass
class Clients:
    """What the clients of the script know: each instance's lastDirtyTimestamp as registered."""

    dirty_ms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """A named step: the call it makes, given the time and what clients know; with
    `lose_heartbeats`, the peer answers the step's heartbeats 404; with `withhold`, the
    replying peer never gets what the stock node sends in the step (recorder.py)."""

    name: str
    call: Callable[[int, Clients], Call]
    lose_heartbeats: bool = False
    withhold: bool = False


def register_json(app: str, iid: str, **fields: object) -> Callable[[int, Clients], Call]:
    def call(now_ms: int, clients: Clients) -> Call:
        clients.dirty_ms[iid] = now_ms
        doc = instance_doc(app, iid, lastDirtyTimestamp=str(now_ms), **fields)
        return Call("POST", f"apps/{app}", JSON_BODY, orjson.dumps({"instance": doc}))

    return call


def register_xml(app: str, iid: str, *, port: int, zone: str) -> Callable[[int, Clients], Call]:
    def call(now_ms: int, clients: Clients) -> Call:
        clients.dirty_ms[iid] = now_ms
        body = f"""<instance>
  <instanceId>{iid}</instanceId><hostName>{iid}.example.internal</hostName><app>{app}</app>
  <ipAddr>10.0.0.6</ipAddr><status>UP</status><overriddenstatus>UNKNOWN</overriddenstatus>
  <port enabled="true">{port}</port><securePort enabled="true">8443</securePort>
  <countryId>1</countryId>
  <dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo">
    <name>MyOwn</name></dataCenterInfo>
  <leaseInfo><renewalIntervalInSecs>30</renewalIntervalInSecs>
    <durationInSecs>90</durationInSecs></leaseInfo>
  <metadata><zone>{zone}</zone><management.port>{port}</management.port></metadata>
  <vipAddress>{app.lower()}</vipAddress><secureVipAddress>{app.lower()}-s</secureVipAddress>
  <lastDirtyTimestamp>{now_ms}</lastDirtyTimestamp>
</instance>"""
        return Call("POST", f"apps/{app}", XML_BODY, body.encode())

    return call


def heartbeat(app: str, iid: str, status: str = "UP") -> Callable[[int, Clients], Call]:
    def call(_now_ms: int, clients: Clients) -> Call:
        dirty = clients.dirty_ms.get(iid, 1)
        return Call("PUT", f"apps/{app}/{iid}?status={status}&lastDirtyTimestamp={dirty}")

    return call


def plain(method: str, path: str) -> Callable[[int, Clients], Call]:
    def call(_now_ms: int, _clients: Clients) -> Call:
        return Call(method, path)

    return call


def register_o2() -> Callable[[int, Clients], Call]:
    return register_json(
        "ORDERS",
        "o-2",
        ipAddr="10.0.0.7",
        securePort={"$": 8443, "@enabled": "true"},
        metadata={"zone": "a", "version": "1.4.2"},
    )


SCRIPT = (
    Step("register ORDERS o-1, JSON", register_json("ORDERS", "o-1")),
    Step(
        "register ORDERS o-2, JSON, secure port and metadata",
        register_o2(),
    ),
    Step("register BILLING b-1, XML", register_xml("BILLING", "b-1", port=9090, zone="a")),
    Step("register BILLING b-2, XML", register_xml("BILLING", "b-2", port=9091, zone="b")),
    Step(
        "register SHIPPING s-1, JSON, STARTING", register_json("SHIPPING", "s-1", status="STARTING")
    ),
    Step("heartbeat o-1", heartbeat("ORDERS", "o-1")),
    Step("heartbeat b-1", heartbeat("BILLING", "b-1")),
    Step("heartbeat b-2", heartbeat("BILLING", "b-2")),
    Step(
        "admin: PUT o-2 OUT_OF_SERVICE", plain("PUT", "apps/ORDERS/o-2/status?value=OUT_OF_SERVICE")
    ),
    Step("heartbeat o-2, under an override", heartbeat("ORDERS", "o-2")),
    Step("client: s-1 registers again, UP", register_json("SHIPPING", "s-1", status="UP")),
    Step("heartbeat s-1", heartbeat("SHIPPING", "s-1")),
    Step("admin: metadata of b-1", plain("PUT", "apps/BILLING/b-1/metadata?zone=c")),
    Step("heartbeat b-1 after its metadata changed", heartbeat("BILLING", "b-1")),
    Step(
        "admin: PUT b-1 OUT_OF_SERVICE, the peer misses it",
        plain("PUT", "apps/BILLING/b-1/status?value=OUT_OF_SERVICE"),
        withhold=True,
    ),
    Step("heartbeat b-1 under an override the peer missed", heartbeat("BILLING", "b-1")),
    Step(
        "admin: DELETE b-1's override, value=UP",
        plain("DELETE", "apps/BILLING/b-1/status?value=UP"),
    ),
    Step("register ORDERS o-3, the peer misses it", register_json("ORDERS", "o-3"), withhold=True),
    Step("heartbeat o-3, which the peer lacks", heartbeat("ORDERS", "o-3")),
    Step("admin: bare DELETE of o-2's override", plain("DELETE", "apps/ORDERS/o-2/status")),
    Step("heartbeat o-2, its override deleted", heartbeat("ORDERS", "o-2")),
    Step("client: o-2 registers again after that 404", register_o2()),
    Step("admin: PUT o-2 DOWN", plain("PUT", "apps/ORDERS/o-2/status?value=DOWN")),
    Step("heartbeat o-2, DOWN by an admin", heartbeat("ORDERS", "o-2")),
    Step(
        "heartbeat o-2, DOWN by an admin, the peer lost it",
        heartbeat("ORDERS", "o-2"),
        lose_heartbeats=True,
    ),
    Step(
        "admin: DELETE o-2's override, value=UP", plain("DELETE", "apps/ORDERS/o-2/status?value=UP")
    ),
    Step("heartbeat o-2 after the DELETE with value=UP", heartbeat("ORDERS", "o-2")),
    Step(
        "admin: PUT s-1 OUT_OF_SERVICE, the peer misses it",
        plain("PUT", "apps/SHIPPING/s-1/status?value=OUT_OF_SERVICE"),
        withhold=True,
    ),
    Step(
        "client: s-1 registers again, DOWN, under an override, the peer misses it",
        register_json("SHIPPING", "s-1", status="DOWN"),
        withhold=True,
    ),
    Step("heartbeat s-1 under an override the peer missed", heartbeat("SHIPPING", "s-1")),
    Step(
        "admin: DELETE s-1's override, value=OUT_OF_SERVICE",
        plain("DELETE", "apps/SHIPPING/s-1/status?value=OUT_OF_SERVICE"),
    ),
    Step("heartbeat s-1 after its override went", heartbeat("SHIPPING", "s-1")),
    Step("heartbeat o-1, the peer lost it", heartbeat("ORDERS", "o-1"), lose_heartbeats=True),
    Step(
        "client: o-1 registers again, another port",
        register_json("ORDERS", "o-1", port={"$": 8081, "@enabled": "true"}),
    ),
    Step(
        "admin: PUT b-2 OUT_OF_SERVICE",
        plain("PUT", "apps/BILLING/b-2/status?value=OUT_OF_SERVICE"),
    ),
    Step("cancel b-2, under an override", plain("DELETE", "apps/BILLING/b-2")),
    Step("cancel o-1", plain("DELETE", "apps/ORDERS/o-1")),
    Step("heartbeat of an unknown instance", heartbeat("ORDERS", "o-9")),
    Step("cancel of an unknown instance", plain("DELETE", "apps/ORDERS/o-9")),
    Step("override of an unknown instance", plain("PUT", "apps/ORDERS/o-9/status?value=DOWN")),
    Step("admin: PUT o-2 UNKNOWN", plain("PUT", "apps/ORDERS/o-2/status?value=UNKNOWN")),
    Step("heartbeat o-2 under an override of UNKNOWN", heartbeat("ORDERS", "o-2")),
    Step("client: o-2 registers again under an override of UNKNOWN", register_o2()),
    Step(
        "admin: bare DELETE of o-2's override of UNKNOWN", plain("DELETE", "apps/ORDERS/o-2/status")
    ),
    Step("client: o-2 registers again, its override gone", register_o2()),
    Step("heartbeat o-2, the last", heartbeat("ORDERS", "o-2")),
)
