"""The check an instance gets and the admin's check on an application (registry/checks/spec.py),
pinned exactly: each rule on both sides of its bound, and each refusal's field and detail as a
client or an admin reads them in the 400's body."""

from __future__ import annotations

from typing import Any

import pytest

from registry import Settings
from registry.checks.destinations import Destinations
from registry.checks.spec import CheckSpec, app_check_from, check_spec, public_name
from registry.codec import instance_from_wire
from registry.core.app_checks import AppCheck
from registry.core.model import InstanceInfo
from registry.errors import BadInput
from tests.helpers import instance_doc

ANYWHERE = Settings.of(checks__networks=("0.0.0.0/0", "::/0"))
HELD = {"registry.lease": "server"}  # an admin's instance: no interval raised for it


def instance(**fields: Any) -> InstanceInfo:
    """ORDERS i-1 at the public 8.8.4.4, port 8080 enabled, secure port 443 not."""
    doc = instance_doc("ORDERS", "i-1", ipAddr="8.8.4.4", hostName="orders.example.com")
    return instance_from_wire({**doc, **fields}, now_ms=0, expected_app="ORDERS")


def spec_of(settings: Settings = ANYWHERE, **fields: Any) -> CheckSpec | None:
    return check_spec(instance(**fields), Destinations(settings), settings)


def refusal(settings: Settings = ANYWHERE, **fields: Any) -> tuple[str, str]:
    with pytest.raises(BadInput) as refused:
        spec_of(settings, **fields)
    return refused.value.field, refused.value.detail


def asks(**metadata: str) -> dict[str, str]:
    """An http check with `metadata`, of an instance the registry holds."""
    return {"registry.check": "http", **HELD, **metadata}


class TestDescribe:
    def test_tcp_names_the_address_and_port_ipv6_in_brackets(self):
        assert "tcp 8.8.4.4:8080" == CheckSpec("tcp", "8.8.4.4", 8080, 10, 2).describe()
        assert "tcp [2001:db8::1]:80" == CheckSpec("tcp", "2001:db8::1", 80, 10, 2).describe()

    def test_http_names_the_url_requested(self):
        spec = CheckSpec("http", "8.8.4.4", 8443, 10, 2, "https", "orders.example.com", "/h?x=1")
        assert "http GET https://orders.example.com:8443/h?x=1" == spec.describe()


class TestMetadataCheck:
    def test_none_asked_none_given(self):
        assert spec_of() is None

    def test_the_defaults_ten_seconds_apart_two_to_answer(self):
        spec = spec_of(
            metadata={"registry.check": "http"}, healthCheckUrl="http://8.8.4.4:8080/health"
        )
        assert CheckSpec("http", "8.8.4.4", 8080, 10.0, 2.0, "http", "8.8.4.4", "/health") == spec

    def test_an_unknown_kind_is_refused(self):
        assert (
            "metadata.registry.check",
            "'icmp' is not one of http, tcp",
        ) == refusal(metadata={"registry.check": "icmp"})

    def test_a_clients_check_with_clients_off(self):
        off = Settings.of(checks__clients=False, checks__networks=("0.0.0.0/0",))
        assert (
            "metadata.registry.check",
            "checks.clients is false: this registry runs no check an instance asks for",
        ) == refusal(off, metadata={"registry.check": "tcp"})

    def test_a_clients_interval_is_raised_to_the_minimum_an_admins_is_not(self):
        tcp = {"registry.check": "tcp", "registry.check.interval": "2"}
        settings = Settings.of(checks__min_interval=3, checks__networks=("0.0.0.0/0",))
        raised = spec_of(settings, metadata=tcp)
        assert raised is not None and (3.0, 2.0) == (raised.interval, raised.timeout)
        held = spec_of(settings, metadata={**tcp, **HELD})
        assert held is not None and 2.0 == held.interval
        longer = spec_of(settings, metadata={**tcp, "registry.check.interval": "4"})
        assert longer is not None and 4.0 == longer.interval

    @pytest.mark.parametrize(("interval", "timeout"), [("1", "1"), ("3600", "30"), ("5", "0.1")])
    def test_bounds_are_allowed(self, interval, timeout):
        spec = spec_of(
            metadata={
                **asks(),
                "registry.check": "tcp",
                "registry.check.interval": interval,
                "registry.check.timeout": timeout,
            }
        )
        assert spec is not None
        assert (float(interval), float(timeout)) == (spec.interval, spec.timeout)

    def test_the_default_timeout_is_at_most_the_interval(self):
        spec = spec_of(metadata={**asks(), "registry.check": "tcp", "registry.check.interval": "1"})
        assert spec is not None and (1.0, 1.0) == (spec.interval, spec.timeout)

    @pytest.mark.parametrize(
        ("metadata", "field", "detail"),
        [
            ({"registry.check.interval": "0.99"}, "interval", "'0.99' is not from 1 to 3600"),
            ({"registry.check.interval": "3600.5"}, "interval", "'3600.5' is not from 1 to 3600"),
            ({"registry.check.timeout": "0.09"}, "timeout", "'0.09' is not from 0.1 to 2"),
            (
                {"registry.check.interval": "4", "registry.check.timeout": "4.5"},
                "timeout",
                "'4.5' is not from 0.1 to 4",
            ),
            (
                {"registry.check.interval": "60", "registry.check.timeout": "31"},
                "timeout",
                "'31' is not from 0.1 to 30",
            ),
            ({"registry.check.timeout": "soon"}, "timeout", "'soon' is not a number of"),
            ({"registry.check.interval": "\uff15"}, "interval", "'\uff15' is not a number of"),
        ],
    )
    def test_seconds_out_of_bounds_are_refused(self, metadata, field, detail):
        everything = {**asks(), "registry.check.interval": "2", **metadata}
        assert (f"metadata.registry.check.{field}", f"{detail} seconds") == refusal(
            metadata=everything, healthCheckUrl="http://8.8.4.4:8080/"
        )


