"""The client's copy of the registry: Eureka's merge rules, its reconcile hash and its lookups."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.client.local_copy import SLICE, LocalCopy, matches
from registry.client.model import Action, Change, Instance
from registry.common.hashcode import reconcile_hash
from rules import InstanceStatus

UP = InstanceStatus.UP
DOWN = InstanceStatus.DOWN
STARTING = InstanceStatus.STARTING


def _instance(
    iid: str = "i-1", app: str = "ORDERS", status: InstanceStatus = UP, **fields: Any
) -> Instance:
    return Instance(
        app=app,
        instance_id=iid,
        host_name=f"{iid}.example",
        ip_addr="10.0.0.1",
        status=status,
        **fields,
    )


def _copy(*instances: Instance) -> LocalCopy:
    copy = LocalCopy()
    for instance in instances:
        copy.apply(Action.ADDED, instance)
    return copy


def _ids(instances: Iterable[Instance]) -> list[str]:
    return [i.instance_id for i in instances]


def _replace(copy: LocalCopy, fetched: list[Instance]) -> list[Change]:
    """Run a full fetch's replace to its end; the changes it made."""
    changes: list[Change] = []
    for _ in copy.replace(fetched, changes):
        pass
    return changes


def _held(copy: LocalCopy) -> list[Instance]:
    """Every instance the copy holds, application by application."""
    return [i for app in copy.applications() for i in copy.instances(app, up_only=False)]


class TestApply:
    def test_added_puts_a_new_instance_and_its_application(self):
        """ADDED of a new instance creates its application and says ADDED."""
        copy = LocalCopy()
        new = _instance()
        assert Change(Action.ADDED, new) == copy.apply(Action.ADDED, new)
        assert (["ORDERS"], (new,)) == (copy.applications(), copy.instances("ORDERS"))

    def test_modified_of_an_unknown_instance_adds_it(self):
        """MODIFIED of an instance the copy lacks puts it in, and says ADDED."""
        copy = LocalCopy()
        new = _instance()
        assert Change(Action.ADDED, new) == copy.apply(Action.MODIFIED, new)
        assert (new,) == copy.instances("ORDERS")

    def test_added_of_a_different_existing_instance_modifies_it(self):
        """ADDED of an instance held in another form replaces it and says MODIFIED."""
        copy = _copy(_instance(status=UP))
        changed = _instance(status=DOWN)
        assert Change(Action.MODIFIED, changed) == copy.apply(Action.ADDED, changed)
        assert (changed,) == copy.instances("ORDERS", up_only=False)

    def test_modified_of_an_existing_instance_replaces_it(self):
        """MODIFIED of a held instance replaces it by id and says MODIFIED."""
        copy = _copy(_instance(port=8080))
        changed = _instance(port=9090)
        assert Change(Action.MODIFIED, changed) == copy.apply(Action.MODIFIED, changed)
        assert (changed,) == copy.instances("ORDERS")

    def test_identical_instance_changes_nothing(self):
        """Putting an instance the copy holds as it is changes nothing."""
        copy = _copy(_instance())
        assert None is copy.apply(Action.MODIFIED, _instance())
        assert 1 == len(copy)

    def test_deleted_removes_and_says_what_was_held(self):
        """DELETED removes the instance and reports it as it was held, not as sent."""
        held = _instance("i-1", port=8080)
        copy = _copy(held, _instance("i-2"))
        assert Change(Action.DELETED, held) == copy.apply(Action.DELETED, _instance("i-1"))
        assert ["i-2"] == _ids(copy.instances("ORDERS"))

    def test_deleting_the_last_instance_drops_the_application(self):
        """DELETED of an application's last instance drops the application."""
        copy = _copy(_instance(app="ORDERS"), _instance(app="PAYMENTS"))
        copy.apply(Action.DELETED, _instance(app="ORDERS"))
        assert ["PAYMENTS"] == copy.applications()
        copy.apply(Action.DELETED, _instance(app="PAYMENTS"))
        assert (True, []) == (copy.empty, copy.applications())

    def test_deleting_an_unknown_instance_changes_nothing(self):
        """DELETED of an instance the copy lacks, in a known or unknown app, is None."""
        copy = _copy(_instance("i-1"))
        assert None is copy.apply(Action.DELETED, _instance("i-9"))
        assert None is copy.apply(Action.DELETED, _instance("i-1", app="PAYMENTS"))
        assert (["ORDERS"], ["i-1"]) == (copy.applications(), _ids(_held(copy)))

    def test_same_id_in_two_applications_are_two_instances(self):
        """An instance id is unique within its application only."""
        copy = _copy(_instance("i-1", app="ORDERS"), _instance("i-1", app="PAYMENTS"))
        copy.apply(Action.DELETED, _instance("i-1", app="ORDERS"))
        assert (["PAYMENTS"], 1) == (copy.applications(), len(copy))


