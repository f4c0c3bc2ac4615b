"""HTTP to a peer: what its answers teach about it."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from aiohttp import web

from peers.transport import PeerClient, PeerError, new_session


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
