"""Which of a peer's instances start-up sync and anti-entropy take (peers.merge)."""

from __future__ import annotations

import asyncio
from typing import Any

from structlog.testing import capture_logs

from peers import merge
from registry.codec import instance_from_wire, json_codec
from registry.core.model import InstanceStatus, Lease, ReplicationAction
from registry.core.overrides import Note
from registry.core.registry import Registry
from registry.core.subscriber import Subscriber
from registry.core.tombstones import Tombstone
from tests.factories import T0, make
from tests.helpers import instance_doc

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


async def test_an_instance_cancelled_here_stays_gone():
    """A cancel that the peer missed is not undone by pulling from that peer, even when the
    peer's copy was renewed after it within the margin; a copy renewed clearly later, or
    registered again with a newer lastDirtyTimestamp, wins."""
    registry = Registry(removal_margin_ms=10_000)
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    registry.cancel("ORDERS", "i-1", now_ms=T0 + 10)
    assert 0 == await merge.merge(registry, app(peer_copy()), now_ms=T0 + 20)
    skewed = app(peer_copy(renewed_ms=T0 + 9_000))  # a clock ahead by up to the margin
    assert 0 == await merge.merge(registry, skewed, now_ms=T0 + 20)
    renewed = app(peer_copy(renewed_ms=T0 + 10_011))
    assert 1 == await merge.merge(registry, renewed, now_ms=T0 + 20_000)
    registry.cancel("ORDERS", "i-1", now_ms=T0 + 30_000)
    again = app(peer_copy(renewed_ms=T0 + 29_000, lastDirtyTimestamp=str(T0 + 29_000)))
    assert 1 == await merge.merge(registry, again, now_ms=T0 + 30_000)


async def test_a_peers_removal_removes_our_older_copy_and_is_remembered():
    """Removals listed by the peer come first: our copy renewed before the removal goes, one
    registered again since stays, and the removal of an instance we never held is kept."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    registry.register(
        instance_from_wire(instance_doc(iid="i-2", lastDirtyTimestamp=str(T0 + 7)), now_ms=T0),
        now_ms=T0,
    )
    removed = [Tombstone("ORDERS", iid, T0, T0 + 5) for iid in ("i-1", "i-2", "i-3")]
    assert 1 == await merge.merge(registry, [], now_ms=T0 + 6, removed=removed)
    assert ["i-2"] == [lease.instance.instance_id for lease in registry.application("ORDERS")]
    assert {"i-1", "i-3"} == {t.instance_id for t in registry.tombstones}


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


def digest_answer(
    notes: list[tuple[str, str, int]], removed: list[tuple[str, int]]
) -> dict[str, Any]:
    """A peer's digest answer listing overrides (id, status, set at) and removals (id, at)."""
    return {
        "overrideNotes": [
            {"id": iid, "appName": "ORDERS", "status": status, "overrideSetAt": at}
            for iid, status, at in notes
        ],
        "overridesRemoved": [
            {"id": iid, "appName": "ORDERS", "removedAt": at} for iid, at in removed
        ],
    }


async def test_a_copy_that_changed_later_never_undoes_an_override():
    """Same lastDirtyTimestamp, no override there, updated later (a re-registration on a node
    that was cut off): the admin's override here stays."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    note = Note("ORDERS", S.OUT_OF_SERVICE, None, T0 + 10, None)
    registry.set_status_override("ORDERS", "i-1", S.OUT_OF_SERVICE, now_ms=T0 + 10, note=note)
    copy = peer_copy()
    copy["lastUpdatedTimestamp"] = str(T0 + 50)
    assert 0 == await merge.merge(registry, app(copy), now_ms=T0 + 60)
    assert S.OUT_OF_SERVICE is registry.get("ORDERS", "i-1", now_ms=T0 + 60).instance.status


def test_the_later_of_two_admin_decisions_wins_on_both_sides():
    """An override set here and one removed there, or the other way round: each node takes
    the peer's decision only when it is later than its own."""
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    assert 1 == merge.take_overrides(
        registry, digest_answer([("i-1", "OUT_OF_SERVICE", T0 + 50)], []), now_ms=T0 + 60
    )
    assert S.OUT_OF_SERVICE is registry.get("ORDERS", "i-1", now_ms=T0 + 60).instance.status
    older_removal = digest_answer([], [("i-1", T0 + 40)])
    assert 0 == merge.take_overrides(registry, older_removal, now_ms=T0 + 60)
    later_removal = digest_answer([], [("i-1", T0 + 70)])
    assert 1 == merge.take_overrides(registry, later_removal, now_ms=T0 + 80)
    assert {} == dict(registry.overrides)
    older_set = digest_answer([("i-1", "DOWN", T0 + 60)], [])
    assert 0 == merge.take_overrides(registry, older_set, now_ms=T0 + 80)