class TestReplace:
    def test_replacing_an_empty_copy_adds_everything(self):
        """A first full fetch is all ADDED."""
        a, b = _instance("i-1"), _instance("i-2", app="PAYMENTS")
        assert [Change(Action.ADDED, a), Change(Action.ADDED, b)] == _replace(LocalCopy(), [a, b])

    def test_replace_reports_the_difference(self):
        """DELETED for gone, ADDED for new, MODIFIED for changed, nothing for the same."""
        gone, same, old = _instance("i-1"), _instance("i-2"), _instance("i-3", status=UP)
        copy = _copy(gone, same, old)
        changed, new = _instance("i-3", status=DOWN), _instance("i-4")
        changes = _replace(copy, [same, changed, new])
        assert {
            "i-1": Change(Action.DELETED, gone),
            "i-3": Change(Action.MODIFIED, changed),
            "i-4": Change(Action.ADDED, new),
        } == {c.instance.instance_id: c for c in changes}
        assert 3 == len(changes)
        assert [same, changed, new] == _held(copy)

    def test_replacing_with_the_same_changes_nothing(self):
        """A full fetch of what the copy holds reports no change."""
        held = [_instance("i-1"), _instance("i-2", app="PAYMENTS", status=DOWN)]
        copy = _copy(*held)
        assert [] == _replace(copy, list(held))
        assert held == _held(copy)

    def test_replacing_with_nothing_deletes_everything(self):
        """An empty full fetch deletes every instance and empties the copy."""
        a, b = _instance("i-1"), _instance("i-2", app="PAYMENTS")
        copy = _copy(a, b)
        changes = _replace(copy, [])
        assert [Change(Action.DELETED, a), Change(Action.DELETED, b)] == changes
        assert (True, "", 0) == (copy.empty, copy.reconcile_hash(), len(copy))

    def test_replace_gives_the_caller_turns(self):
        """A large full fetch is taken in slices: no more than SLICE instances are read,
        removed or put between two turns of the caller."""
        copy = _copy(*(_instance(f"old-{n:05}") for n in range(SLICE)))
        read = 0

        def fetched() -> Iterator[Instance]:
            nonlocal read
            for n in range(3 * SLICE):
                read += 1
                yield _instance(f"new-{n:05}")

        changes: list[Change] = []
        slices, last = [], (0, 0)
        for _ in copy.replace(fetched(), changes):
            slices.append((read - last[0], len(changes) - last[1]))
            last = (read, len(changes))
        slices.append((read - last[0], len(changes) - last[1]))
        assert [] == [(r, c) for r, c in slices if r > SLICE or c > SLICE]
        assert (4 * SLICE, 3 * SLICE) == (len(changes), len(copy))

    def test_lookups_between_slices_see_each_instance_as_it_was_or_is(self):
        """Between slices each instance is seen once as it was or as it is, one that stays is
        never missing, and the hash counts what is seen."""
        old = {f"i-{n:05}": _instance(f"i-{n:05}", port=8080) for n in range(2 * SLICE)}
        copy = _copy(*old.values())
        kept = [_instance(iid, port=9090) for iid in list(old)[:SLICE]]
        added = [_instance(f"j-{n:05}", status=DOWN) for n in range(SLICE)]
        new = {i.instance_id: i for i in kept + added}
        seen_wrong, hashes_wrong = [], 0
        for _ in copy.replace(kept + added, []):
            seen = copy.instances("ORDERS", up_only=False)
            seen_wrong += [
                i for i in seen if i not in (old.get(i.instance_id), new.get(i.instance_id))
            ]
            seen_wrong += [i.instance_id for i in kept if i.instance_id not in _ids(seen)]
            seen_wrong += [iid for iid in set(_ids(seen)) if _ids(seen).count(iid) > 1]
            held = _held(copy)
            hashes_wrong += reconcile_hash(i.status for i in held) != copy.reconcile_hash()
        assert ([], 0) == (seen_wrong, hashes_wrong)
        assert sorted(new.values(), key=lambda i: i.instance_id) == _held(copy)