class TestTcp:
    def test_the_port_or_the_secure_one_when_only_that_is_enabled(self):
        tcp = {"registry.check": "tcp"}
        spec = spec_of(metadata=tcp)
        assert CheckSpec("tcp", "8.8.4.4", 8080, 10.0, 2.0) == spec
        secure = spec_of(
            metadata=tcp,
            port={"$": 8080, "@enabled": "false"},
            securePort={"$": 8443, "@enabled": "true"},
        )
        assert secure is not None and 8443 == secure.port

    def test_no_port_enabled_is_refused(self):
        assert (
            "securePort",
            "the check needs this instance's securePort enabled",
        ) == refusal(metadata={"registry.check": "tcp"}, port={"$": 8080, "@enabled": "false"})

    def test_the_address_is_the_one_judged(self):
        spec = spec_of(metadata={"registry.check": "tcp"}, ipAddr="::ffff:8.8.4.4")
        assert spec is not None and "8.8.4.4" == spec.address


class TestHttpUrl:
    def test_without_a_url(self):
        assert (
            "healthCheckUrl",
            "an http check needs a healthCheckUrl to GET",
        ) == refusal(metadata=asks())

    def test_the_secure_url_when_it_is_the_only_one(self):
        spec = spec_of(
            metadata=asks(),
            securePort={"$": 8443, "@enabled": "true"},
            secureHealthCheckUrl="https://orders.example.com:8443/ready",
        )
        assert spec is not None
        assert ("https", 8443, "orders.example.com", "/ready") == (
            spec.scheme,
            spec.port,
            spec.host,
            spec.target,
        )

    def test_the_secure_urls_refusal_names_it(self):
        assert (
            "secureHealthCheckUrl",
            "'ftp://8.8.4.4/' is not an http:// or https:// URL",
        ) == refusal(metadata=asks(), secureHealthCheckUrl="ftp://8.8.4.4/")

    @pytest.mark.parametrize(
        ("url", "detail"),
        [
            ("http://[::1/health", "'http://[::1/health' is not a URL"),
            ("ftp://8.8.4.4:8080/", "'ftp://8.8.4.4:8080/' is not an http:// or https:// URL"),
            (
                "http://8.8.8.8:8080/",
                "'http://8.8.8.8:8080/' names '8.8.8.8', not this instance (8.8.4.4 or "
                "orders.example.com): a check goes to the instance itself only",
            ),
            (
                "http:///health",
                "'http:///health' names '', not this instance (8.8.4.4 or orders.example.com): a "
                "check goes to the instance itself only",
            ),
            ("http://8.8.4.4:99999/", "'http://8.8.4.4:99999/' has an invalid port"),
            (
                "http://8.8.4.4:9090/",
                "'http://8.8.4.4:9090/' asks port 9090, not this instance's 8080: a check goes "
                "to the instance's own port only",
            ),
            (
                "http://8.8.4.4/",
                "'http://8.8.4.4/' asks port 80, not this instance's 8080: a check goes to the "
                "instance's own port only",
            ),
        ],
    )
    def test_a_url_aimed_elsewhere_is_refused(self, url, detail):
        assert ("healthCheckUrl", detail) == refusal(metadata=asks(), healthCheckUrl=url)

    def test_the_urls_port_must_be_enabled(self):
        assert ("port", "the check needs this instance's port enabled") == refusal(
            metadata=asks(),
            port={"$": 8080, "@enabled": "false"},
            securePort={"$": 8443, "@enabled": "true"},
            healthCheckUrl="http://8.8.4.4:8080/",
        )

    def test_the_default_ports_are_80_and_443(self):
        plain = spec_of(
            metadata=asks(), port={"$": 80, "@enabled": "true"}, healthCheckUrl="http://8.8.4.4"
        )
        assert plain is not None and (80, "/") == (plain.port, plain.target)
        secure = spec_of(
            metadata=asks(),
            securePort={"$": 443, "@enabled": "true"},
            healthCheckUrl="https://8.8.4.4/health",
        )
        assert secure is not None and ("https", 443) == (secure.scheme, secure.port)

    def test_the_host_matches_whatever_its_case(self):
        by_name = spec_of(
            metadata=asks(),
            hostName="Orders.Example.COM",
            healthCheckUrl="http://ORDERS.example.com:8080/",
        )
        assert by_name is not None and "orders.example.com" == by_name.host
        by_address = spec_of(
            metadata=asks(),
            ipAddr="2A00:1450:4001:82A::200E",
            healthCheckUrl="http://[2a00:1450:4001:82a::200e]:8080/",
        )
        assert by_address is not None and "2a00:1450:4001:82a::200e" == by_address.address

    def test_the_target_is_percent_encoded_as_a_request_line_carries_it(self):
        kept = "/a:b@c!$'()*+,;~-._%41"
        spec = spec_of(metadata=asks(), healthCheckUrl=f'http://8.8.4.4:8080{kept}"<>?q=a b&r=/:@"')
        assert spec is not None
        assert f"{kept}%22%3C%3E?q=a%20b&r=/:@%22" == spec.target

    @pytest.mark.parametrize(
        ("host", "sent"),
        [("orders.example.com", "orders.example.com"), ("localhost", "8.8.4.4")],
    )
    def test_the_host_header_is_a_public_name_else_the_address(self, host, sent):
        spec = spec_of(metadata=asks(), hostName=host, healthCheckUrl=f"http://{host}:8080/")
        assert spec is not None and (sent, "8.8.4.4") == (spec.host, spec.address)


