"""The servers a client talks to: which one now, and when to leave it or go back to it.

The client sticks to one server, the first listed to begin with. A server that fails (cannot be
reached, times out, answers 5xx) is left for the next one that is not itself resting, and rests
for an exponentially growing, jittered while, so a whole fleet does not come back to a server in
step. Once the first server has rested and `return_after` has passed since the client left it,
the client goes back to it: the order of the list is the operator's preference, and a failover
forced by a restart should not last for ever. Pure: times are passed in.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit, urlunsplit

from aiohttp import encode_basic_auth

MIN_REST = 1.0  # seconds a failed server rests after its first failure
MAX_REST = 60.0


@dataclass(eq=False, slots=True)
class Server:
    url: str  # the base URL, ending in '/', without credentials
    authorization: str | None = field(default=None, repr=False)  # HTTP Basic, from the URL
    failures: int = 0
    rests_until: float = 0.0  # monotonic seconds
    # What it was found to serve; a stock Eureka server serves neither
    watch: bool = True
    long_poll: bool = True

    def resting(self, now: float) -> bool:
        return now < self.rests_until


def parse_servers(urls: str) -> list[Server]:
    """`http://user:pass@host1:8761/eureka/,http://host2:8761/eureka/` as servers;
    ValueError naming what is wrong."""
    servers = []
    for text in (part.strip() for part in urls.split(",")):
        if not text:
            continue
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server URL {text!r}: expected http(s)://host[:port]/path/")
        authorization = None
        if parts.username is not None:
            user, password = unquote(parts.username), unquote(parts.password or "")
            authorization = encode_basic_auth(user, password, encoding="utf-8")
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port is not None:
            netloc += f":{parts.port}"
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        url = urlunsplit((parts.scheme, netloc, path, "", ""))  # the path as given, encoded
        servers.append(Server(url, authorization))
    if not servers:
        raise ValueError("no server URL given")
    return servers


class ServerList:
    def __init__(
        self,
        servers: list[Server],
        *,
        return_after: float = 300.0,
        rng: random.Random | None = None,
    ) -> None:
        self.servers = servers
        self.return_after = return_after
        self._current = 0
        self._left_first_at = 0.0
        self._rng = rng or random.Random()

    @property
    def current(self) -> Server:
        return self.servers[self._current]

    def choose(self, now: float) -> Server:
        """The server to call now: the current one, or the first again once it may be."""
        first = self.servers[0]
        if (
            self._current
            and not first.resting(now)
            and now - self._left_first_at >= self.return_after
        ):
            self._current = 0
        return self.current

    def succeeded(self, server: Server) -> None:
        server.failures = 0
        server.rests_until = 0.0

    def failed(self, server: Server, now: float) -> Server | None:
        """Let `server` rest; the server to go over to, if it was the current one and
        another is not resting (None: stay, there is nowhere better to go)."""
        server.failures += 1
        rest = min(MAX_REST, MIN_REST * 2 ** (server.failures - 1))
        server.rests_until = now + rest * self._rng.uniform(0.5, 1.0)
        if server is not self.current or len(self.servers) == 1:
            return None
        candidates = [
            i for i in self._order_after(self._current) if not self.servers[i].resting(now)
        ]
        if not candidates:
            return None
        if self._current == 0:
            self._left_first_at = now
        self._current = candidates[0]
        return self.current

    def _order_after(self, index: int) -> list[int]:
        count = len(self.servers)
        return [(index + step) % count for step in range(1, count)]