async def test_unreadable_copies_are_skipped():
    """A broken instance in the peer's document does not stop the others."""
    registry = Registry()
    broken = {"instanceId": "i-1", "hostName": ["not", "a", "name"]}
    assert 1 == await merge.merge(registry, app(broken, peer_copy("i-2")), now_ms=T0)


async def test_a_copy_whose_lease_times_are_unreadable_is_skipped_naming_the_field():
    registry = Registry()
    fields = ("lastRenewalTimestamp", "registrationTimestamp")
    broken = [peer_copy(f"i-{n}") for n in range(len(fields))]
    for copy, field in zip(broken, fields, strict=True):
        copy["leaseInfo"][field] = "soon"
    with capture_logs() as logs:
        assert 1 == await merge.merge(registry, app(*broken, peer_copy("i-9")), now_ms=T0)
    assert [
        {
            "event": "peer_instance_unreadable",
            "log_level": "warning",
            "detail": f"leaseInfo.{field}: must be a whole number, not 'soon'",
        }
        for field in fields
    ] == [log for log in logs if log["event"] == "peer_instance_unreadable"]


def test_a_peers_decision_dated_beyond_the_clock_skew_is_not_taken():
    """An override set (or removed) at a time no clock has reached would win every later
    comparison on every node: a digest's such entries are left out."""
    registry = Registry(max_clock_skew_ms=300_000)
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    ahead = T0 + 60 + 300_001
    assert 0 == merge.take_overrides(
        registry, digest_answer([("i-1", "OUT_OF_SERVICE", ahead)], []), now_ms=T0 + 60
    )
    assert {} == dict(registry.overrides)
    merge.take_overrides(
        registry, digest_answer([("i-1", "OUT_OF_SERVICE", T0 + 50)], []), now_ms=T0 + 60
    )
    assert 0 == merge.take_overrides(registry, digest_answer([], [("i-1", ahead)]), now_ms=T0 + 60)
    assert S.OUT_OF_SERVICE is dict(registry.overrides)["i-1"]


def test_a_peers_holds_are_taken_for_copies_shown_down():
    """A copy taken from a peer at start-up comes without its hold: the peer's digest lists
    it, and it is taken where the copy is DOWN here too and asks for a check (then the
    check's recovery releases it on whichever node checks it)."""
    registry = Registry()
    checked = {"registry.check": "tcp"}
    registry.register(make("i-1", metadata=checked), now_ms=T0)
    down = InstanceStatus.DOWN
    registry.register(make("i-2", status=down, metadata=checked), now_ms=T0, is_replication=True)
    registry.register(make("i-3", status=down), now_ms=T0, is_replication=True)
    held = {"claim": "UP", "since": T0, "detail": "HTTP 503"}
    holds = {"i-1": held, "i-2": held, "i-3": held, "gone": held, "bad": {"claim": 1}}
    # i-1 shows UP here; nothing would ever check i-3, nor release it: neither is taken.
    assert 1 == merge.take_check_holds(registry, {"checkHolds": holds})
    assert ["i-2"] == [iid for iid, _ in registry.checks.items()]
    registry.check_passed("ORDERS", "i-2", now_ms=T0 + 1)
    assert InstanceStatus.UP is registry.get("ORDERS", "i-2", now_ms=T0).instance.status


def test_a_release_missed_here_is_taken_from_the_node_that_checks():
    """The checking node's digest says the instance is free: held here still (its release
    item was lost), it is released, here alone."""
    registry = Registry()
    registry.register(make("i-1", metadata={"registry.check": "tcp"}), now_ms=T0)
    registry.check_failed("ORDERS", "i-1", "refused", now_ms=T0 + 1)
    held_there = {"checkVerdicts": {"i-1": {"app": "ORDERS", "held": True}}}
    assert 0 == merge.take_check_releases(registry, held_there, now_ms=T0 + 2)
    free = {"checkVerdicts": {"i-1": {"app": "ORDERS", "held": False}, "x": "garbage"}}
    assert 1 == merge.take_check_releases(registry, free, now_ms=T0 + 2)
    assert "i-1" not in registry.checks
    assert InstanceStatus.UP is registry.get("ORDERS", "i-1", now_ms=T0).instance.status