class TestAdminsCheck:
    def test_it_is_run_instead_of_the_metadatas(self):
        check = AppCheck("ORDERS", "tcp", 7.0, 3.0, None, 0)
        spec = check_spec(
            instance(metadata={"registry.check": "http"}),
            Destinations(ANYWHERE),
            ANYWHERE,
            check,
        )
        assert CheckSpec("tcp", "8.8.4.4", 8080, 7.0, 3.0) == spec

    def test_its_path_goes_to_the_own_address_and_port(self):
        check = AppCheck("ORDERS", "http", 7.0, 3.0, "/ready", 0)
        plain = check_spec(instance(), Destinations(ANYWHERE), ANYWHERE, check)
        assert CheckSpec("http", "8.8.4.4", 8080, 7.0, 3.0, "http", "8.8.4.4", "/ready") == plain
        secure_only = instance(
            port={"$": 8080, "@enabled": "false"}, securePort={"$": 8443, "@enabled": "true"}
        )
        secure = check_spec(secure_only, Destinations(ANYWHERE), ANYWHERE, check)
        assert secure is not None and ("https", 8443) == (secure.scheme, secure.port)

    def test_its_address_is_judged_as_a_clients(self):
        private = instance(ipAddr="10.0.0.5")
        check = AppCheck("ORDERS", "tcp", 7.0, 3.0, None, 0)
        with pytest.raises(BadInput, match=r"checks\.networks"):
            check_spec(private, Destinations(Settings()), Settings(), check)
        held = instance(ipAddr="10.0.0.5", metadata=HELD)
        assert check_spec(held, Destinations(Settings()), Settings(), check) is not None


class TestPublicName:
    @pytest.mark.parametrize(
        "name",
        [
            "example.com",
            "Orders.Example.COM",
            "a.b.io.",
            f"{'a' * 63}.example.com",
            "x-1.example.com",
        ],
    )
    def test_a_public_name(self, name):
        assert public_name(name)

    @pytest.mark.parametrize(
        "name",
        [
            f"{'a' * 64}.example.com",
            "-a.example.com",
            "a-.example.com",
            "a..example.com",
            "a.example.123",
            "a.example.c0m",
            "a.home",
            "a.corp",
            "a.onion",
            "com",
        ],
    )
    def test_not_one(self, name):
        assert not public_name(name)


