"""Which of a peer's instances start-up sync and anti-entropy take (peers.merge)."""

from __future__ import annotations

from typing import Any

from peers import merge
from registry.codec import instance_from_wire, json_codec
from registry.core import Registry
from registry.journal import DeltaJournal
from registry.model import InstanceStatus, Lease
from tests.helpers import instance_doc

T0 = 1_735_689_000_000
S = InstanceStatus


def peer_copy(iid: str = "i-1", *, renewed_ms: int = T0, **fields: Any) -> dict[str, Any]:
    """An instance as a peer's `GET apps/ORDERS` shows it."""
    instance = instance_from_wire(instance_doc(iid=iid, **fields), now_ms=T0)
    lease = Lease(
        instance=instance, duration_ms=90_000, registration_ms=T0, last_renewal_ms=renewed_ms
    )
    return json_codec.instance_dict(lease)


def app(*instances: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "ORDERS", "instance": list(instances)}]


async def test_missing_instances_are_copied_with_their_renewal_time():
    """An instance only the peer holds is adopted; its lease keeps the peer's last renewal."""
    registry = Registry()
    adopted = await merge.merge(registry, app(peer_copy(renewed_ms=T0 - 30_000)), now_ms=T0)
    assert (1, T0 - 30_000) == (adopted, registry.get("ORDERS", "i-1", now_ms=T0).last_renewal_ms)


async def test_dead_copies_are_not_brought_back():
    """A copy whose lease has run out on the peer is left alone."""
    registry = Registry()
    assert 0 == await merge.merge(registry, app(peer_copy(renewed_ms=T0 - 91_000)), now_ms=T0)


async def test_an_instance_cancelled_here_after_its_last_renewal_stays_gone():
    """A cancel that the peer missed is not undone by pulling from that peer."""
    registry, journal = Registry(), DeltaJournal(retention_ms=180_000)
    registry.subscribe(journal.record)
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    registry.cancel("ORDERS", "i-1", now_ms=T0 + 10)
    deleted = {"ORDERS": journal.deleted("ORDERS")}
    assert 0 == await merge.merge(registry, app(peer_copy()), now_ms=T0 + 20, deleted=deleted)
    later = app(peer_copy(renewed_ms=T0 + 15))  # registered again there since
    assert 1 == await merge.merge(registry, later, now_ms=T0 + 20, deleted=deleted)


async def test_newer_dirty_timestamp_wins_in_both_directions():
    """The peer's newer copy is taken; an older one is not."""
    registry = Registry()
    registry.register(
        instance_from_wire(instance_doc(lastDirtyTimestamp=str(T0 + 5)), now_ms=T0), now_ms=T0
    )
    older = app(peer_copy(lastDirtyTimestamp=str(T0), status="DOWN"))
    assert 0 == await merge.merge(registry, older, now_ms=T0)
    newer = app(peer_copy(lastDirtyTimestamp=str(T0 + 9), status="DOWN"))
    assert 1 == await merge.merge(registry, newer, now_ms=T0)
    assert S.DOWN is registry.get("ORDERS", "i-1", now_ms=T0).instance.status


async def test_a_lost_override_is_repaired_from_the_later_change():
    """Same lastDirtyTimestamp, but the peer changed the override later: its state is taken."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    copy = peer_copy(status="OUT_OF_SERVICE", overriddenStatus="OUT_OF_SERVICE")
    copy["lastUpdatedTimestamp"] = str(T0 + 50)
    assert 1 == await merge.merge(registry, app(copy), now_ms=T0 + 60)
    assert {"i-1": S.OUT_OF_SERVICE} == dict(registry.overrides())
    copy["lastUpdatedTimestamp"] = str(T0 - 50)  # an older state than ours: ignored
    copy["status"] = copy["overriddenStatus"] = "UP"
    assert 0 == await merge.merge(registry, app(copy), now_ms=T0 + 60)


async def test_unreadable_copies_are_skipped():
    """A broken instance in the peer's document does not stop the others."""
    registry = Registry()
    broken = {"instanceId": "i-1", "hostName": ["not", "a", "name"]}
    assert 1 == await merge.merge(registry, app(broken, peer_copy("i-2")), now_ms=T0)
