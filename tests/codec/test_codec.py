"""Codecs: what is written can be read back whole, in JSON and in XML."""

from __future__ import annotations

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.codec import Format, encode_instance, instance_from_wire, json_codec, xml_codec
from registry.codec.xml_codec import escape_name, unescape_name
from registry.core.model import (
    InstanceInfo,
    InstanceStatus,
    Lease,
    LeaseSnapshot,
    PortInfo,
)
from registry.errors import BadInput
from tests.factories import instances

NOW = 1_735_689_000_000


def lease_of(instance: InstanceInfo) -> LeaseSnapshot:
    return LeaseSnapshot(
        instance=instance,
        registration_ms=1,
        last_renewal_ms=2,
        eviction_ms=0,
        service_up_ms=1,
        duration_ms=90_000,
    )


def comparable(instance: InstanceInfo) -> InstanceInfo:
    # actionType is the server's to set; it is written out but never read in.
    return msgspec.structs.replace(instance, action_type=None)


class TestRoundTrip:
    @given(instances())
    def test_json_loses_nothing(self, instance: InstanceInfo) -> None:
        """An instance written as JSON and read back is the same instance."""
        body = encode_instance(Format.JSON, lease_of(instance))
        read = instance_from_wire(json_codec.decode(body)["instance"], now_ms=NOW)
        assert comparable(instance) == comparable(read)

    @given(instances())
    def test_xml_loses_nothing(self, instance: InstanceInfo) -> None:
        """An instance written as XML and read back is the same instance."""
        body = encode_instance(Format.XML, lease_of(instance))
        read = instance_from_wire(xml_codec.decode(body, root="instance"), now_ms=NOW)
        assert comparable(instance) == comparable(read)

    @given(st.text(min_size=1, max_size=20))
    def test_xml_names_round_trip(self, key: str) -> None:
        """Every metadata key survives escaping into an element name and back."""
        assert key == unescape_name(escape_name(key))

    def test_xstream_escapes(self) -> None:
        """Underscores and dollars are escaped as XStream does."""
        assert ("versions__delta", "a_-b", "management.port") == (
            escape_name("versions_delta"),
            escape_name("a$b"),
            escape_name("management.port"),
        )


class TestItemsInParts:
    @given(instances(), st.integers(0, 2**48), st.integers(0, 2**48))
    def test_an_item_from_its_parts_is_the_instance_encoded_whole(self, instance, since, last):
        """Head, lease part and tail join into exactly what orjson writes for the whole."""
        lease = Lease(
            instance=instance, duration_ms=90_000, registration_ms=since, last_renewal_ms=last
        )
        whole = orjson.dumps(json_codec.instance_dict(lease))
        assert whole == json_codec.instance_item(lease)
        read = xml_codec.decode(xml_codec.instance_item(lease), root="instance")
        assert str(last) == read["leaseInfo"]["lastRenewalTimestamp"]