class TestAppCheckFrom:
    def test_the_defaults_and_the_fields_kept(self):
        check = app_check_from("ORDERS", {"check": "tcp"}, now_ms=42, by="ops")
        assert AppCheck("ORDERS", "tcp", 10.0, 2.0, None, 42, "ops") == check
        assert app_check_from("ORDERS", {"check": "http"}, now_ms=0).by is None

    def test_the_setter_is_cut_at_200_characters(self):
        check = app_check_from("ORDERS", {"check": "tcp"}, now_ms=0, by="o" * 201)
        assert "o" * 200 == check.by

    @pytest.mark.parametrize(
        ("body", "interval", "timeout"),
        [
            ({"interval": 1}, 1.0, 1.0),
            ({"interval": 3600, "timeout": 30}, 3600.0, 30.0),
            ({"interval": 5, "timeout": 5}, 5.0, 5.0),
            ({"interval": 5, "timeout": 0.1}, 5.0, 0.1),
        ],
    )
    def test_bounds_are_allowed(self, body, interval, timeout):
        check = app_check_from("ORDERS", {"check": "tcp", **body}, now_ms=0)
        assert (interval, timeout) == (check.interval, check.timeout)
        assert float is type(check.interval) is type(check.timeout)

    def test_a_path_is_kept_percent_encoded(self):
        check = app_check_from("ORDERS", {"check": "http", "path": "/a:b@c\u00e9?x=%41"}, now_ms=0)
        assert "/a:b@c%C3%A9?x=%41" == check.path
        longest = "/" + "a" * 999
        assert longest == app_check_from("O", {"check": "http", "path": longest}, now_ms=0).path

    @pytest.mark.parametrize(
        ("body", "field", "detail"),
        [
            (["http"], "body", 'must be a JSON object: {"check": "http", ...}'),
            (
                {"check": "http", "url": "/", "by": "x"},
                "by",
                "not a field of a check: check, interval, timeout, path",
            ),
            ({"check": "icmp"}, "check", "'icmp' is not one of http, tcp"),
            ({}, "check", "None is not one of http, tcp"),
            ({"check": "tcp", "interval": "10"}, "interval", "'10' is not a number of seconds"),
            ({"check": "tcp", "interval": True}, "interval", "True is not a number of seconds"),
            ({"check": "tcp", "interval": 0.99}, "interval", "0.99 is not from 1 to 3600 seconds"),
            ({"check": "tcp", "interval": 3601}, "interval", "3601 is not from 1 to 3600 seconds"),
            ({"check": "tcp", "timeout": 0.09}, "timeout", "0.09 is not from 0.1 to 10 seconds"),
            (
                {"check": "tcp", "interval": 4, "timeout": 4.5},
                "timeout",
                "4.5 is not from 0.1 to 4 seconds",
            ),
            (
                {"check": "tcp", "interval": 60, "timeout": 31},
                "timeout",
                "31 is not from 0.1 to 30 seconds",
            ),
            ({"check": "tcp", "path": "/health"}, "path", "only an http check requests a path"),
            (
                {"check": "http", "path": "health"},
                "path",
                "must be a path from / of at most 1000 characters",
            ),
            (
                {"check": "http", "path": 7},
                "path",
                "must be a path from / of at most 1000 characters",
            ),
            (
                {"check": "http", "path": "/" + "a" * 1000},
                "path",
                "must be a path from / of at most 1000 characters",
            ),
        ],
    )
    def test_anything_else_is_refused_naming_the_field(self, body, field, detail):
        with pytest.raises(BadInput) as refused:
            app_check_from("ORDERS", body, now_ms=0)
        assert (field, detail) == (refused.value.field, refused.value.detail)

    @pytest.mark.parametrize("character", [" ", "\t", "\x00", "\x1f", "\x7f"])
    def test_spaces_and_control_characters_are_refused(self, character):
        with pytest.raises(BadInput) as refused:
            app_check_from("ORDERS", {"check": "http", "path": f"/a{character}b"}, now_ms=0)
        assert ("path", "spaces and control characters are not allowed") == (
            refused.value.field,
            refused.value.detail,
        )

    @pytest.mark.parametrize("character", ["!", '"', "~", "\x80"])
    def test_the_characters_around_them_are_not(self, character):
        check = app_check_from("ORDERS", {"check": "http", "path": f"/a{character}b"}, now_ms=0)
        assert check.path is not None and check.path.startswith("/a")