class Replicated(Subscriber):
    """What the registry hands its replication part: nothing, for what came from a peer."""

    def __init__(self) -> None:
        self.sent: list[tuple[ReplicationAction, str, str]] = []

    def on_replicate(self, action: ReplicationAction, app: str, iid: str, *rest: Any) -> None:
        self.sent.append((action, app, iid))


class TestApplications:
    def test_a_full_document_and_a_single_application_both_read(self):
        one = {"name": "ORDERS", "instance": []}
        assert [one] == merge.applications({"application": one})
        assert [one] == merge.applications({"applications": {"application": one}})
        assert [one] == merge.applications({"applications": {"application": [one, "junk"]}})
        assert [] == merge.applications({"applications": {"application": "junk"}})

    def test_a_document_without_applications_lists_none(self):
        assert [] == merge.applications({"application": ["not", "one"]})
        assert [] == merge.applications({"applications": ["not", "a", "mapping"]})
        assert [] == merge.applications({})


class TestRemovals:
    def test_each_readable_entry_is_a_tombstone(self):
        """The app is upper-cased; a removal says `expired` unless it says false (a release
        before said nothing)."""
        entries = [
            {"appName": "orders", "id": "i-1", "lastDirtyTimestamp": 5, "removedAt": 7},
            {
                "appName": "ORDERS",
                "id": "i-2",
                "lastDirtyTimestamp": 5,
                "removedAt": 7,
                "expired": False,
            },
            {
                "appName": "ORDERS",
                "id": "i-3",
                "lastDirtyTimestamp": 5,
                "removedAt": 7,
                "expired": True,
            },
        ]
        assert [
            Tombstone("ORDERS", "i-1", 5, 7, True),
            Tombstone("ORDERS", "i-2", 5, 7, False),
            Tombstone("ORDERS", "i-3", 5, 7, True),
        ] == merge.removals({"removed": entries})

    def test_an_entry_one_field_short_is_left_out(self):
        whole = {"appName": "ORDERS", "id": "i-1", "lastDirtyTimestamp": 5, "removedAt": 7}
        short = [{**whole, field: None} for field in whole]
        empty = [{**whole, "appName": ""}, {**whole, "id": ""}]
        assert [] == merge.removals({"removed": [*short, *empty]})
        assert [Tombstone("ORDERS", "i-1", 5, 7, True)] == merge.removals({"removed": whole})
        assert [] == merge.removals({"removed": "i-1"})

    def test_an_unreadable_entry_is_logged_and_the_rest_taken(self):
        whole = {"appName": "ORDERS", "id": "i-2", "lastDirtyTimestamp": 5, "removedAt": 7}
        broken = [
            {**whole, "appName": ["x"]},
            {**whole, "id": {"x": 1}},
            {**whole, "lastDirtyTimestamp": "soon"},
            {**whole, "removedAt": -1},
        ]
        with capture_logs() as logs:
            found = merge.removals({"removed": [*broken, whole]})
        assert [Tombstone("ORDERS", "i-2", 5, 7, True)] == found
        assert [
            {"event": "peer_removal_unreadable", "log_level": "warning", "detail": detail}
            for detail in (
                "appName: must be a string, not a list",
                "id: must be a string, not an object",
                "lastDirtyTimestamp: must be a whole number, not 'soon'",
                "removedAt: must not be negative",
            )
        ] == logs