class TestLenientInput:
    def base(self, **fields: object) -> dict[str, object]:
        doc: dict[str, object] = {
            "hostName": "h",
            "app": "a",
            "ipAddr": "1.2.3.4",
            "dataCenterInfo": {"name": "MyOwn"},
        }
        doc.update(fields)
        return doc

    def test_defaults_of_a_minimal_instance(self) -> None:
        """Missing optional fields take Eureka's defaults; the id falls back to hostName."""
        i = instance_from_wire(self.base(), now_ms=NOW)
        assert ("h", "A", InstanceStatus.UP, PortInfo(7001, True), PortInfo(7002, False)) == (
            i.instance_id,
            i.app,
            i.status,
            i.port,
            i.secure_port,
        )
        assert (30, 90, NOW, NOW) == (
            i.renewal_interval_secs,
            i.duration_secs,
            i.last_dirty_ms,
            i.last_updated_ms,
        )

    def test_non_positive_lease_intervals_fall_back(self) -> None:
        """Lease intervals of zero or less mean the defaults, 30 and 90."""
        i = instance_from_wire(
            self.base(leaseInfo={"renewalIntervalInSecs": 0, "durationInSecs": -5}), now_ms=NOW
        )
        assert (30, 90) == (i.renewal_interval_secs, i.duration_secs)

    def test_lease_intervals_over_an_hour_are_an_hour(self) -> None:
        """A lease of 68 years would keep a dead instance listed for good."""
        lease = {"renewalIntervalInSecs": 10**6, "durationInSecs": 2147483647}
        i = instance_from_wire(self.base(leaseInfo=lease), now_ms=NOW)
        assert (3600, 3600) == (i.renewal_interval_secs, i.duration_secs)

    @pytest.mark.parametrize(
        "iid",
        [
            "i\u200b1",  # zero-width space
            "i-1\u202etxt.exe",  # right-to-left override
            "i\u20281",  # line separator
            "i\x7f1",  # DEL
            "i-1\r\nX-Forged: 1",
            "i 1",
            "\u0456-1",  # Cyrillic i
        ],
        ids=["zero-width", "rtl-override", "line-separator", "del", "crlf", "space", "cyrillic"],
    )
    @pytest.mark.parametrize("field", ["instanceId", "app"])
    def test_ids_are_visible_ascii(self, iid: str, field: str) -> None:
        """Ids and app names are shown to people and carried in paths: what could pass for
        another row is refused."""
        with pytest.raises(BadInput) as refused:
            instance_from_wire(self.base(**{field: iid}), now_ms=NOW)
        assert field == refused.value.field

    @pytest.mark.parametrize(
        "metadata",
        [{f"k{n}": "v" for n in range(257)}, {"k": "v" * (64 * 1024)}],
        ids=["entries", "characters"],
    )
    def test_metadata_is_bounded(self, metadata: dict[str, str]) -> None:
        """Every instance's metadata goes into every fetch: 256 entries and 64 Ki characters
        at most (18 000 keys each took a server from 209 MB to 1.8 GB in 300 registrations)."""
        with pytest.raises(BadInput) as refused:
            instance_from_wire(self.base(metadata=metadata), now_ms=NOW)
        assert "metadata" == refused.value.field

    def test_class_markers_in_metadata_are_dropped(self) -> None:
        """`@class` inside metadata is Java's type marker, not a key."""
        i = instance_from_wire(
            self.base(metadata={"@class": "java.util.Collections$EmptyMap", "k": 1}), now_ms=NOW
        )
        assert {"k": "1"} == i.metadata

    def test_whitespace_only_values_pass_as_eureka_lets_them(self) -> None:
        """Blank means missing or empty; whitespace-only values are taken as given."""
        assert " " == instance_from_wire(self.base(ipAddr=" "), now_ms=NOW).ip_addr

    @pytest.mark.parametrize(
        ("fields", "field"),
        [
            ({"hostName": ""}, "instanceId"),  # the id falls back to hostName first
            ({"hostName": "", "instanceId": "x"}, "hostName"),
            ({"ipAddr": None}, "ipAddr"),
            ({"app": ""}, "app"),
            ({"dataCenterInfo": None}, "dataCenterInfo"),
            ({"dataCenterInfo": {"name": ""}}, "dataCenterInfo.name"),
            ({"dataCenterInfo": {"name": "Mars"}}, "dataCenterInfo.name"),
            ({"status": "SLEEPING"}, "status"),
            ({"port": {"$": "http"}}, "port.$"),
            ({"port": 70000}, "port"),
            ({"securePort": {"$": 1, "@enabled": "maybe"}}, "securePort.@enabled"),
            ({"lastDirtyTimestamp": "yesterday"}, "lastDirtyTimestamp"),
            ({"lastDirtyTimestamp": -1}, "lastDirtyTimestamp"),
            ({"metadata": ["a"]}, "metadata"),
            ({"metadata": {"k": {"v": 1}}}, "metadata.k"),
            ({"countryId": True}, "countryId"),
            ({"instanceId": "a/b"}, "instanceId"),
            (
                {"dataCenterInfo": {"@class": "com.example.Nope", "name": "MyOwn"}},
                "dataCenterInfo.@class",
            ),
            ({"instanceId": ".."}, "instanceId"),
            ({"hostName": "h\x00"}, "hostName"),
        ],
    )
    def test_refusals_name_the_field(self, fields: dict[str, object], field: str) -> None:
        """Each kind of bad value is refused with the field it is in."""
        with pytest.raises(BadInput) as caught:
            instance_from_wire(self.base(**fields), now_ms=NOW)
        assert field == caught.value.field

    def test_app_mismatch_is_refused(self) -> None:
        """The body's app must be the path's, compared upper-cased."""
        with pytest.raises(BadInput, match="expecting ORDERS but was A"):
            instance_from_wire(self.base(), now_ms=NOW, expected_app="ORDERS")


