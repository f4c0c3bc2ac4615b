"""The floor under a watch fan-out: how long writing the same bytes to N loopback connections
takes on this machine, with nothing else to do.

A change reaches a thousand watch streams through a thousand `send` calls, and on loopback
each one also runs the receiving side's TCP work in the kernel: that much no server can
avoid. The connections are held open by a reader in another process (as the observers are),
the writes made on the server's kind of event loop, `ROUNDS` times, a pause between rounds
for the reader to drain.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from typing import cast

from registry.__main__ import new_event_loop

ROUNDS = 20
PAUSE = 0.05  # seconds between rounds

# Holds the connections and reads whatever comes until the writer closes them.
_READER = """
import selectors, socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
selector = selectors.DefaultSelector()
for s in sockets:
    selector.register(s, selectors.EVENT_READ)
open_ = count
while open_:
    for key, _ in selector.select():
        if not key.fileobj.recv(1 << 16):
            selector.unregister(key.fileobj)
            open_ -= 1
"""


async def _floor(connections: int, size: int) -> float:
    transports: list[asyncio.Transport] = []
    all_in = asyncio.Event()

    class Accepted(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transports.append(cast(asyncio.Transport, transport))  # uvloop's is no subclass
            if len(transports) == connections:
                all_in.set()

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Accepted, "127.0.0.1", 0, backlog=connections)
    port = server.sockets[0].getsockname()[1]
    # Popen, not asyncio's: this loop runs in a thread, where uvloop sees no child exit.
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(port), str(connections)])
    try:
        await asyncio.wait_for(all_in.wait(), 60)
        data = b"x" * size
        rounds = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for transport in transports:
                transport.write(data)
            rounds.append(1000 * (time.perf_counter() - started))
            await asyncio.sleep(PAUSE)
        return round(statistics.median(rounds), 1)
    finally:
        for transport in transports:
            transport.close()
        server.close()
        await asyncio.sleep(PAUSE)  # the closes go out
        await asyncio.to_thread(reader.wait, 60)


def _on_server_loop(connections: int, size: int) -> float:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_floor(connections, size))


async def send_floor(connections: int, size: int) -> float:
    """Milliseconds (median of the rounds) to write `size` bytes to each of `connections`."""
    return await asyncio.to_thread(_on_server_loop, connections, size)
