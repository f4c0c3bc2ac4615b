"""An asyncio Eureka client: registration, a live copy of the registry pushed by our server
(or polled from any Eureka server), and lookups that never do IO. See `DiscoveryClient`.

`discovery` is the client callers hold; `registration` keeps its own instance's lease;
`fetcher` keeps the `local_copy` up to date (a full fetch, then the watch stream read by `sse`,
the long-poll or Eureka's polling); `transport` and `servers` make every call, failing over
between servers; `model` is what callers get. It loads nothing of the server
(`registry.common` and the `rules` status vocabulary only).
"""

from registry.client.discovery import Changes, DiscoveryClient, NoInstance
from registry.client.fetcher import Counters
from registry.client.model import Action, Change, Instance
from registry.client.registration import OwnInstance
from registry.client.transport import Unavailable
from rules import InstanceStatus

__all__ = [
    "Action",
    "Change",
    "Changes",
    "Counters",
    "DiscoveryClient",
    "Instance",
    "InstanceStatus",
    "NoInstance",
    "OwnInstance",
    "Unavailable",
]
