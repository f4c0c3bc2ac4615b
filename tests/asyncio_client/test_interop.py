"""`registry.client` beside an unmodified py-eureka-client from PyPI, on one real server."""

from __future__ import annotations

import pytest

from registry.client import DiscoveryClient
from tests.asyncio_client.servers import session, start_node
from tests.helpers import eventually
from tests.stock_clients.agent import APP, IID, running_agent

__all__ = ["session", "start_node"]  # fixtures

pytestmark = pytest.mark.slow


@pytest.fixture
def blockbuster():
    """The stock client's process is outside this loop."""
    return None


async def test_both_clients_see_each_other(start_node, session):
    """Each lists the other's instance; ours sees the stock client leave."""
    node = await start_node()
    async with (
        DiscoveryClient(node.eureka, app="orders", port=8080, renewal_interval=1) as ours,
        running_agent(node.eureka) as agent,
    ):
        assert "started" == (await agent.answer())["event"]
        [theirs] = await ours.wait_for(APP, timeout=10)
        assert (IID, 9999) == (theirs.instance_id, theirs.port)

        view = (await agent.ask("view"))["applications"]
        assert {ours.instance.instance_id: "UP"} == view["ORDERS"]
        assert "stopped" == (await agent.ask("stop"))["event"]
        await eventually(lambda: ours.instances(APP, all_statuses=True), lambda f: f == ())
