"""Open watch streams, counted by the client that opened them, and capped.

A stream is cheap while it waits, but each costs memory and a write per change it is sent, so
a node takes at most `per_node` of them, and one client at most `per_client`: no one client
(a loop that reconnects without closing, a fleet sharing a credential gone wrong) can take
them all. The HTTP side names the client (by its credential, or its address when none are
configured) and answers a refusal 429; the refusals are counted by the cap that made them.
"""

from __future__ import annotations

from collections import Counter

# The reasons a stream is refused, as /metrics labels them: the node's cap, or one client's
# (named for its setting, reads.watch_streams_per_credential, though without credentials a client
# is its address).
NODE = "node"
CLIENT = "credential"
REASONS = (NODE, CLIENT)


class Watchers:
    def __init__(self) -> None:
        self.open = 0
        self.refused: Counter[str] = Counter()  # by reason: NODE or CLIENT
        self._by_client: Counter[str] = Counter()

    def admit(self, client: str, *, per_node: int, per_client: int) -> str | None:
        """Count a stream `client` opens, and return None; or, when a cap (0: none) is
        reached, count the refusal and return its reason."""
        reason = None
        if per_node and self.open >= per_node:
            reason = NODE
        elif per_client and self._by_client[client] >= per_client:
            reason = CLIENT
        if reason is not None:
            self.refused[reason] += 1
            return reason
        self.open += 1
        self._by_client[client] += 1
        return None

    def leave(self, client: str) -> None:
        """A stream `client` opened has ended."""
        self.open -= 1
        self._by_client[client] -= 1
        if not self._by_client[client]:
            del self._by_client[client]

    def of(self, client: str) -> int:
        """The streams `client` holds open."""
        return self._by_client.get(client, 0)
