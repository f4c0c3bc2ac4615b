"""Which node checks which instance: one owner among the members, the same on every node,
and a member that goes takes only its own share with it."""

from __future__ import annotations

from collections import Counter

from registry.checks.owner import owner

MEMBERS = ["a1b2c3d4", "e5f60718", "293a4b5c"]
INSTANCES = [f"10.0.{n // 250}.{n % 250}:orders:8080" for n in range(3000)]


def test_instances_are_shared_out_about_evenly():
    shares = Counter(owner(iid, MEMBERS) for iid in INSTANCES)
    assert set(MEMBERS) == set(shares)
    assert all(800 < count < 1200 for count in shares.values()), shares


def test_every_node_agrees_whatever_order_it_lists_the_members_in():
    assert [owner(i, MEMBERS) for i in INSTANCES] == [
        owner(i, list(reversed(MEMBERS))) for i in INSTANCES
    ]


def test_a_member_that_goes_takes_only_its_share_with_it():
    before = {iid: owner(iid, MEMBERS) for iid in INSTANCES}
    after = {iid: owner(iid, MEMBERS[:2]) for iid in INSTANCES}
    moved = [iid for iid in INSTANCES if before[iid] != after[iid]]
    assert moved and all(before[iid] == MEMBERS[2] for iid in moved)
