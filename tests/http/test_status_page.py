"""GET /: the status page, over HTTP and in a real browser (Chromium driven by Playwright)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient
from blockbuster import BlockBuster
from playwright.async_api import Browser, async_playwright, expect

from registry import FakeClock, Settings, create_app
from registry.appkeys import REGISTRY
from registry.core.model import InstanceStatus
from registry.core.overrides import Note
from registry.http import page_view, status_page
from tests.helpers import instance_doc, register
from tests.proxy import prefix_proxy

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = Path(__file__).parents[2] / "artifacts" / "status-page.png"
AS_CLIENT = aiohttp.encode_basic_auth("app", "pw")
AS_ADMIN = aiohttp.encode_basic_auth("ops", "pw2")
TAKE_OUT = 'data-action="take-out"'


async def page_of(client: TestClient, **headers: str) -> str:
    response = await client.get("/", headers=headers)
    assert 200 == response.status, await response.text()
    assert response.headers["Content-Type"].startswith("text/html")
    return await response.text()


async def page_of_query(client: TestClient, query: str) -> str:
    response = await client.get("/" + query)
    assert 200 == response.status, await response.text()
    return await response.text()


def ids_listed(html: str) -> list[str]:
    return re.findall(r'<tr data-app="[^"]*" data-id="([^"]*)"', html)


class TestPage:
    @pytest.mark.parametrize(
        ("trusted", "prefix", "base"),
        [
            (("127.0.0.1",), "/registry", '<base href="/registry/">'),
            (("127.0.0.0/8",), "/ops/registry/", '<base href="/ops/registry/">'),
            ((), "/registry", None),  # from a proxy not trusted
            (("127.0.0.1",), "//evil.example/", None),  # no path: another site
            (("127.0.0.1",), '/x"><script>', None),
        ],
    )
    async def test_a_trusted_proxys_prefix_is_the_pages_base(
        self, aiohttp_client, trusted, prefix, base
    ):
        settings = Settings.of(store__enabled=False, server__trusted_proxies=trusted)
        client = await aiohttp_client(create_app(settings))
        html = await page_of(client, **{"X-Forwarded-Prefix": prefix})
        found = [line for line in html.splitlines() if line.startswith("<base")]
        assert ([base] if base else []) == found
        assert '<link rel="stylesheet" href="page/status.css">' in html  # relative, always

    async def test_applications_are_counted_by_status_and_zone_and_open_one_by_one(self, client):
        await register(client, "ORDERS", "o-1", metadata={"zone": "eu-1a"})
        await register(client, "ORDERS", "o-2", status="DOWN", metadata={"zone": "eu-1b"})
        await register(client, "PAYMENTS", "p-1")
        html = await page_of(client)
        orders = html.split('<tr data-app-row="ORDERS">')[1].split("</tr>")[0]
        assert ">2<" in orders and "eu-1a 1 · eu-1b 1" in orders
        assert 's-DOWN">DOWN</span> 1' in orders and 's-UP">UP</span> 1' in orders
        assert '<a href="?open=ORDERS">ORDERS</a>' in orders
        opened = await page_of_query(client, "?open=ORDERS")
        assert 'data-id="o-1"' in opened and 'data-id="p-1"' not in opened
        assert "2 zones" in html and "eu-1a 1 · eu-1b 1" in html.split('id="summary"')[1]
        zoned = await page_of_query(client, "?zone=eu-1b")
        assert ["o-2"] == ids_listed(zoned)
        assert "1 of 3 shown" in zoned

    async def test_more_instances_than_are_listed_are_counted_and_apps_paged(
        self, client, monkeypatch
    ):
        monkeypatch.setattr(page_view, "MAX_ROWS", 3)
        monkeypatch.setattr(page_view, "APPS_PER_PAGE", 2)
        for n in range(5):
            await register(client, f"APP{n}", f"i-{n}")
        html = await page_of(client)
        assert "5 instances match: open an application" in html and ids_listed(html) == []
        assert "page 1 of 3" in html and 'href="?page=2"' in html
        assert ["i-2"] == ids_listed(await page_of_query(client, "?open=APP2"))
        assert "page 3 of 3" in await page_of_query(client, "?page=3")
        for n in range(7):  # an opened application's instances, a page of 3 at a time
            await register(client, "BIG", f"b-{n}")
        assert ["b-3", "b-4", "b-5"] == ids_listed(await page_of_query(client, "?open=BIG&page=2"))
        assert "page 3 of 3" in await page_of_query(client, "?open=BIG&page=3")

    @pytest.mark.parametrize(
        "query", ["?status=BOGUS", "?page=0", "?page=%C2%B2", "?app=" + "a" * 300]
    )
    async def test_a_filter_that_makes_no_sense_is_a_400(self, client, query):
        response = await client.get("/" + query)
        assert 400 == response.status

    async def test_overrides_in_force_and_the_latest_changes_are_listed(self, client):
        await register(client, "ORDERS", "o-1")
        await client.put("/eureka/apps/ORDERS/o-1/status?value=OUT_OF_SERVICE&reason=patching")
        recent = (await page_of(client)).split('<section id="recent">')[1]
        assert "Overrides in force (1)" in recent and "patching" in recent
        assert "MODIFIED" in recent and "ADDED" in recent

    def test_the_renewals_are_charted_against_the_threshold(self):
        chart = status_page._chart([(100, 85), (90, 85), (40, 85)])
        assert chart.count("<polyline") == 2 and 'class="threshold"' in chart
        assert "" == status_page._chart([(100, 85)])

    async def test_lists_a_registered_instance(self, client):
        await register(client, "ORDERS", "i-1")
        html = await page_of(client)
        assert '<tr data-app="ORDERS" data-id="i-1" data-status="UP"' in html
        assert "i-1.example.internal" in html
        assert "10.0.0.5:8080" in html

    async def test_escapes_what_clients_sent(self, client):
        """Instance ids and host names are user input: they show as text, never as markup."""
        await register(client, "ORDERS", "\"><img'src=x'onerror=alert(1)>", hostName="<script>")
        html = await page_of(client)
        assert "<img" not in html
        assert "<script>" not in html
        assert 'data-id="&quot;&gt;&lt;img&#x27;src=x&#x27;onerror=alert(1)&gt;"' in html
        assert "&lt;script&gt;" in html

    async def test_shows_the_override_with_its_reason(self, client):
        await register(client, "ORDERS", "i-1")
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=disk%20<full>")
        html = await page_of(client)
        assert 'data-override="OUT_OF_SERVICE"' in html
        assert '<div class="reason">disk &lt;full&gt;</div>' in html

    async def test_an_expiry_no_calendar_holds_still_renders(self, client, clock):
        """A peer (or an earlier release) may hold any Java long as an expiry: the page shows
        it as milliseconds rather than failing for everyone."""
        await register(client, "ORDERS", "i-1")
        now_ms, never = clock.wall_ms(), 2**63 - 1
        note = Note("ORDERS", InstanceStatus.DOWN, "pinned", now_ms, never, "peer")
        client.app[REGISTRY].set_status_override(
            "ORDERS", "i-1", InstanceStatus.DOWN, now_ms=now_ms, note=note, is_replication=True
        )
        html = await page_of(client)
        assert f"until {never} ms after 1970" in html

    async def test_shows_self_preservation_and_the_node(self, client):
        await register(client, "ORDERS", "i-1")
        html = await page_of(client)
        assert "<h3>Self-preservation</h3>" in html
        assert "fewer than the 10 where self-preservation applies" in html
        assert "1 instance in 1 application" in html
        assert "No peers" in html

    async def test_says_what_self_preservation_holds(self, client, clock):
        """Twenty leases renewing every 30 s, then half silent past their leases: eviction is
        held, and the page says how many expired leases it keeps."""
        registry = client.app[REGISTRY]
        ids = [f"i-{n}" for n in range(20)]
        for iid in ids:
            await register(client, "ORDERS", iid)
        for step in range(10):
            await clock.advance(30)
            for iid in ids if step < 4 else ids[:10]:
                registry.renew("ORDERS", iid, clock.wall_ms())
        html = await page_of(client)
        assert "eviction held" in html
        assert "10 expired leases kept" in html
        assert "40 expected from 20 leases" in html

    async def test_runs_no_inline_script_or_style(self, client):
        """The policy allows this server's files only, and the page needs nothing else."""
        response = await client.get("/")
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self'" in policy
        html = await response.text()
        assert [] == re.findall(r"<script(?![^>]*\ssrc=)", html)
        assert [] == re.findall(r"\s(?:style|on\w+)=", html)

    @pytest.mark.parametrize(
        ("name", "content_type"),
        [("status.js", "text/javascript"), ("status.css", "text/css")],
    )
    async def test_serves_its_files(self, client, name, content_type):
        response = await client.get(f"/page/{name}")
        assert (200, content_type) == (response.status, response.content_type)

    async def test_other_files_are_404(self, client):
        assert 404 == (await client.get("/page/status.html")).status

    async def test_admin_buttons_when_no_credentials_are_configured(self, client):
        """The admin plane is open then (the server is on loopback only); the page says so."""
        await register(client, "ORDERS", "i-1")
        html = await page_of(client)
        assert TAKE_OUT in html
        assert "no credentials configured (loopback only)" in html


