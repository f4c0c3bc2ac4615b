"""HTTP to a peer: what its answers teach about it."""

from __future__ import annotations

import contextlib
import gc
from typing import Any

import pytest
from aiohttp import web

from peers.transport import PeerClient, PeerError, PeerUnavailable, new_session
from tests.helpers import free_port


def scripted(*answers: tuple[int, dict[str, str]]) -> web.Application:
    """A peer answering each batch with the next (status, headers)."""
    queue = list(answers)

    async def batch(request: web.Request) -> web.Response:
        status, headers = queue.pop(0)
        return web.json_response({"responseList": []}, status=status, headers=headers)

    app = web.Application()
    app.router.add_post("/eureka/peerreplication/batch/", batch)
    return app


OURS = {"X-Registry-Epoch": "1a2b3c4d"}


@pytest.mark.parametrize(
    ("answers", "kinds"),
    [
        # Our node: known by its epoch, and still ours when a proxy answers for it while it
        # restarts (a 503 or a 502 carries no epoch).
        ([(200, OURS), (503, {}), (502, {}), (200, OURS)], [False, False, False, False]),
        # A stock Eureka server: its refusal of our fields carries no epoch.
        ([(400, {}), (200, {})], [True, True]),
        # A 5xx first says nothing either way.
        ([(503, {}), (200, OURS)], [None, False]),
    ],
)
async def test_whether_a_peer_is_a_stock_eureka_server(
    aiohttp_server: Any, answers: list[tuple[int, dict[str, str]]], kinds: list[bool | None]
) -> None:
    server = await aiohttp_server(scripted(*answers))
    session = new_session(connect_timeout=1, read_timeout=1)
    try:
        peer, seen = PeerClient(session, str(server.make_url("/eureka/"))), []
        for _ in answers:
            with contextlib.suppress(PeerError):  # refused or unavailable: it still taught
                await peer.send_batch([b"{}"])
            seen.append(peer.stock)
    finally:
        await session.close()
    assert kinds == seen


async def _fail(peer: PeerClient) -> None:
    with contextlib.suppress(PeerUnavailable):  # nothing here holds the exception on
        await peer.fetch_digest()


async def test_a_failed_call_leaves_nothing_for_the_collector() -> None:
    """A call to a peer that cannot be reached leaves no reference cycle behind: the server
    freezes the heap every second (registry/health/heap.py), and a cycle frozen is kept for
    good. An unreachable peer, tried every second or two, grew the heap 37 KB a second."""
    session = new_session(connect_timeout=1, read_timeout=1)
    try:
        peer = PeerClient(session, f"http://127.0.0.1:{free_port()}/eureka/")
        await _fail(peer)  # what a first call makes once (the connector's own state)
        gc.collect()
        for _ in range(3):
            await _fail(peer)
        assert 0 == gc.collect()
    finally:
        await session.close()
