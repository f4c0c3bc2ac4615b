"""The store's compact form and the bulk restore: exactly what the old path restored."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from registry.catalog import Catalog
from registry.codec import Format, json_codec, wire
from registry.core import Registry
from registry.errors import BadInput, RegistryError
from registry.metrics import InstanceCounts
from registry.model import InstanceStatus, Lease
from registry.preservation import SelfPreservation
from registry.store import record
from registry.store.sqlite import Batch, Store
from tests.registry import reference
from tests.registry.test_codec import instances
from tests.registry.test_core import T0, make
from tests.registry.test_store import sql

NOW = T0 + 5_000


class TestCompactForm:
    @given(instances())
    def test_every_field_comes_back(self, instance):
        assert instance == record.decode(record.encode(instance))

    @pytest.mark.parametrize(
        "row",
        [
            b"[1, 2]",
            b"not json",
            b"{}",
            b'["i", "A", "h", "ip", "MyOwn", "c", null, "SIDEWAYS"' + b", 0" * 21 + b"]",
        ],
    )
    def test_a_damaged_row_is_refused(self, row):
        with pytest.raises(BadInput):
            record.decode(row)

    def test_a_host_name_that_is_the_ip_is_kept_once(self):
        """As Spring's preferIpAddress registers: both read back as one string, as from the
        wire (memory: 57 B an instance)."""
        row = orjson.loads(record.encode(make()))
        row[2] = row[3] = "".join(["10.0.0.", "7"])  # equal, but two strings
        decoded = record.decode(orjson.dumps(row))
        body = json_codec.instance_dict(Lease(decoded, 0, 0, 0))
        from_wire = wire.instance_from_wire(orjson.loads(orjson.dumps(body)), now_ms=NOW)
        assert decoded.host_name is decoded.ip_addr
        assert from_wire.host_name is from_wire.ip_addr

    @pytest.mark.parametrize(
        ("field", "value", "named"),
        [
            (9, "8080", "'8080'"),  # the port, as text
            (13, True, "True"),  # a flag where a number goes
            (0, None, "None"),
            (15, {"zone": 1}, "'zone' is 1"),  # metadata values are text
            (6, {"instance-id": ["i"]}, "['i']"),
            (8, "SIDEWAYS", "SIDEWAYS"),
            (27, "MOVED", "MOVED"),
        ],
    )
    def test_a_wrong_value_is_refused(self, field, value, named):
        """Also once rows of the right shape have been read (their shape is checked once)."""
        good = orjson.loads(record.encode(make()))
        record.decode(orjson.dumps(good))
        bad = [*good[:field], value, *good[field + 1 :]]
        with pytest.raises(BadInput) as refused:
            record.decode(orjson.dumps(bad))
        assert named in refused.value.detail


def subscribed(registry: Registry) -> tuple[SelfPreservation, InstanceCounts, Catalog]:
    preservation, counts, catalog = SelfPreservation(), InstanceCounts(), Catalog(registry)
    registry.subscribe(preservation.on_change, preservation.loaded)
    registry.subscribe(counts.on_change, counts.loaded)
    registry.subscribe(catalog.on_change, catalog.loaded)
    return preservation, counts, catalog


def lease_fields(lease: Lease) -> tuple[object, ...]:
    return tuple(getattr(lease, f.name) for f in dataclasses.fields(lease))


class TestBulkLoad:
    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(instances(), max_size=12, unique_by=lambda i: (i.app, i.instance_id)),
        st.data(),
    )
    def test_restores_exactly_what_registering_each_one_restored(self, stored, data):
        """The old path read each stored wire document and registered it as a replica; the
        bulk path gives every lease, override, count and document the same."""
        ids = st.sampled_from([i.instance_id for i in stored] or ["none"])
        overrides = data.draw(st.dictionaries(ids, st.sampled_from(list(InstanceStatus))))
        old, new = Registry(), Registry()
        old_parts, new_parts = subscribed(old), subscribed(new)
        for registry in (old, new):
            registry.restore(overrides, 40)
        for instance in stored:
            doc = orjson.loads(orjson.dumps(json_codec.instance_dict(_lease(instance))))
            read = wire.instance_from_wire(doc, now_ms=0)
            old.register(read, now_ms=NOW, is_replication=True)
        # Read as stored, or as registered at the time of the load (most need no copy then).
        registered_ms = data.draw(st.sampled_from([None, NOW]))
        decoded = [record.decode(record.encode(i), registered_ms=registered_ms) for i in stored]
        assert len(stored) == new.load(decoded, now_ms=NOW)
        assert [lease_fields(lease) for lease in old.leases()] == [
            lease_fields(lease) for lease in new.leases()
        ]
        assert dict(old.overrides()) == dict(new.overrides())
        assert (old.index, old.registrations, old.reconcile_hash()) == (
            new.index,
            new.registrations,
            new.reconcile_hash(),
        )
        (old_p, old_c, old_cat), (new_p, new_c, new_cat) = old_parts, new_parts
        assert (old_p._expected, old_p._registered) == (new_p._expected, new_p._registered)
        assert +old_c.counts == +new_c.counts
        assert old_cat._vips == new_cat._vips
        for fmt in Format:
            assert reference.full(old, fmt) == reference.full(new, fmt)

    def test_only_into_an_empty_registry(self):
        registry = Registry()
        registry.register(make(), now_ms=T0)
        with pytest.raises(RegistryError):
            registry.load([make("b")], now_ms=T0)


class TestStoredRows:
    async def test_rows_of_both_forms_load_and_a_damaged_one_is_skipped(self, tmp_path):
        """Rows written before the compact form are read by the wire reader; a damaged
        compact row is skipped with a log line, as a damaged document was."""
        path = tmp_path / "data" / "registry.db"
        registry = Registry()
        registry.register(make("compact"), now_ms=T0)
        store = await Store.open(path, now_ms=T0)
        await store.write(Batch(upserts=list(registry.leases())))
        old_doc = orjson.dumps(json_codec.instance_dict(_lease(make("old"))))
        await sql(
            path,
            f"INSERT INTO instances VALUES ('ORDERS', 'old', '{old_doc.decode()}', 0, 0)",
            "INSERT INTO instances VALUES ('ORDERS', 'bad', '[\"bad\", 1]', 0, 0)",
        )
        with capture_logs() as logs:
            snapshot = await store.load()
        await store.close()
        assert ["compact", "old"] == sorted(i.instance_id for i in snapshot.instances)
        assert 1 == sum(e["event"] == "store_row_unreadable" for e in logs)


def _lease(instance):
    return Lease(instance=instance, duration_ms=90_000, registration_ms=T0, last_renewal_ms=T0)
