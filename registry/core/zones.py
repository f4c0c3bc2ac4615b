"""An instance's zone, as the clients that prefer their own zone read it: its `zone` metadata
(Spring Cloud's `eureka.instance.metadata-map.zone`, which Spring Cloud LoadBalancer's zone
preference compares), else the `availability-zone` of its Amazon data-center info (Netflix's
client on AWS). None when it names neither. Pure.
"""

from __future__ import annotations

from registry.core.model import InstanceInfo

ZONE_KEY = "zone"
AMAZON_ZONE_KEY = "availability-zone"


def zone_of(instance: InstanceInfo) -> str | None:
    zone = instance.metadata.get(ZONE_KEY)
    if zone:
        return zone
    center = instance.data_center_info
    if center.name == "Amazon":
        return center.metadata.get(AMAZON_ZONE_KEY) or None
    return None