class TestReconcileHash:
    def test_empty_copy_hashes_to_empty_string(self):
        """An empty copy's hash is the empty string."""
        assert "" == LocalCopy().reconcile_hash()

    def test_hash_follows_a_sequence_of_operations(self):
        """The hash counts what the copy holds after adds, a status change, deletes and a
        replace."""
        copy = LocalCopy()
        steps: list[tuple[str, str]] = []

        def step() -> None:
            held = reconcile_hash(i.status for i in _held(copy))
            steps.append((held, copy.reconcile_hash()))

        copy.apply(Action.ADDED, _instance("i-1"))
        copy.apply(Action.ADDED, _instance("i-2", app="PAYMENTS"))
        copy.apply(Action.ADDED, _instance("i-3", status=DOWN))
        step()
        copy.apply(Action.ADDED, _instance("i-3", status=DOWN))  # a repeat counts once
        step()
        copy.apply(Action.MODIFIED, _instance("i-1", status=STARTING))
        step()
        copy.apply(Action.DELETED, _instance("i-3"))
        step()
        _replace(copy, [_instance("i-7", status=DOWN), _instance("i-8", status=DOWN)])
        step()
        copy.apply(Action.DELETED, _instance("i-7"))
        copy.apply(Action.DELETED, _instance("i-8"))
        step()
        assert [
            ("DOWN_1_UP_2_", "DOWN_1_UP_2_"),
            ("DOWN_1_UP_2_", "DOWN_1_UP_2_"),
            ("DOWN_1_STARTING_1_UP_1_", "DOWN_1_STARTING_1_UP_1_"),
            ("STARTING_1_UP_1_", "STARTING_1_UP_1_"),
            ("DOWN_2_", "DOWN_2_"),
            ("", ""),
        ] == steps


class TestInstances:
    def test_up_only_by_default(self):
        """A lookup gives the UP instances unless asked for all."""
        copy = _copy(
            _instance("i-1", status=UP),
            _instance("i-2", status=DOWN),
            _instance("i-3", status=STARTING),
            _instance("i-4", status=InstanceStatus.OUT_OF_SERVICE),
            _instance("i-5", status=InstanceStatus.UNKNOWN),
        )
        assert ["i-1"] == _ids(copy.instances("ORDERS"))
        assert ["i-1", "i-2", "i-3", "i-4", "i-5"] == _ids(copy.instances("ORDERS", up_only=False))

    def test_sorted_by_id(self):
        """Instances come ordered by id, whatever order they were added in."""
        copy = _copy(_instance("i-3"), _instance("i-1"), _instance("i-2"))
        assert ["i-1", "i-2", "i-3"] == _ids(copy.instances("ORDERS"))

    def test_application_name_in_either_case(self):
        """An application is found by its name in any case."""
        copy = _copy(_instance("i-1"))
        assert ["i-1"] == _ids(copy.instances("orders"))

    def test_vip_in_either_case_plain_or_secure(self):
        """A name that is no application is looked up as a plain or secure VIP."""
        copy = _copy(
            _instance("i-1", app="ORDERS", vip_address="shop"),
            _instance("i-2", app="PAYMENTS", secure_vip_address="Shop,pay"),
            _instance("i-3", app="OTHER", vip_address="other"),
        )
        assert (["i-1", "i-2"], ["i-2"]) == (
            _ids(copy.instances("SHOP")),
            _ids(copy.instances("pay")),
        )

    def test_application_wins_over_vip_of_the_same_name(self):
        """When a name is both an application and a VIP, the application is given."""
        copy = _copy(_instance("i-1", app="SHOP"), _instance("i-2", app="X", vip_address="shop"))
        assert ["i-1"] == _ids(copy.instances("shop"))

    def test_unknown_name_gives_nothing(self):
        """A name that is neither an application nor a VIP gives no instance."""
        assert () == _copy(_instance()).instances("NOTHING")


