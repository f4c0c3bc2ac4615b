"""The store's compact form and the bulk restore: exactly what the old path restored."""

from __future__ import annotations

import dataclasses

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from registry.codec import Format, json_codec, wire
from registry.core.model import AMAZON_CLASS, DataCenterInfo, InstanceInfo, InstanceStatus, Lease
from registry.core.registry import Registry
from registry.errors import BadInput, RegistryError
from registry.http.metrics_api import InstanceCounts
from registry.reads.catalog import Catalog
from registry.store import record, schema
from registry.store.sqlite import Batch, Store
from tests import reference
from tests.factories import T0, instances, make
from tests.helpers import sql

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
            b'["i", "A", "h", "ip", ["MyOwn", "c", {}], "SIDEWAYS"' + b", 0" * 19 + b"]",
            b'["", "A", "h", "ip", ["MyOwn", "c", {}]]',  # no instance id
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
        ("at", "value", "named"),
        [
            ((7, 0), "8080", "$[7][0]"),  # the port, as text
            ((9,), True, "$[9]"),  # a flag where a number goes
            ((0,), None, "$[0]"),
            ((11,), {"zone": 1}, "$[11]"),  # metadata values are text
            ((4, 2), {"instance-id": ["i"]}, "$[4][2]"),
            ((6,), "SIDEWAYS", "SIDEWAYS"),
            ((23,), "MOVED", "MOVED"),
        ],
    )
    def test_a_wrong_value_is_refused_and_named(self, at, value, named):
        row = orjson.loads(record.encode(make()))
        *outer, last = at
        field = row
        for n in outer:
            field = field[n]
        field[last] = value
        with pytest.raises(BadInput) as refused:
            record.decode(orjson.dumps(row))
        assert named in refused.value.detail

    def test_what_many_instances_repeat_is_kept_once(self):
        """As the wire reader keeps them: the application, VIPs, short metadata, ports and
        data center are shared between instances read back."""
        rows = [
            record.encode(
                make(i, vip_address="orders", metadata={"zone": "eu-west-1a", "commit": "f" * 40})
            )
            for i in ("a", "b")
        ]
        a, b = (record.decode(row) for row in rows)
        assert a.app is b.app and a.vip_address is b.vip_address
        assert a.metadata["zone"] is b.metadata["zone"]
        assert a.port is b.port and a.data_center_info is b.data_center_info


class TestEarlierForms:
    async def test_a_flat_row_of_an_earlier_release_is_rewritten_when_the_store_opens(
        self, tmp_path
    ):
        """Releases before the nested form wrote 29 flat fields (data center and ports
        spread out, empty data center metadata as null): schema migration 3 rewrites them."""
        path = tmp_path / "registry.db"
        instance = msgspec.structs.replace(
            make("flat", metadata={"zone": "1"}, vip_address="orders"),
            data_center_info=DataCenterInfo(
                name="Amazon", class_name=AMAZON_CLASS, metadata={"instance-id": "i-9"}
            ),
        )
        plain = make("plain")
        await sql(
            path,
            "CREATE TABLE schema_version (version INTEGER NOT NULL)",
            "INSERT INTO schema_version VALUES (2)",
            *schema.MIGRATIONS[1],
            *schema.MIGRATIONS[2],
        )
        for i in (instance, plain):
            flat = orjson.dumps(_flat(i)).decode()
            await sql(
                path,
                "INSERT INTO instances (app, id, doc, registration_ms, service_up_ms) "
                f"VALUES ('{i.app}', '{i.instance_id}', '{flat}', 0, 0)",
            )
        store = await Store.open(path, now_ms=T0)
        snapshot = await store.load()
        await store.close()
        assert [instance, plain] == sorted(snapshot.instances, key=lambda i: i.instance_id)


def _flat(i: InstanceInfo) -> list[object]:
    """An instance as releases before the nested form stored it."""
    dc = i.data_center_info
    return [
        i.instance_id,
        i.app,
        i.host_name,
        i.ip_addr,
        dc.name,
        dc.class_name,
        dict(dc.metadata) if dc.metadata else None,
        i.status.value,
        i.overridden_status.value,
        i.port.number,
        i.port.enabled,
        i.secure_port.number,
        i.secure_port.enabled,
        i.renewal_interval_secs,
        i.duration_secs,
        dict(i.metadata),
        i.sid,
        i.country_id,
        i.app_group_name,
        i.home_page_url,
        i.status_page_url,
        i.health_check_url,
        i.secure_health_check_url,
        i.vip_address,
        i.secure_vip_address,
        i.last_updated_ms,
        i.last_dirty_ms,
        None if i.action_type is None else i.action_type.value,
        i.asg_name,
    ]


def subscribed(registry: Registry) -> tuple[InstanceCounts, Catalog]:
    counts, catalog = InstanceCounts(), Catalog(registry)
    registry.subscribe(counts)
    registry.subscribe(catalog)
    return counts, catalog


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
        assert dict(old.overrides) == dict(new.overrides)
        assert (old.index, old.registrations, old.reconcile_hash()) == (
            new.index,
            new.registrations,
            new.reconcile_hash(),
        )
        (old_c, old_cat), (new_c, new_cat) = old_parts, new_parts
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
            "INSERT INTO instances (app, id, doc, registration_ms, service_up_ms) "
            f"VALUES ('ORDERS', 'old', '{old_doc.decode()}', 0, 0)",
            "INSERT INTO instances (app, id, doc, registration_ms, service_up_ms) "
            "VALUES ('ORDERS', 'bad', '[\"bad\", 1]', 0, 0)",
        )
        with capture_logs() as logs:
            snapshot = await store.load()
        await store.close()
        assert ["compact", "old"] == sorted(i.instance_id for i in snapshot.instances)
        assert 1 == sum(e["event"] == "store_row_unreadable" for e in logs)


def _lease(instance):
    return Lease(instance=instance, duration_ms=90_000, registration_ms=T0, last_renewal_ms=T0)
