"""The same questions asked of Spring Cloud Netflix's Eureka server and of ours, the answers
compared field by field.

One script of wire requests (registrations in JSON and XML, heartbeats, the reads in JSON and
XML, the delta, overrides set and removed, metadata, cancels, bad input) goes to a real Eureka
server (tests/bench/eureka_server/, built with Maven, its read-only cache off so that a read
follows a write, as ours does) and to ours, step by step. Each answer is reduced to what a
client can rely on: the status, and the body parsed (JSON, or XML as a tree), with times
masked. Where the two differ on purpose the fields that differ are named below with the
reason, and docs/differences.md says why; any other difference fails the test, a status always
(but a bad-input step's 400 where Eureka answers the code named), and so does a named
difference that is gone (tests/differential.py judges).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from registry import Settings, create_app
from registry.appkeys import CLUSTER, REGISTRY
from tests.differential import Difference, Excuse, differences, judged, reduced
from tests.helpers import eventually, free_port, instance_doc
from tests.stock_clients.java import JavaService, build, need_java

pytestmark = [pytest.mark.slow, pytest.mark.java]

EUREKA_SERVER = Path(__file__).parents[1] / "bench" / "eureka_server"
JSON = {"Accept": "application/json"}
XML = {"Accept": "application/xml"}
JSON_BODY = {"Content-Type": "application/json"}
XML_BODY = {"Content-Type": "application/xml"}
COMPACT = {"X-Eureka-Accept": "compact"}


@dataclass(frozen=True)
class Ask:
    """One request of the script; `name` says what it asks."""

    name: str
    method: str
    path: str  # below /eureka/
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


def registration(app: str, iid: str, **fields: Any) -> bytes:
    return orjson.dumps({"instance": instance_doc(app, iid, **fields)})


BILLING_XML = b"""<instance>
  <instanceId>b-1</instanceId><hostName>b-1.example.internal</hostName><app>BILLING</app>
  <ipAddr>10.0.0.6</ipAddr><status>UP</status><overriddenstatus>UNKNOWN</overriddenstatus>
  <port enabled="true">9090</port><securePort enabled="false">443</securePort>
  <countryId>1</countryId>
  <dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo">
    <name>MyOwn</name></dataCenterInfo>
  <leaseInfo><renewalIntervalInSecs>30</renewalIntervalInSecs>
    <durationInSecs>90</durationInSecs></leaseInfo>
  <metadata><zone>a</zone></metadata>
  <vipAddress>billing</vipAddress><secureVipAddress>billing</secureVipAddress>
  <lastDirtyTimestamp>1735689000000</lastDirtyTimestamp>