class TestXmlInput:
    def test_entities_are_refused(self) -> None:
        """A DTD with entities is refused before anything is expanded."""
        body = b'<!DOCTYPE x [<!ENTITY e "boom">]><instance><app>&e;</app></instance>'
        with pytest.raises(BadInput, match="entities"):
            xml_codec.decode(body, root="instance")

    def test_ports_default_enabled_as_in_eureka(self) -> None:
        """Without an enabled attribute, port is on and securePort off."""
        body = (
            b"<instance><hostName>h</hostName><app>A</app><ipAddr>1.1.1.1</ipAddr>"
            b"<port>80</port><securePort>443</securePort>"
            b"<dataCenterInfo><name>MyOwn</name></dataCenterInfo></instance>"
        )
        i = instance_from_wire(xml_codec.decode(body, root="instance"), now_ms=NOW)
        assert (PortInfo(80, True), PortInfo(443, False)) == (i.port, i.secure_port)

    def test_empty_metadata_element_is_an_empty_map(self) -> None:
        """`<metadata class="...EmptyMap"/>` reads as no metadata."""
        body = (
            b"<instance><hostName>h</hostName><app>A</app><ipAddr>1.1.1.1</ipAddr>"
            b'<metadata class="java.util.Collections$EmptyMap"/>'
            b'<dataCenterInfo class="com.netflix.appinfo.MyDataCenterInfo">'
            b"<name>MyOwn</name></dataCenterInfo></instance>"
        )
        i = instance_from_wire(xml_codec.decode(body, root="instance"), now_ms=NOW)
        assert ({}, "com.netflix.appinfo.MyDataCenterInfo") == (
            i.metadata,
            i.data_center_info.class_name,
        )


XML_HEAD = b"<instance><hostName>h</hostName><app>A</app><ipAddr>1.1.1.1</ipAddr>"
XML_DC = b"<dataCenterInfo><name>MyOwn</name></dataCenterInfo>"


class TestXmlShapes:
    @pytest.mark.parametrize(
        "inner",
        [
            b"<metadata/><leaseInfo/>",
            b"<metadata>\n  </metadata><leaseInfo>\n</leaseInfo>",
            b'<metadata class="java.util.Collections$EmptyMap">\n  </metadata>',
        ],
    )
    def test_empty_maps_however_written(self, inner: bytes) -> None:
        """Empty or whitespace-only map elements read as empty maps and default leases."""
        body = XML_HEAD + inner + XML_DC + b"</instance>"
        i = instance_from_wire(xml_codec.decode(body, root="instance"), now_ms=NOW)
        assert ({}, 90) == (i.metadata, i.duration_secs)

    def test_metadata_keys_named_like_maps_stay_strings(self) -> None:
        """A metadata key called leaseInfo or metadata is a plain (here empty) value."""
        inner = b"<metadata><leaseInfo/><metadata></metadata><dataCenterInfo/></metadata>"
        body = XML_HEAD + inner + XML_DC + b"</instance>"
        i = instance_from_wire(xml_codec.decode(body, root="instance"), now_ms=NOW)
        assert {"leaseInfo": "", "metadata": "", "dataCenterInfo": ""} == i.metadata

    @pytest.mark.parametrize(
        "inner",
        [
            b"<metadata><a_x110000_>v</a_x110000_></metadata>",
            b"<metadata><a_xffffffffffffffffffffff_>v</a_xffffffffffffffffffffff_></metadata>",
            b"<metadata>" + b"<a>" * 50 + b"</a>" * 50 + b"</metadata>",
        ],
    )
    def test_impossible_names_and_deep_nesting_are_bad_input(self, inner: bytes) -> None:
        """Escapes of characters that do not exist, and absurd nesting, are a 400."""
        with pytest.raises(BadInput):
            xml_codec.decode(XML_HEAD + inner + XML_DC + b"</instance>", root="instance")


def test_empty_metadata_is_emitted_as_java_empty_map() -> None:
    """JSON clients expect the EmptyMap marker, not `{}`."""
    instance = instance_from_wire(
        {"hostName": "h", "app": "a", "ipAddr": "1", "dataCenterInfo": {"name": "MyOwn"}}, now_ms=1
    )
    doc = orjson.loads(encode_instance(Format.JSON, lease_of(instance)))
    assert {"@class": "java.util.Collections$EmptyMap"} == doc["instance"]["metadata"]
