"""A crash loop: a real server process under a stream of registrations, overrides and cancels,
killed with SIGKILL or SIGTERM at a random moment, round after round, on the same data
directory. After each restart:

- every acknowledged override is in force with its reason (they are written before the 200);
- every acknowledged registration is back, except, after a SIGKILL, those acknowledged within
  the write-behind window before the kill (`store_flush_interval`, with a margin for the write);
- no acknowledged cancel is undone, however soon the kill came (they are written before the
  200), and no instance is listed twice.

Seeded (`REGISTRY_CRASH_SEED`), so a failing round can be replayed.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import orjson
import pytest

from tests.helpers import instance_doc

pytestmark = pytest.mark.slow

ROUNDS = int(os.environ.get("REGISTRY_CRASH_ROUNDS", "10"))
SEED = int(os.environ.get("REGISTRY_CRASH_SEED", "16"))
FLUSH = 0.2  # store_flush_interval
WINDOW = FLUSH + 0.8  # what a SIGKILL may cost: the flush interval and the write in flight
JSON = {"Accept": "application/json"}


@dataclass
class Acknowledged:
    """What the server said 2xx to, and when (monotonic seconds)."""

    registered: dict[str, float] = field(default_factory=dict)
    cancelled: dict[str, float] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)  # id -> reason


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        yield session


async def traffic(
    session: aiohttp.ClientSession, base: str, round_: int, acked: Acknowledged
) -> None:
    """Registrations, with an override on every third and a cancel of every fifth, until the
    server goes away."""
    apps = f"{base}/eureka/apps/ORDERS"
    for n in range(100_000):
        iid = f"r{round_}-{n}"
        body = orjson.dumps({"instance": instance_doc("ORDERS", iid)})
        headers = {"Content-Type": "application/json"}
        async with session.post(apps, data=body, headers=headers) as response:
            if response.status != 204:
                return
        acked.registered[iid] = time.monotonic()
        if n % 3 == 0:
            reason = f"round {round_} case {n}"
            url = f"{apps}/{iid}/status?value=OUT_OF_SERVICE&reason={reason.replace(' ', '+')}"
            async with session.put(url) as response:
                if response.status != 200:
                    return
            acked.overrides[iid] = reason
        if n % 5 == 4:
            gone = f"r{round_}-{n - 2}"
            async with session.delete(f"{apps}/{gone}") as response:
                if response.status != 200:
                    return
            acked.cancelled[gone] = time.monotonic()


async def listed(session: aiohttp.ClientSession, base: str) -> tuple[list[str], dict[str, str]]:
    async with session.get(base + "/eureka/apps/ORDERS", headers=JSON) as response:
        found = response.status == 200  # 404: no instance at all
        doc = await response.json()
    ids = [i["instanceId"] for i in doc["application"]["instance"]] if found else []
    async with session.get(base + "/eureka/overrides") as response:
        overrides = {o["instanceId"]: o["reason"] for o in (await response.json())["overrides"]}
    return ids, overrides


async def test_nothing_acknowledged_is_lost_across_kills(session, servers, tmp_path):
    rng = random.Random(SEED)
    acked = Acknowledged()
    server = servers.new(
        store__data_dir=tmp_path,
        store__flush_interval=FLUSH,
        limits__fetch_rate_limit=0,
        logging__level="warning",
    )
    base = server.base
    # What a SIGKILL may have cost: changes acknowledged within the window before it.
    may_be_lost: set[str] = set()
    for round_ in range(ROUNDS + 1):  # the last start only checks the last kill
        await server.start()  # the same port and data each round
        ids, overrides = await listed(session, base)
        assert len(ids) == len(set(ids)), "an instance listed twice"
        assert acked.overrides.items() <= overrides.items(), f"round {round_}: overrides lost"
        missing = set(acked.registered) - set(acked.cancelled) - may_be_lost - set(ids)
        assert not missing, f"round {round_}: registrations lost: {sorted(missing)[:5]}"
        back = set(acked.cancelled) & set(ids)
        assert not back, f"round {round_}: cancels undone: {sorted(back)[:5]}"
        if round_ == ROUNDS:
            break
        running = asyncio.ensure_future(traffic(session, base, round_, acked))
        await asyncio.sleep(rng.uniform(0.3, 1.2))  # a kill at a random moment of the traffic
        sigkill = rng.random() < 0.5
        server.send_signal(signal.SIGKILL if sigkill else signal.SIGTERM)
        since = time.monotonic() - WINDOW if sigkill else time.monotonic()
        await server.wait(30)
        await asyncio.gather(running, return_exceptions=True)
        may_be_lost |= {i for i, at in acked.registered.items() if at >= since}
    assert ROUNDS * 10 < len(acked.registered)  # the rounds did carry traffic
