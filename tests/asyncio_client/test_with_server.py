"""`DiscoveryClient` against a real server process, for each way it keeps its copy: the watch
stream, the long-poll delta (the server's `watch = false`) and the plain delta every
`fetch_interval` (`long_poll = false` too, as a stock Eureka server)."""

from __future__ import annotations

import asyncio

import pytest

from registry.client import Action, DiscoveryClient, Instance, InstanceStatus, NoInstance
from tests.asyncio_client.servers import MODES, post, session, start_node, status_of
from tests.helpers import eventually, instance_doc

__all__ = ["session", "start_node"]  # fixtures

pytestmark = pytest.mark.slow

FAST = {"renewal_interval": 1, "lease_duration": 10, "fetch_interval": 0.5}


@pytest.mark.parametrize("mode", MODES)
async def test_the_whole_life_cycle(mode, start_node, session):
    """Register, heartbeat, see another client come and go, follow an admin's override,
    register again when the server forgot, and cancel on exit."""
    node = await start_node(**MODES[mode])
    async with DiscoveryClient(node.eureka, app="orders", port=8080, **FAST) as orders:
        own = f"{node.eureka}apps/ORDERS/{orders.instance.instance_id}"
        assert 200 == await status_of(session, own)
        await eventually(lambda: orders.sync_mode, lambda now: now == mode, what="the mode")
        await eventually(lambda: orders.stats.heartbeats, lambda n: n >= 2, what="heartbeats")

        billing_changes = orders.changes("billing")
        async with DiscoveryClient(node.eureka, app="billing", port=9090, **FAST) as billing:
            iid = billing.instance.instance_id
            [seen] = await orders.wait_for("billing", timeout=10)
            assert (iid, "http://127.0.0.1:9090/") == (seen.instance_id, seen.url)
            added = await asyncio.wait_for(anext(billing_changes), 5)
            assert (Action.ADDED, iid) == (added.action, added.instance.instance_id)

            url = f"{node.eureka}apps/BILLING/{iid}/status"
            assert 200 == await status_of(session, url + "?value=OUT_OF_SERVICE", "PUT")
            await eventually(lambda: orders.instances("billing"), lambda up: up == (), timeout=5)
            with pytest.raises(NoInstance):
                orders.pick("billing")
            [held] = orders.instances("billing", all_statuses=True)
            assert InstanceStatus.OUT_OF_SERVICE == held.status
            modified = await asyncio.wait_for(anext(billing_changes), 5)
            assert (Action.MODIFIED, InstanceStatus.OUT_OF_SERVICE) == (
                modified.action,
                modified.instance.status,
            )

            assert 200 == await status_of(session, url + "?value=UP", "DELETE")
            assert iid == (await orders.wait_for("billing", timeout=5))[0].instance_id
            assert iid == orders.pick("billing").instance_id

        await eventually(lambda: orders.instances("billing", all_statuses=True), lambda f: not f)
        assert 404 == await status_of(session, f"{node.eureka}apps/BILLING/{iid}")

        assert 200 == await status_of(session, own, "DELETE")  # the server forgets it
        await eventually(lambda: status_of(session, own), lambda code: code == 200, timeout=5)
        assert 2 <= orders.stats.registrations
        assert (0, 0) == (orders.stats.resyncs, orders.stats.failovers)
    assert 404 == await status_of(session, own)


@pytest.mark.parametrize("mode", MODES)
async def test_a_copy_that_went_wrong_is_fetched_again_in_full(mode, start_node, session):
    """A copy the server's hash disagrees with (here an instance the server never had, as a
    lost DELETED would leave) is replaced by a full fetch at the next change."""
    node = await start_node(**MODES[mode])
    async with DiscoveryClient(node.eureka, register=False, fetch_interval=0.5) as client:
        await eventually(lambda: client.sync_mode, lambda now: now == mode, what="the mode")
        ghost = Instance(
            app="GHOST",
            instance_id="g-1",
            host_name="g",
            ip_addr="10.9.9.9",
            status=InstanceStatus.UP,
        )
        client._copy.apply(Action.ADDED, ghost)  # the copy goes wrong behind the client's back
        assert 1 == len(client.instances("ghost"))

        body = {"instance": instance_doc("ORDERS", "o-1")}
        assert 204 == await post(session, f"{node.eureka}apps/ORDERS", body)
        await client.wait_for("orders", timeout=10)
        await eventually(lambda: client.stats.full_fetches, lambda n: n == 2, what="a refetch")
        assert () == client.instances("ghost")
        assert ["ORDERS"] == client.applications()
        assert 1 == client.stats.resyncs


async def test_credentials_in_the_url_and_the_instance_s_own_status(start_node, session):
    """Basic credentials from the URL on every call and the stream; the instance's own
    status changes reach the others; a wrong password registers nothing."""
    node = await start_node(credentials__clients="svc:s3cret")
    url = f"http://svc:s3cret@127.0.0.1:{node.port}/eureka/"
    async with (
        DiscoveryClient(url, register=False) as watcher,
        DiscoveryClient(url, app="orders", port=8080, **FAST) as orders,
    ):
        await watcher.wait_for("orders", timeout=10)
        assert "watch" == watcher.sync_mode

        await orders.set_status(InstanceStatus.DOWN)
        await eventually(lambda: watcher.instances("orders"), lambda up: up == (), timeout=5)
        [down] = watcher.instances("orders", all_statuses=True)
        assert InstanceStatus.DOWN == down.status
        await orders.set_status(InstanceStatus.UP)
        await watcher.wait_for("orders", timeout=5)

        wrong = f"http://svc:wrong@127.0.0.1:{node.port}/eureka/"
        async with DiscoveryClient(wrong, app="billing", port=9090, start_timeout=1) as refused:
            await eventually(lambda: refused.stats.heartbeat_failures, lambda n: n >= 1)
            assert (0, 0, "none") == (
                refused.stats.registrations,
                refused.stats.full_fetches,
                refused.sync_mode,
            )
        assert () == watcher.instances("billing", all_statuses=True)