class TestWatchSetting:
    @pytest.mark.parametrize("watch", [True, False])
    async def test_the_page_knows_whether_it_can_watch(self, aiohttp_client, watch):
        """With the stream off, the script says why the page is not live instead of
        opening a stream the server refuses (and asking for a reload that cannot help)."""
        client = await aiohttp_client(
            create_app(Settings.of(reads__watch=watch), clock=FakeClock())
        )
        assert f'data-watch="{str(watch).lower()}"' in await page_of(client)


class TestWithCredentials:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings.of(credentials__clients=("app:pw",), credentials__admins=("ops:pw2",))

    async def test_a_client_sees_no_admin_buttons(self, client):
        await register_as_admin(client)
        html = await page_of(client, Authorization=AS_CLIENT)
        assert 'data-id="i-1"' in html
        assert TAKE_OUT not in html
        assert "Signed in as <strong>app</strong> (read only)" in html

    async def test_an_admin_sees_them(self, client):
        await register_as_admin(client)
        html = await page_of(client, Authorization=AS_ADMIN)
        assert TAKE_OUT in html
        assert "Signed in as <strong>ops</strong> (may administer)" in html

    async def test_only_an_admin_sees_why_who_and_until_when(self, client):
        """An override's reason, author and expiry are the admin plane's, as the `overrides`
        listing is: a client sees that an instance is out of service, not why."""
        await register_as_admin(client)
        response = await client.put(
            "/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=db%20migration&expires=1h",
            headers={"Authorization": AS_ADMIN},
        )
        assert 200 == response.status
        as_client = await page_of(client, Authorization=AS_CLIENT)
        assert 'data-override="OUT_OF_SERVICE"' in as_client
        assert "db migration" not in as_client and " by ops" not in as_client
        as_admin = await page_of(client, Authorization=AS_ADMIN)
        assert "db migration" in as_admin and " by ops" in as_admin and "until" in as_admin

    async def test_without_a_credential_the_browser_asks_for_one(self, client):
        response = await client.get("/")
        assert 401 == response.status
        assert response.headers["WWW-Authenticate"].startswith("Basic ")