class TestLeases:
    async def test_a_copy_is_alive_until_its_whole_lease_has_run_out(self):
        """Renewed exactly one lease ago (90 s) it is taken; a millisecond earlier it is not,
        and the copies after it still are."""
        registry = Registry()
        dead = peer_copy("i-1", renewed_ms=T0 - 90_001)
        alive = peer_copy("i-2", renewed_ms=T0 - 90_000)
        assert 1 == await merge.merge(registry, app(dead, alive), now_ms=T0)
        assert ["i-2"] == [lease.instance.instance_id for lease in registry.application("ORDERS")]

    async def test_a_copy_whose_lease_the_registry_holds_never_runs_out(self):
        registry = Registry()
        held = {"management.port": "8080", "registry.lease": "server"}
        copy = peer_copy(renewed_ms=T0 - 86_400_000, metadata=held)
        assert 1 == await merge.merge(registry, app(copy), now_ms=T0)

    async def test_a_copy_without_times_is_dated_now(self):
        registry = Registry()
        copy = peer_copy()
        for times, field in (
            (copy, "lastDirtyTimestamp"),
            (copy["leaseInfo"], "lastRenewalTimestamp"),
        ):
            del times[field]
        assert 1 == await merge.merge(registry, app(copy), now_ms=T0 + 5)
        lease = registry.get("ORDERS", "i-1", now_ms=T0 + 5)
        assert (T0 + 5, T0 + 5) == (lease.last_renewal_ms, lease.instance.last_dirty_ms)

    async def test_only_a_copy_renewed_there_since_it_registered_is_expected_to_renew(self):
        """Self-preservation counts on a carried lease: one renewed after its registration
        there, not one registered and never renewed, nor one whose registration is unknown."""
        registry = Registry()
        renewed = peer_copy("i-1", renewed_ms=T0 + 1)
        fresh = peer_copy("i-2", renewed_ms=T0)
        unknown = peer_copy("i-3", renewed_ms=T0 + 1)
        del unknown["leaseInfo"]["registrationTimestamp"]
        assert 3 == await merge.merge(registry, app(renewed, fresh, unknown), now_ms=T0 + 2)
        carried = {
            lease.instance.instance_id: lease.carried for lease in registry.application("ORDERS")
        }
        assert {"i-1": True, "i-2": False, "i-3": False} == carried

    async def test_a_copy_with_a_bad_renewal_time_is_logged_and_skipped(self):
        registry = Registry()
        bad_renewal, bad_registration = peer_copy("i-1"), peer_copy("i-2")
        bad_renewal["leaseInfo"]["lastRenewalTimestamp"] = "yesterday"
        bad_registration["leaseInfo"]["registrationTimestamp"] = -5
        with capture_logs() as logs:
            taken = await merge.merge(
                registry, app(bad_renewal, bad_registration, peer_copy("i-3")), now_ms=T0
            )
        assert 1 == taken
        unreadable = [entry for entry in logs if entry["event"] == "peer_instance_unreadable"]
        assert [
            {"event": "peer_instance_unreadable", "log_level": "warning", "detail": detail}
            for detail in (
                "leaseInfo.lastRenewalTimestamp: must be a whole number, not 'yesterday'",
                "leaseInfo.registrationTimestamp: must not be negative",
            )
        ] == unreadable


class TestSameDirtyTimestamp:
    """Copies at the same lastDirtyTimestamp: a status change taken only without overrides on
    either side and only when it was made later."""

    async def ours(self) -> Registry:
        registry = Registry()
        registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
        return registry

    async def test_a_later_status_change_is_taken(self):
        registry = await self.ours()
        copy = peer_copy(status="DOWN")
        copy["lastUpdatedTimestamp"] = str(T0 + 1)
        assert 1 == await merge.merge(registry, app(copy), now_ms=T0 + 2)
        assert S.DOWN is registry.get("ORDERS", "i-1", now_ms=T0 + 2).instance.status

    async def test_a_status_change_made_at_the_same_moment_is_not(self):
        registry = await self.ours()
        copy = peer_copy(status="DOWN")
        copy["lastUpdatedTimestamp"] = str(T0)
        assert 0 == await merge.merge(registry, app(copy), now_ms=T0 + 2)

    async def test_the_same_status_is_not_taken_again(self):
        registry = await self.ours()
        copy = peer_copy()
        copy["lastUpdatedTimestamp"] = str(T0 + 1)
        assert 0 == await merge.merge(registry, app(copy), now_ms=T0 + 2)

    async def test_a_copy_under_an_override_there_is_not_taken(self):
        registry = await self.ours()
        copy = peer_copy(status="OUT_OF_SERVICE", overriddenStatus="OUT_OF_SERVICE")
        copy["lastUpdatedTimestamp"] = str(T0 + 1)
        assert 0 == await merge.merge(registry, app(copy), now_ms=T0 + 2)
        assert S.UP is registry.get("ORDERS", "i-1", now_ms=T0 + 2).instance.status