</instance>"""

SCRIPT = [
    Ask("empty registry, JSON", "GET", "apps", JSON),
    Ask("empty registry, XML", "GET", "apps", XML),
    Ask("register, JSON", "POST", "apps/ORDERS", JSON_BODY, registration("ORDERS", "o-1")),
    Ask(
        "register, the fewest fields",
        "POST",
        "apps/ORDERS",
        JSON_BODY,
        orjson.dumps(
            {
                "instance": {
                    "instanceId": "o-2",
                    "hostName": "o-2.example.internal",
                    "app": "ORDERS",
                    "ipAddr": "10.0.0.7",
                    "status": "UP",
                    "dataCenterInfo": instance_doc()["dataCenterInfo"],
                    "lastDirtyTimestamp": "1735689000000",
                }
            }
        ),
    ),
    Ask("register, XML", "POST", "apps/BILLING", XML_BODY, BILLING_XML),
    Ask("registry, JSON", "GET", "apps", JSON),
    Ask("registry, XML", "GET", "apps", XML),
    Ask("registry, compact JSON", "GET", "apps", {**JSON, **COMPACT}),
    Ask("registry, compact XML", "GET", "apps", {**XML, **COMPACT}),
    Ask("one application, compact", "GET", "apps/BILLING", {**JSON, **COMPACT}),
    Ask("a VIP, compact", "GET", "vips/orders", {**XML, **COMPACT}),
    Ask("one application, JSON", "GET", "apps/ORDERS", JSON),
    Ask("one application, XML", "GET", "apps/BILLING", XML),
    Ask("one instance, JSON", "GET", "apps/ORDERS/o-1", JSON),
    Ask("one instance, XML", "GET", "apps/ORDERS/o-2", XML),
    Ask("an instance by id", "GET", "instances/b-1", JSON),
    Ask("a VIP", "GET", "vips/orders", JSON),
    Ask("a secure VIP", "GET", "svips/billing", XML),
    Ask("an unknown VIP", "GET", "vips/nope", JSON),
    Ask("heartbeat", "PUT", "apps/ORDERS/o-1?status=UP&lastDirtyTimestamp=1735689000000"),
    Ask("heartbeat, older data", "PUT", "apps/ORDERS/o-1?status=UP&lastDirtyTimestamp=1"),
    Ask("heartbeat, no timestamp", "PUT", "apps/ORDERS/o-1"),
    Ask("heartbeat, unknown instance", "PUT", "apps/ORDERS/nope?status=UP"),
    Ask(
        "heartbeat, newer data",
        "PUT",
        "apps/ORDERS/o-1?status=UP&lastDirtyTimestamp=1764000000000",
    ),
    Ask(
        "register, STARTING",
        "POST",
        "apps/ORDERS",
        JSON_BODY,
        registration("ORDERS", "o-4", status="STARTING"),
    ),
    Ask("a STARTING instance", "GET", "apps/ORDERS/o-4", XML),
    Ask(
        "a peer's batch",
        "POST",
        "peerreplication/batch",
        {**JSON_BODY, **JSON, "x-netflix-discovery-replication": "true"},
        orjson.dumps(
            {
                "replicationList": [
                    {
                        "appName": "ORDERS",
                        "id": "o-1",
                        "lastDirtyTimestamp": 1735689000000,
                        "status": "UP",
                        "action": "Heartbeat",
                    },
                    {
                        "appName": "ORDERS",
                        "id": "nope",
                        "lastDirtyTimestamp": 1735689000000,
                        "status": "UP",
                        "action": "Heartbeat",
                    },
                    {
                        "appName": "ORDERS",
                        "id": "o-4",
                        "lastDirtyTimestamp": 1735689000000,
                        "action": "Cancel",
                    },
                ]
            }
        ),
    ),
    Ask("delta, JSON", "GET", "apps/delta", JSON),
    Ask("delta, XML", "GET", "apps/delta", XML),
    Ask("delta, compact", "GET", "apps/delta", {**JSON, **COMPACT}),
    Ask("override set", "PUT", "apps/ORDERS/o-1/status?value=OUT_OF_SERVICE"),
    Ask("instance under an override", "GET", "apps/ORDERS/o-1", JSON),
    Ask("heartbeat under an override", "PUT", "apps/ORDERS/o-1?status=UP"),
    Ask("override on an unknown instance", "PUT", "apps/ORDERS/nope/status?value=DOWN"),
    Ask("override removed", "DELETE", "apps/ORDERS/o-1/status"),
    Ask("instance after the override", "GET", "apps/ORDERS/o-1", JSON),
    Ask("heartbeat after the override", "PUT", "apps/ORDERS/o-1?status=UP"),
    Ask("re-register", "POST", "apps/ORDERS", JSON_BODY, registration("ORDERS", "o-1")),
    Ask("override removed, leaving UP", "PUT", "apps/ORDERS/o-2/status?value=DOWN"),
    Ask("override removed with a value", "DELETE", "apps/ORDERS/o-2/status?value=UP"),
    Ask("instance after a removal with a value", "GET", "apps/ORDERS/o-2", JSON),
    Ask("metadata", "PUT", "apps/ORDERS/o-1/metadata?team=payments"),
    Ask("instance with metadata", "GET", "apps/ORDERS/o-1", JSON),
    Ask("cancel", "DELETE", "apps/ORDERS/o-2"),
    Ask("cancel again", "DELETE", "apps/ORDERS/o-2"),
    Ask("the cancelled instance", "GET", "apps/ORDERS/o-2", JSON),
    Ask("delta after it all", "GET", "apps/delta", JSON),
    Ask("registry after it all, XML", "GET", "apps", XML),
    Ask("an unknown application", "GET", "apps/NOPE", JSON),
    Ask("an unknown instance", "GET", "instances/nope", JSON),
    Ask("bad input: JSON that does not parse", "POST", "apps/ORDERS", JSON_BODY, b"{nope"),
    Ask(
        "bad input: no hostName",
        "POST",
        "apps/ORDERS",
        JSON_BODY,
        registration("ORDERS", "o-3", hostName=...),
    ),
    Ask("bad input: a status that is none", "PUT", "apps/ORDERS/o-1/status?value=BOGUS"),
    Ask(
        "bad input: a lastDirtyTimestamp that is no number",
        "PUT",
        "apps/ORDERS/o-1?lastDirtyTimestamp=abc",
    ),
    Ask(
        "bad input: a lastDirtyTimestamp past max_clock_skew",
        "PUT",
        "apps/ORDERS/o-1?status=UP&lastDirtyTimestamp=4102444800000",  # 2100
    ),
]


async def asked(session: aiohttp.ClientSession, base: str, ask: Ask) -> dict[str, Any]:
    async with session.request(
        ask.method, base + ask.path, headers=ask.headers, data=ask.body
    ) as response:
        return reduced(
            response.status, response.headers.get("Content-Type", ""), await response.read()
        )


@pytest.fixture(scope="module")
def eureka_jar() -> Path:
    need_java()
    build(EUREKA_SERVER)
    return EUREKA_SERVER / "target" / "eureka-server.jar"


@pytest.fixture
def blockbuster():
    """The Eureka server is outside this loop; the server half is covered elsewhere."""
    return None


# What differs on purpose, each with its reason (docs/differences.md says each): the paths of
# the differences it covers (a body key covers what lies under it), never a step's status but
# for a bad-input step's 400 where Eureka answers the named code.
ERROR_BODY = (
    "an error's body names the error and says why ({error, detail, field}); Eureka's is Spring "
    "Boot's generic page ({timestamp, status, error: Not Found, path}) or plain text"
)
STATUS_400 = "bad input is a 400 naming the field; Eureka answers 500"
DATED_AHEAD = (
    "a lastDirtyTimestamp further ahead than max_clock_skew is refused with 400: a time no clock "
    "has reached would win every later conflict; Eureka takes it as newer data and answers 404"
)
DELTA_VERSION = (
    "versions__delta is the registry index the delta was made at (X-Registry-Index); Eureka's "
    "counts the deltas it built, and clients only compare it with -1"
)
EMPTY_404 = (
    "a heartbeat's 404 is empty, as Eureka's contract has it: Netflix's Jersey clients read any "
    "body there as an instance, and fail instead of registering again (the stock server, on "
    "Spring Boot 4, answers it with Spring Boot's error page)"
)


def body(reason: str, *paths: str) -> tuple[Excuse]:
    return (Excuse(reason, frozenset(paths)),)


def bad_input(eureka_status: int, reason: str, *paths: str) -> tuple[Excuse, Excuse]:
    """A bad-input step: ours 400 where Eureka answers `eureka_status`, and the error body."""
    return (Excuse(reason, eureka_status=eureka_status), Excuse(ERROR_BODY, frozenset(paths)))


ON_PURPOSE: dict[str, tuple[Excuse, ...]] = {
    "heartbeat, unknown instance": body(EMPTY_404, ".json"),
    "heartbeat, newer data": body(EMPTY_404, ".json"),
    "heartbeat after the override": body(EMPTY_404, ".json"),
    "delta, JSON": body(DELTA_VERSION, ".json.applications.versions__delta"),
    "delta, XML": body(DELTA_VERSION, ".xml.applications.versions__delta"),
    "delta, compact": body(DELTA_VERSION, ".json.applications.versions__delta"),
    "delta after it all": body(DELTA_VERSION, ".json.applications.versions__delta"),
    "override on an unknown instance": body(ERROR_BODY, ".json"),
    "cancel again": body(ERROR_BODY, ".json"),
    "the cancelled instance": body(ERROR_BODY, ".json"),
    "an unknown application": body(ERROR_BODY, ".json"),
    "an unknown instance": body(ERROR_BODY, ".json"),
    "bad input: JSON that does not parse": body(ERROR_BODY, ".json"),
    "bad input: no hostName": body(ERROR_BODY, ".json", ".unreadable"),
    "bad input: a status that is none": bad_input(500, STATUS_400, ".json"),
    "bad input: a lastDirtyTimestamp that is no number": bad_input(500, STATUS_400, ".json"),
    "bad input: a lastDirtyTimestamp past max_clock_skew": bad_input(404, DATED_AHEAD, ".json"),
}


async def test_the_same_questions_get_the_same_answers(
    aiohttp_server: Any, eureka_jar: Path, tmp_path: Path
) -> None:
    ours = await aiohttp_server(create_app(Settings.of(store__enabled=False)), host="127.0.0.1")
    eureka = JavaService(eureka_jar, tmp_path / "eureka.log", ready_path="/eureka/apps")
    await eureka.start(
        args=[
            f"--server.port={eureka.port}",
            "--eureka.server.use-read-only-response-cache=false",
        ]
    )
    try:
        found: dict[str, list[Difference]] = {}
        async with aiohttp.ClientSession() as session:
            for ask in SCRIPT:
                theirs = await asked(session, f"{eureka.base}/eureka/", ask)
                mine = await asked(session, str(ours.make_url("/eureka/")), ask)
                different = list(differences(theirs, mine))
                if different:
                    found[ask.name] = different
    finally:
        eureka.kill()
    verdict = judged(found, ON_PURPOSE)
    assert verdict, f"differences not named on purpose, or named and gone:\n{verdict}"


async def test_a_stock_eureka_node_and_ours_replicate_to_each_other(
    aiohttp_server: Any, eureka_jar: Path, tmp_path: Path
) -> None:
    """A cluster in the middle of a migration: a stock Eureka node and ours, each the other's
    peer. Registrations, an admin's override (ours with a reason, which Eureka's items have no
    field for) and a cancel cross in both directions, and no batch is refused either way."""
    port = free_port()
    ours_url = f"http://127.0.0.1:{port}/eureka/"
    eureka = JavaService(eureka_jar, tmp_path / "eureka.log", ready_path="/eureka/apps")
    await eureka.start(
        args=[
            f"--server.port={eureka.port}",
            f"--eureka.client.service-url.defaultZone={ours_url}",
            "--eureka.server.use-read-only-response-cache=false",
        ]
    )
    try:
        settings = Settings.of(
            store__enabled=False, peers__urls=(f"{eureka.base}/eureka/",)
        )  # defaults
        ours = await aiohttp_server(create_app(settings), host="127.0.0.1", port=port)
        async with aiohttp.ClientSession() as session:

            async def status_at(base: str, app: str, iid: str) -> str | None:
                async with session.get(f"{base}apps/{app}/{iid}", headers=JSON) as response:
                    if response.status != 200:
                        return None
                    return str((await response.json())["instance"]["status"])

            async def call(base: str, method: str, path: str, body: bytes | None = None) -> int:
                headers = JSON_BODY if body is not None else {}
                async with session.request(method, base + path, data=body, headers=headers) as r:
                    return r.status

            theirs = f"{eureka.base}/eureka/"
            assert 204 == await call(theirs, "POST", "apps/ORDERS", registration("ORDERS", "o-1"))
            assert 204 == await call(
                ours_url, "POST", "apps/BILLING", registration("BILLING", "b-1")
            )
            await eventually(
                lambda: status_at(ours_url, "ORDERS", "o-1"),
                lambda value: value == "UP",
                what="o-1 reaches ours",
            )
            await eventually(
                lambda: status_at(theirs, "BILLING", "b-1"),
                lambda value: value == "UP",
                what="b-1 reaches Eureka",
            )

            path = "apps/BILLING/b-1/status?value=OUT_OF_SERVICE&reason=disk+swap"
            assert 200 == await call(ours_url, "PUT", path)
            await eventually(
                lambda: status_at(theirs, "BILLING", "b-1"),
                lambda value: value == "OUT_OF_SERVICE",
                what="our override reaches Eureka",
            )
            assert 200 == await call(theirs, "PUT", "apps/ORDERS/o-1/status?value=OUT_OF_SERVICE")
            await eventually(
                lambda: status_at(ours_url, "ORDERS", "o-1"),
                lambda value: value == "OUT_OF_SERVICE",
                what="Eureka's override reaches ours",
            )

            assert 200 == await call(ours_url, "DELETE", "apps/BILLING/b-1")
            await eventually(
                lambda: status_at(theirs, "BILLING", "b-1"),
                lambda status: status is None,
                what="our cancel reaches Eureka",
            )
            assert 200 == await call(theirs, "DELETE", "apps/ORDERS/o-1")
            await eventually(
                lambda: status_at(ours_url, "ORDERS", "o-1"),
                lambda status: status is None,
                what="Eureka's cancel reaches ours",
            )
        [peer] = ours.app[CLUSTER].status()
        assert (0, 0) == (peer["failed"], peer["dropped"]), peer
        assert "cannot parse" not in eureka.tail(200_000)
    finally:
        eureka.kill()


async def test_a_node_of_ours_joins_a_stock_node_with_its_default_settings(
    aiohttp_server: Any, eureka_jar: Path, tmp_path: Path
) -> None:
    """A migration's first step: a node of ours, with nothing but the stock node as its peer,
    copies the stock node's registry as Eureka's own nodes do (its `apps`), an admin's
    override included, and opens its reads. Before, it asked for our removal and digest
    endpoints, got 404, copied nothing and kept its reads closed (403 `not_synced`) for up
    to five minutes."""
    eureka = JavaService(eureka_jar, tmp_path / "eureka.log", ready_path="/eureka/apps")
    await eureka.start(
        args=[
            f"--server.port={eureka.port}",
            "--eureka.server.use-read-only-response-cache=false",
        ]
    )
    theirs = f"{eureka.base}/eureka/"
    try:
        async with aiohttp.ClientSession() as session:
            for iid in ("o-1", "o-2", "o-3"):
                async with session.post(
                    theirs + "apps/ORDERS", data=registration("ORDERS", iid), headers=JSON_BODY
                ) as r:
                    assert 204 == r.status
            async with session.put(theirs + "apps/ORDERS/o-2/status?value=OUT_OF_SERVICE") as r:
                assert 200 == r.status
            app = create_app(Settings.of(store__enabled=False, peers__urls=(theirs,)))
            ours = await aiohttp_server(app, host="127.0.0.1")

            async def copied() -> dict[str, str] | None:
                async with session.get(ours.make_url("/eureka/apps/ORDERS"), headers=JSON) as r:
                    if r.status != 200:
                        return None
                    found = (await r.json())["application"]["instance"]
                    return {i["instanceId"]: i["status"] for i in found}

            statuses = await eventually(copied, timeout=20, what="our node serves the copy")
            assert {"o-1": "UP", "o-2": "OUT_OF_SERVICE", "o-3": "UP"} == statuses
            assert {"o-2": "OUT_OF_SERVICE"} == dict(app[REGISTRY].overrides)
    finally:
        eureka.kill()
