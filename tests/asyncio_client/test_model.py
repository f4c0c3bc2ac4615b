"""Instances as the client reads them off the wire: lenient parsing, URLs and VIPs."""

from __future__ import annotations

from typing import Any

import pytest

from registry.client.model import Instance
from rules import InstanceStatus


def _wire(**fields: Any) -> dict[str, Any]:
    """A minimal instance object of a fetched document, with `fields` on top."""
    return {"app": "orders", "hostName": "host-1", "ipAddr": "10.0.0.1", "status": "UP", **fields}


def _instance(**fields: Any) -> Instance:
    defaults: dict[str, Any] = {
        "app": "ORDERS",
        "instance_id": "i-1",
        "host_name": "host-1",
        "ip_addr": "10.0.0.1",
        "status": InstanceStatus.UP,
    }
    return Instance(**{**defaults, **fields})


class TestPort:
    @pytest.mark.parametrize("enabled", ["true", "True", True])
    def test_enabled_port_object_gives_its_number(self, enabled: Any):
        """A port object enabled by a string or a boolean gives its number."""
        assert 8080 == Instance.from_wire(_wire(port={"$": 8080, "@enabled": enabled})).port

    @pytest.mark.parametrize("enabled", ["false", "False", False])
    def test_disabled_port_object_gives_none(self, enabled: Any):
        """A port object disabled by a string or a boolean gives None."""
        assert None is Instance.from_wire(_wire(port={"$": 8080, "@enabled": enabled})).port

    def test_port_number_may_be_a_string(self):
        """The `$` of a port object may be a numeric string."""
        assert 8080 == Instance.from_wire(_wire(port={"$": "8080", "@enabled": "true"})).port

    @pytest.mark.parametrize("port", [8080, "8080"])
    def test_bare_port_number_is_enabled(self, port: Any):
        """A bare number or numeric string as the port is an enabled port."""
        assert 8080 == Instance.from_wire(_wire(port=port)).port

    def test_port_object_without_enabled_flag_is_enabled(self):
        """A plain port object without `@enabled` counts as enabled."""
        assert 8080 == Instance.from_wire(_wire(port={"$": 8080})).port

    def test_secure_port_object_without_enabled_flag_is_disabled(self):
        """A secure port object without `@enabled` counts as disabled, Eureka's default."""
        assert None is Instance.from_wire(_wire(securePort={"$": 8443})).secure_port

    def test_absent_secure_port_is_disabled(self):
        """An instance without a secure port has none enabled."""
        assert None is Instance.from_wire(_wire(port=8080)).secure_port

    def test_enabled_secure_port_gives_its_number(self):
        """A secure port object enabled by the string "true" gives its number."""
        wire = _wire(securePort={"$": 8443, "@enabled": "true"})
        assert 8443 == Instance.from_wire(wire).secure_port

    def test_non_numeric_port_is_a_value_error(self):
        """A port that is not a number makes the item no instance."""
        with pytest.raises(ValueError):
            Instance.from_wire(_wire(port={"$": "http", "@enabled": "true"}))


class TestStatus:
    @pytest.mark.parametrize(
        ("wire", "expected"),
        [
            ("UP", InstanceStatus.UP),
            ("down", InstanceStatus.DOWN),
            ("OUT_OF_SERVICE", InstanceStatus.OUT_OF_SERVICE),
            ("SLEEPING", InstanceStatus.UNKNOWN),
            ("", InstanceStatus.UNKNOWN),
        ],
    )
    def test_status_is_read_and_unknown_ones_become_unknown(
        self, wire: str, expected: InstanceStatus
    ):
        """A status is read case-insensitively, and one it does not know is UNKNOWN."""
        assert expected is Instance.from_wire(_wire(status=wire)).status

    def test_missing_status_is_up(self):
        """An instance without a status is UP, as contract 4.2 and the Java reader default."""
        wire = _wire()
        del wire["status"]
        assert InstanceStatus.UP is Instance.from_wire(wire).status

    def test_overridden_status_is_read(self):
        """The camel-case `overriddenStatus` is read."""
        wire = _wire(overriddenStatus="OUT_OF_SERVICE")
        assert InstanceStatus.OUT_OF_SERVICE is Instance.from_wire(wire).overridden_status

    def test_legacy_lower_case_overridden_status_is_read(self):
        """The legacy spelling `overriddenstatus` is read too."""
        wire = _wire(overriddenstatus="OUT_OF_SERVICE")
        assert InstanceStatus.OUT_OF_SERVICE is Instance.from_wire(wire).overridden_status

    def test_camel_case_overridden_status_wins_over_legacy(self):
        """When both spellings are there, the camel-case one is taken."""
        wire = _wire(overriddenStatus="DOWN", overriddenstatus="OUT_OF_SERVICE")
        assert InstanceStatus.DOWN is Instance.from_wire(wire).overridden_status

    def test_missing_overridden_status_is_unknown(self):
        """Without an overridden status the instance has UNKNOWN, Eureka's "none"."""
        assert InstanceStatus.UNKNOWN is Instance.from_wire(_wire()).overridden_status