async def register_as_admin(client: TestClient) -> None:
    """Register i-1 through the guard, which lets the admin credential call the client plane."""
    response = await client.post(
        "/eureka/apps/ORDERS",
        data=orjson.dumps({"instance": instance_doc("ORDERS", "i-1")}),
        headers={"Content-Type": "application/json", "Authorization": AS_ADMIN},
    )
    assert 204 == response.status, await response.text()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        await browser.close()


@pytest.mark.slow  # a real browser: seconds a test
@pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (Debian: apt-get install chromium)"
)
class TestInTheBrowser:
    @pytest.fixture
    def blockbuster(self, blockbuster: BlockBuster) -> BlockBuster:
        """Playwright looks for its driver on disk (one stat) from the event loop's thread as it
        starts; allow that call there alone. The server and the rest stay watched."""
        blockbuster.functions["os.stat"].can_block_in(
            "playwright/_impl/_driver.py", "compute_driver_executable"
        )
        return blockbuster

    async def test_rows_follow_changes_live_and_admin_buttons_work(
        self, aiohttp_server, aiohttp_client, browser
    ):
        """Changes made elsewhere reach the open page without a reload; its buttons set and
        remove overrides."""
        server = await aiohttp_server(create_app(Settings.of(store__enabled=False)))
        client = await aiohttp_client(server)
        await register(client, "ORDERS", "i-1")
        await register(client, "ORDERS", "i-2", status="STARTING")
        page = await browser.new_page(viewport={"width": 1280, "height": 720})
        problems: list[str] = []  # script errors and policy violations
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on(
            "console",
            lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
        )
        await page.goto(str(server.make_url("/")))
        row = page.locator('tr[data-id="i-1"]')
        await expect(row.locator(".current")).to_have_text("UP")
        await expect(page.locator("#live")).to_have_text("live")
        await page.evaluate("window.notReloaded = true")

        # An override set through the API, by someone else.
        await client.put("/eureka/apps/ORDERS/i-1/status?value=OUT_OF_SERVICE&reason=deploy")
        await expect(row.locator(".current")).to_have_text("OUT_OF_SERVICE")
        await expect(row.locator(".reason")).to_have_text("deploy")  # from the refresh

        # A new instance appears.
        await register(client, "PAYMENTS", "p-1", status="DOWN")
        await expect(page.locator('tr[data-id="p-1"] .current')).to_have_text("DOWN")

        await row.get_by_role("button", name="Put back in service").click()
        await expect(row.locator(".current")).to_have_text("UP")
        await expect(row.locator(".override")).to_have_text("")

        page.once("dialog", lambda dialog: dialog.accept("draining for <patch>"))
        await (
            page.locator('tr[data-id="i-2"]')
            .get_by_role("button", name="Take out of service")
            .click()
        )
        i2 = page.locator('tr[data-id="i-2"]')
        await expect(i2.locator(".current")).to_have_text("OUT_OF_SERVICE")
        await expect(i2.locator(".reason")).to_have_text("draining for <patch>")

        assert await page.evaluate("window.notReloaded")
        assert [] == problems
        await page.screenshot(path=SCREENSHOT, full_page=True)  # makes the folder

    @pytest.mark.parametrize("entry", ["/registry/", "/registry"])
    async def test_behind_a_reverse_proxy_with_a_path_prefix(
        self, aiohttp_server, aiohttp_client, browser, entry
    ):
        """Served under /registry/ by a proxy on loopback: the page's files, its live updates
        and its buttons all go through the prefix. Without the trailing slash the page needs
        the proxy's X-Forwarded-Prefix, from a proxy it trusts."""
        registry = await aiohttp_server(
            create_app(Settings.of(store__enabled=False, server__trusted_proxies=("127.0.0.1",))),
            host="127.0.0.1",
        )
        client = await aiohttp_client(registry)
        await register(client, "ORDERS", "i-1")
        async with aiohttp.ClientSession() as session:
            proxy = await aiohttp_server(
                prefix_proxy(str(registry.make_url("")).rstrip("/"), "/registry", session),
                host="127.0.0.1",
            )
            page = await browser.new_page()
            outside: list[str] = []  # requests that missed the prefix
            page.on(
                "request",
                lambda r: outside.append(r.url) if "/registry" not in r.url else None,
            )
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            await page.goto(str(proxy.make_url(entry)))
            row = page.locator('tr[data-id="i-1"]')
            await expect(row.locator(".current")).to_have_text("UP")
            await expect(page.locator("#live")).to_have_text("live")  # the watch, proxied
            await register(client, "PAYMENTS", "p-1", status="DOWN")
            await expect(page.locator('tr[data-id="p-1"] .current')).to_have_text("DOWN")
            page.once("dialog", lambda dialog: dialog.accept("proxied"))
            await row.get_by_role("button", name="Take out of service").click()
            await expect(row.locator(".current")).to_have_text("OUT_OF_SERVICE")
            assert ([], []) == (outside, problems)

    async def test_filters_by_application_and_status(self, aiohttp_server, aiohttp_client, browser):
        server = await aiohttp_server(create_app(Settings.of(store__enabled=False)))
        client = await aiohttp_client(server)
        await register(client, "ORDERS", "o-1")
        await register(client, "PAYMENTS", "p-1", status="DOWN")
        page = await browser.new_page()
        await page.goto(str(server.make_url("/")))
        visible = page.locator("#instances tbody tr:visible")
        await page.fill("#filter-app", "pay")
        await expect(visible).to_have_count(1)
        await expect(visible.first).to_have_attribute("data-id", "p-1")
        assert page.url.endswith("/?app=pay")  # the view is a link
        await page.fill("#filter-app", "")
        await page.select_option("#filter-status", "UP")
        await expect(visible).to_have_count(1)
        await expect(visible.first).to_have_attribute("data-id", "o-1")
        await expect(page.locator("#shown")).to_have_text("1 of 2 shown")


async def test_the_page_is_rendered_once_for_a_moment_however_many_read_it(
    client, clock, monkeypatch
):
    """At the same index, for the same viewer, within PAGE_MAX_AGE: one rendering; a change
    or the time passing renders it again."""
    renders = 0
    real = status_page._render

    async def counted(*args):  # type: ignore[no-untyped-def]
        nonlocal renders
        renders += 1
        return await real(*args)

    monkeypatch.setattr(status_page, "_render", counted)
    await register(client, "ORDERS", "i-1")
    pages = [await page_of(client) for _ in range(5)]
    assert (1, 1) == (renders, len(set(pages)))
    await register(client, "ORDERS", "i-2")
    assert 'data-id="i-2"' in await page_of(client)
    await clock.advance(status_page.PAGE_MAX_AGE + 0.1)
    await page_of(client)
    assert 3 == renders
