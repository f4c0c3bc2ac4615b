"""The peer list: settings, recognising this node's own URL, and peers in `GET status`."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from peers.cluster import Cluster
from registry import FakeClock, Settings
from registry.core.registry import Registry
from registry.settings import SettingsError, load_settings
from tests.helpers import fetch_json


class TestSettings:
    def test_peers_from_toml_and_from_the_environment(self, tmp_path: Path):
        """A TOML list or a comma-separated variable; each URL ends in a slash."""
        config = tmp_path / "r.toml"
        config.write_text(
            '[peers]\nurls = ["http://10.0.0.2:8761/eureka", "http://10.0.0.3:8761/eureka/"]\n'
        )
        assert ("http://10.0.0.2:8761/eureka/", "http://10.0.0.3:8761/eureka/") == (
            load_settings(config).settings.peers.urls
        )
        environ = {"REGISTRY_PEERS__URLS": "http://a:1/eureka/, http://b:2/eureka/,"}
        assert ("http://a:1/eureka/", "http://b:2/eureka/") == load_settings(
            None, environ
        ).settings.peers.urls

    @pytest.mark.parametrize(
        ("url", "message"),
        [
            ("10.0.0.2:8761/eureka/", "is not an http"),
            ("http:///eureka/", "names no host"),
            ("http://h:99999/eureka/", "invalid port"),
            ("http://h:8761/eureka/?x=1", "query"),
        ],
    )
    def test_a_bad_peer_url_stops_start_up(self, url: str, message: str):
        """The message names the setting and the URL."""
        with pytest.raises(SettingsError, match=f"peers.urls: '.*' .*{message}"):
            load_settings(None, {"REGISTRY_PEERS__URLS": url})


class TestSelf:
    @pytest.mark.parametrize(
        ("url", "is_self"),
        [
            ("http://127.0.0.1:8761/eureka/", True),
            ("http://localhost:8761/eureka/", True),
            ("http://127.0.0.1:8762/eureka/", False),
            ("http://10.99.99.99:8761/eureka/", False),
            ("http://registry-1.example:8761/eureka/", True),  # named by my_url
        ],
    )
    def test_a_node_knows_its_own_url(self, url: str, is_self: bool):
        """Same port and one of this machine's names, or exactly `my_url`."""
        settings = Settings.of(peers__my_url="http://registry-1.example:8761/eureka")
        cluster = Cluster(Registry(), FakeClock(), settings)
        cluster._local_names = frozenset({"127.0.0.1", "localhost"})
        assert is_self == cluster.is_self(url)


class TestStatus:
    async def test_a_single_node_lists_no_peers(self, client: TestClient):
        """No peers configured: empty replica lists, and reads are served."""
        status = await fetch_json(client, "/eureka/status")
        assert ([], "", "true") == (
            status["peers"],
            status["applicationStats"]["registered-replicas"],
            status["generalStats"]["serving-reads"],
        )

    async def test_status_in_xml_lists_each_peer(self, client: TestClient):
        """The XML form renders the peer list as elements too."""
        response = await client.get("/eureka/status")
        body = await response.text()
        assert 200 == response.status
        assert "<peers></peers>" in body