class TestViews:
    def test_added_instance_shows_after_a_lookup(self):
        """A lookup made before an add does not hide the added instance."""
        copy = _copy(_instance("i-1", vip_address="shop"))
        assert (["i-1"], ["i-1"]) == (_ids(copy.instances("ORDERS")), _ids(copy.instances("shop")))
        copy.apply(Action.ADDED, _instance("i-2", vip_address="shop"))
        assert (["i-1", "i-2"], ["i-1", "i-2"]) == (
            _ids(copy.instances("ORDERS")),
            _ids(copy.instances("shop")),
        )

    def test_status_change_shows_after_a_lookup(self):
        """An instance going DOWN leaves the UP view and stays in the full one."""
        copy = _copy(_instance("i-1", vip_address="shop"), _instance("i-2", vip_address="shop"))
        before = [_ids(copy.instances(n, up_only=u)) for n in ("ORDERS", "SHOP") for u in (1, 0)]
        copy.apply(Action.MODIFIED, _instance("i-1", status=DOWN, vip_address="shop"))
        after = [_ids(copy.instances(n, up_only=u)) for n in ("ORDERS", "SHOP") for u in (1, 0)]
        assert [["i-1", "i-2"]] * 4 == before
        assert [["i-2"], ["i-1", "i-2"], ["i-2"], ["i-1", "i-2"]] == after

    def test_vip_dropped_by_a_change_shows_after_a_lookup(self):
        """An instance whose new form lacks a VIP leaves that VIP's view."""
        copy = _copy(_instance("i-1", vip_address="shop"), _instance("i-2", vip_address="shop"))
        assert ["i-1", "i-2"] == _ids(copy.instances("shop"))
        copy.apply(Action.MODIFIED, _instance("i-1", vip_address="store"))
        assert (["i-2"], ["i-1"]) == (_ids(copy.instances("shop")), _ids(copy.instances("store")))

    def test_deleted_instance_leaves_after_a_lookup(self):
        """A deleted instance leaves both its application's and its VIP's views."""
        copy = _copy(_instance("i-1", vip_address="shop"), _instance("i-2", vip_address="shop"))
        copy.instances("ORDERS"), copy.instances("shop")
        copy.apply(Action.DELETED, _instance("i-1"))
        assert (["i-2"], ["i-2"]) == (_ids(copy.instances("ORDERS")), _ids(copy.instances("shop")))

    def test_new_application_takes_over_a_vip_name_after_a_lookup(self):
        """Once an application named like a looked-up VIP appears, the name gives it."""
        copy = _copy(_instance("i-1", app="X", vip_address="shop"))
        assert ["i-1"] == _ids(copy.instances("shop"))
        copy.apply(Action.ADDED, _instance("i-9", app="SHOP"))
        assert ["i-9"] == _ids(copy.instances("shop"))

    def test_vip_name_comes_back_when_its_namesake_application_goes(self):
        """Once an application named like a VIP is gone, the name gives the VIP again."""
        copy = _copy(_instance("i-1", app="X", vip_address="shop"), _instance("i-9", app="SHOP"))
        assert ["i-9"] == _ids(copy.instances("shop"))
        copy.apply(Action.DELETED, _instance("i-9", app="SHOP"))
        assert ["i-1"] == _ids(copy.instances("shop"))

    def test_replace_refreshes_views(self):
        """A full fetch refreshes the views looked up before it."""
        copy = _copy(_instance("i-1", vip_address="shop"))
        copy.instances("ORDERS"), copy.instances("shop")
        _replace(copy, [_instance("i-2", vip_address="shop")])
        assert (["i-2"], ["i-2"]) == (_ids(copy.instances("ORDERS")), _ids(copy.instances("shop")))


class TestMatches:
    def test_none_matches_every_change(self):
        """No name matches every change."""
        assert matches(Change(Action.ADDED, _instance()), None)

    def test_application_name_in_either_case(self):
        """A change matches its application's name in any case."""
        change = Change(Action.DELETED, _instance(app="ORDERS"))
        assert (True, True, False) == (
            matches(change, "ORDERS"),
            matches(change, "orders"),
            matches(change, "PAYMENTS"),
        )

    def test_plain_or_secure_vip_in_either_case(self):
        """A change matches each of its plain and secure VIPs in any case."""
        change = Change(
            Action.MODIFIED, _instance(vip_address="shop,store", secure_vip_address="Secure")
        )
        assert [True, True, True, False] == [
            matches(change, name) for name in ("SHOP", "store", "secure", "shops")
        ]