async def test_a_large_copy_gives_the_loop_a_turn_every_chunk():
    """Removals and instances together: a turn after each `_CHUNK` of them, and none for a
    copy smaller than that."""

    async def turns_during(removals: int, copies: int) -> int:
        turns, done = 0, False

        async def other_task() -> None:
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other_task())
        removed = [Tombstone("ORDERS", f"r-{n}", T0, T0) for n in range(removals)]
        apps = app(*(peer_copy(f"i-{n}") for n in range(copies)))
        await merge.merge(Registry(), apps, now_ms=T0, removed=removed)
        done = True
        await task
        return turns

    chunk = merge._CHUNK
    assert [0, 0, 0, 2] == [
        await turns_during(chunk - 1, 0),
        await turns_during(0, chunk - 1),
        await turns_during(chunk // 2 - 1, chunk // 2),
        await turns_during(chunk, chunk),
    ]


async def test_a_copy_older_than_ours_is_not_taken():
    registry = Registry()
    registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
    older = app(peer_copy(lastDirtyTimestamp=str(T0 - 1), status="DOWN"))
    assert 0 == await merge.merge(registry, older, now_ms=T0 + 5)


class TestDigest:
    def test_overrides_taken_are_counted_in_the_log(self):
        registry = Registry()
        registry.register(instance_from_wire(instance_doc(), now_ms=T0), now_ms=T0)
        registry.register(instance_from_wire(instance_doc(iid="i-2"), now_ms=T0), now_ms=T0)
        both = digest_answer([("i-1", "DOWN", T0 + 1), ("i-2", "DOWN", T0 + 1)], [])
        with capture_logs() as logs:
            assert 2 == merge.take_overrides(registry, both, now_ms=T0 + 2)
            assert 0 == merge.take_overrides(registry, both, now_ms=T0 + 2)
        taken = [entry for entry in logs if entry["event"] == "peer_overrides_taken"]
        assert [{"event": "peer_overrides_taken", "log_level": "info", "overrides": 2}] == taken

    def test_a_peers_checks_and_check_removals_are_taken_and_not_sent_on(self):
        registry, replicated = Registry(), Replicated()
        registry.subscribe(replicated)
        checks = {
            "set": [
                {"app": "orders", "check": "tcp", "interval": 10, "timeout": 2, "setAt": T0},
                {"app": "BILLING", "check": "tcp", "interval": 10, "timeout": 2, "setAt": T0},
            ],
            "removed": [{"app": "BILLING", "removedAt": T0 + 1}, {"app": "X", "removedAt": 1}],
        }
        with capture_logs() as logs:
            changed = merge.take_app_checks(registry, {"appChecks": checks}, now_ms=T0 + 2)
            assert 0 == merge.take_app_checks(registry, {"appChecks": checks}, now_ms=T0 + 2)
        assert 4 == changed  # two set, two removals (one of an application never checked)
        assert ["ORDERS"] == [check.app for check in registry.app_checks]
        assert [] == replicated.sent
        taken = [entry for entry in logs if entry["event"] == "peer_app_checks_taken"]
        assert [{"event": "peer_app_checks_taken", "log_level": "info", "app_checks": 4}] == taken


def test_no_holds_listed_takes_none_and_each_taken_counts():
    registry = Registry()
    checked = {"registry.check": "tcp"}
    down = InstanceStatus.DOWN
    for iid in ("i-1", "i-2"):
        registry.register(make(iid, status=down, metadata=checked), now_ms=T0, is_replication=True)
    assert 0 == merge.take_check_holds(registry, {})
    held = {"claim": "UP", "since": T0, "detail": "HTTP 503"}
    assert 2 == merge.take_check_holds(registry, {"checkHolds": {"i-1": held, "i-2": held}})
    assert 0 == merge.take_check_holds(registry, {"checkHolds": {"i-1": held, "i-2": held}})


def test_releases_read_past_what_does_not_read_and_stay_here():
    """Entries that do not read, or name an instance gone, are passed over, not the end of
    the list; the releases taken are not sent to the peers."""
    registry, replicated = Registry(), Replicated()
    registry.subscribe(replicated)
    for iid in ("i-1", "i-2"):
        registry.register(make(iid, metadata={"registry.check": "tcp"}), now_ms=T0)
        registry.check_failed("ORDERS", iid, "refused", now_ms=T0 + 1)
    registry.register(make("i-3", app="BILLING", metadata={"registry.check": "tcp"}), now_ms=T0)
    registry.check_failed("BILLING", "i-3", "refused", now_ms=T0 + 1)
    replicated.sent.clear()
    verdicts = {
        "x": "garbage",
        "i-3": {"app": "ORDERS", "held": False},  # not in ORDERS: UnknownInstance
        "i-9": {"app": "ORDERS", "held": False},  # not held here
        "i-1": {"app": ["ORDERS"], "held": False},
        "i-2": {"app": "ORDERS", "held": "no"},
        "i-4": {"held": False},
    }
    assert 0 == merge.take_check_releases(registry, {"checkVerdicts": verdicts}, now_ms=T0 + 2)
    verdicts["i-1"] = verdicts["i-2"] = {"app": "ORDERS", "held": False}
    assert 2 == merge.take_check_releases(registry, {"checkVerdicts": verdicts}, now_ms=T0 + 2)
    assert {"i-3"} == {iid for iid, _ in registry.checks.items()}
    assert [] == replicated.sent
    assert 0 == merge.take_check_releases(registry, {"checkVerdicts": ["i-3"]}, now_ms=T0 + 2)
