"""An asyncio Eureka client: registration, a live copy of the registry pushed by our server
(or polled from any Eureka server), and lookups that never do IO. See `DiscoveryClient`."""

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