# A random sequence of operations against a brute-force model of the copy.
APPS = st.sampled_from(["ORDERS", "PAYMENTS", "SHOP"])
IDS = st.sampled_from(["i-1", "i-2", "i-3"])
VIPS = st.sampled_from([None, "shop", "store", "shop, Store", "orders"])
STATUSES = st.sampled_from(list(InstanceStatus))
INSTANCES = st.builds(
    _instance,
    iid=IDS,
    app=APPS,
    status=STATUSES,
    vip_address=VIPS,
    secure_vip_address=st.sampled_from([None, "secure", "shop"]),
    port=st.sampled_from([8080, 9090]),
)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("apply"), st.sampled_from(list(Action)), INSTANCES),
        st.tuples(st.just("replace"), st.lists(INSTANCES, max_size=5)),
    ),
    max_size=30,
)
NAMES = ["ORDERS", "payments", "SHOP", "store", "Secure", "nothing"]


def _brute_force(
    model: dict[tuple[str, str], Instance], name: str, up_only: bool
) -> list[Instance]:
    """`instances(name)` worked out from scratch: the application, else the VIP."""
    key = name.upper()
    found = [i for i in model.values() if i.app == key] or [
        i for i in model.values() if key in i.vips
    ]
    return [i for i in found if i.status is UP or not up_only]


def _model_apply(
    model: dict[tuple[str, str], Instance], action: Action, instance: Instance
) -> Change | None:
    """Eureka's merge rules on a plain dict; the change they make."""
    key = (instance.app, instance.instance_id)
    old = model.get(key)
    if action is Action.DELETED:
        return None if old is None else Change(Action.DELETED, model.pop(key))
    if old == instance:
        return None
    model[key] = instance
    return Change(Action.ADDED if old is None else Action.MODIFIED, instance)


def _model_replace(model: dict[tuple[str, str], Instance], fetched: list[Instance]) -> list[Change]:
    """A full fetch on a plain dict; the difference it makes."""
    incoming = {(i.app, i.instance_id): i for i in fetched}
    changes = [Change(Action.DELETED, i) for k, i in model.items() if k not in incoming]
    changes += [
        Change(Action.ADDED if k not in model else Action.MODIFIED, i)
        for k, i in incoming.items()
        if model.get(k) != i
    ]
    kept = {k: model[k] if model.get(k) == i else i for k, i in incoming.items()}
    model.clear()
    model.update(kept)
    return changes


def _by_app_and_id(instances: Iterable[Instance]) -> list[Instance]:
    return sorted(instances, key=lambda i: (i.instance_id, i.app))


def _changes_by_key(changes: Iterable[Change]) -> list[Change]:
    return sorted(changes, key=lambda c: (c.instance.app, c.instance.instance_id))


class TestRandomOperations:
    @settings(max_examples=300, deadline=None)
    @given(OPERATIONS)
    def test_copy_agrees_with_a_brute_force_model(self, operations: list[tuple[Any, ...]]):
        """After each operation the changes, hash and lookups agree with a recount."""
        copy = LocalCopy()
        model: dict[tuple[str, str], Instance] = {}
        for operation in operations:
            if operation[0] == "apply":
                _, action, instance = operation
                assert _model_apply(model, action, instance) == copy.apply(action, instance)
            else:
                expected = _model_replace(model, operation[1])
                changes: list[Change] = []
                for _ in copy.replace(operation[1], changes):
                    assert reconcile_hash(i.status for i in _held(copy)) == copy.reconcile_hash()
                assert _changes_by_key(expected) == _changes_by_key(changes)

            held = _held(copy)
            assert _by_app_and_id(model.values()) == _by_app_and_id(held)
            assert (len(model), len(model)) == (len(held), len(copy))
            assert reconcile_hash(i.status for i in held) == copy.reconcile_hash()
            assert sorted({app for app, _ in model}) == copy.applications()
            for name in NAMES:
                for up_only in (True, False):
                    got = copy.instances(name, up_only=up_only)
                    assert sorted(_ids(got)) == _ids(got)
                    expected_instances = _brute_force(model, name, up_only)
                    assert _by_app_and_id(expected_instances) == _by_app_and_id(got)