class TestFields:
    def test_app_is_upper_cased(self):
        """The application name is upper-cased, as the registry keys it."""
        assert "ORDERS" == Instance.from_wire(_wire(app="Orders")).app

    @pytest.mark.parametrize("given", [{}, {"instanceId": ""}, {"instanceId": None}])
    def test_missing_instance_id_is_the_host_name(self, given: dict[str, Any]):
        """An instance without an instance id is known by its host name."""
        assert "host-1" == Instance.from_wire(_wire(**given)).instance_id

    def test_instance_id_is_kept(self):
        """An instance id that is given is kept."""
        assert (
            "host-1:orders:8080"
            == Instance.from_wire(_wire(instanceId="host-1:orders:8080")).instance_id
        )

    def test_metadata_class_marker_is_dropped(self):
        """The `@class` marker in metadata is dropped, real keys are kept."""
        wire = _wire(metadata={"@class": "java.util.Collections$EmptyMap", "zone": "a"})
        assert {"zone": "a"} == Instance.from_wire(wire).metadata

    def test_metadata_with_only_the_class_marker_is_empty(self):
        """An empty Java map, written as only its `@class` marker, is an empty mapping."""
        wire = _wire(metadata={"@class": "java.util.Collections$EmptyMap"})
        assert {} == Instance.from_wire(wire).metadata

    def test_missing_host_name_is_a_key_error(self):
        """An item without a host name is no instance."""
        wire = _wire()
        del wire["hostName"]
        with pytest.raises(KeyError):
            Instance.from_wire(wire)

    def test_last_dirty_timestamp_is_read_but_not_compared(self):
        """The dirty timestamp is read from its string, yet two reads that differ only in it
        are equal."""
        older = Instance.from_wire(_wire(lastDirtyTimestamp="1700000000000"))
        newer = Instance.from_wire(_wire(lastDirtyTimestamp="1700000000001"))
        assert (1_700_000_000_000, older) == (older.last_dirty_ms, newer)

    def test_status_difference_makes_instances_unequal(self):
        """Two reads that differ in status are not equal."""
        assert Instance.from_wire(_wire(status="UP")) != Instance.from_wire(_wire(status="DOWN"))


class TestUrl:
    def test_plain_port_gives_http_url(self):
        """Without an enabled secure port the URL is http on the plain port."""
        wire = _wire(port={"$": 8080, "@enabled": "true"})
        assert "http://10.0.0.1:8080/" == Instance.from_wire(wire).url

    def test_disabled_secure_port_gives_http_url(self):
        """A secure port that is disabled is not used."""
        wire = _wire(port=8080, securePort={"$": 8443, "@enabled": "false"})
        assert "http://10.0.0.1:8080/" == Instance.from_wire(wire).url

    def test_enabled_secure_port_gives_https_url(self):
        """An enabled secure port gives an https URL on it."""
        wire = _wire(port=8080, securePort={"$": 8443, "@enabled": "true"})
        assert "https://10.0.0.1:8443/" == Instance.from_wire(wire).url

    def test_ipv6_address_is_bracketed(self):
        """An IPv6 address is written in brackets, so the port stays apart from it."""
        assert "http://[fe80::1]:8080/" == _instance(ip_addr="fe80::1", port=8080).url


class TestVips:
    def test_plain_and_secure_vips_are_upper_cased_and_deduplicated(self):
        """Both VIP lists are split on commas, upper-cased and given once each, in order."""
        instance = _instance(
            vip_address="orders, orders-v2", secure_vip_address="Orders,secure-orders"
        )
        assert ("ORDERS", "ORDERS-V2", "SECURE-ORDERS") == instance.vips

    def test_empty_entries_are_skipped(self):
        """Empty entries of a comma list are no VIPs."""
        assert ("ORDERS",) == _instance(vip_address=",orders, ,").vips

    def test_no_vips(self):
        """An instance without VIP addresses has none."""
        assert () == _instance().vips

    def test_secure_vip_alone(self):
        """A secure VIP counts without a plain one."""
        assert ("SECURE",) == _instance(secure_vip_address="secure").vips
