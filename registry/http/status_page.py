"""GET /: the status page, for people. Every instance with its status, override and lease, and
this node's health: self-preservation, reads, the store and the peers.

The page is rendered here, every value from the registry escaped (instance ids, host names and
override reasons are other people's input). A small script (page/status.js) filters the rows,
follows the `watch` stream to update them live, and gives a viewer who may administer buttons
to take an instance out of service and back. The Content-Security-Policy lets only this
server's own files run or style the page, so nothing inline would run: the script reads what
it needs from data- attributes.
"""

from __future__ import annotations

import ipaddress
import re
import string
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from aiohttp import web

from registry.appkeys import (
    CHECKER,
    CLOCK,
    JOURNAL,
    LIFECYCLE,
    PAGES,
    PRESERVATION,
    REGISTRY,
    SETTINGS,
    TALLIES,
)
from registry.common.tasks import Pacer
from registry.core.model import InstanceStatus, Lease
from registry.core.overrides import Note
from registry.http import auth, params, server_info
from registry.http.error_handling import no_such_endpoint
from registry.http.page_view import AppRow, Filters, View, filters_from, view_of

_FILES = Path(__file__).parent / "page"
_TEMPLATE = string.Template((_FILES / "status.html").read_text(encoding="utf-8"))
# What GET /page/{name} serves: read once, at import.
_ASSETS = {
    name: ((_FILES / name).read_bytes(), content_type)
    for name, content_type in (("status.js", "text/javascript"), ("status.css", "text/css"))
}

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",  # the page is a moment's state
}
_HEALTH = {  # a peer's `reachable`: None until the first call to it ends
    True: '<span class="health ok">reachable</span>',
    False: '<span class="health bad">unreachable</span>',
    None: '<span class="health">not called yet</span>',
}


# A page is rendered at most once in this many seconds for each way it looks (the registry's
# index, the viewer, the phase): four clients reloading it in a loop at 20 000 instances took a
# core, and heartbeats waited. Lease times and peers' health on it are this much old at most.
PAGE_MAX_AGE = 2.0
RECENT = 20  # overrides and changes listed under the instances
ZONES_SHOWN = 8  # zones named on the summary's card, the largest first


async def page(request: web.Request) -> web.Response:
    """GET /: the status page (HTML), for the filters its query names (page_view.py)."""
    registry, clock, pages = request.app[REGISTRY], request.app[CLOCK], request.app[PAGES]
    admin = auth.may_administer(request)
    base = _base(request)
    filters = filters_from(params.query_string(request))
    phase = request.app[LIFECYCLE].phase
    key = (registry.index, admin, auth.principal(request), phase, base, filters)
    html = pages.get(key, now=clock.monotonic())
    if not isinstance(html, bytes):
        html = (await _render(request, admin, base, filters)).encode()
        pages.put(key, html, now=clock.monotonic())
    return web.Response(body=html, content_type="text/html", charset="utf-8", headers=_HEADERS)


# What X-Forwarded-Prefix may hold: a path of plain segments (`/registry`, `/ops/registry/`).
_PREFIX = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@-]+)+/?")


def _base(request: web.Request) -> str:
    """The page's `<base>` for a reverse proxy in `server.trusted_proxies` that serves it under a
    path prefix and says so in `X-Forwarded-Prefix` (Spring's and Traefik's header); none
    otherwise. The page's URLs are all relative, so a proxy that keeps the trailing slash
    (`/registry/`) needs no header; one that serves `/registry` too needs it."""
    prefix = request.headers.get("X-Forwarded-Prefix")
    if prefix is None or not _PREFIX.fullmatch(prefix) or not _trusted(request):
        return ""
    return f'<base href="{escape(prefix.rstrip("/"))}/">\n'


def _trusted(request: web.Request) -> bool:
    proxies = request.app[SETTINGS].server.trusted_proxies
    if not proxies or request.remote is None:
        return False
    try:
        address = ipaddress.ip_address(request.remote)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


async def _render(request: web.Request, admin: bool, base: str, filters: Filters) -> str:
    registry = request.app[REGISTRY]
    now_ms = request.app[CLOCK].wall_ms()
    tallies = request.app[TALLIES]
    view = await view_of(registry, filters, tallies)
    fields = {
        "base": base,
        "index": registry.index,  # what the page shows, at least: the script watches from here
        "epoch": escape(registry.epoch),
        "watch": "true" if request.app[SETTINGS].reads.watch else "false",
        "viewer": _viewer(request),
        "summary": _summary(request.app, now_ms, tallies.zones(), admin),
        "app_value": escape(filters.app.lower()),
        "status_options": _options([s.value for s in InstanceStatus], filters.status),
        "zone_options": _options(view.zones, filters.zone),
        "view": await _view(request, view, admin, now_ms),
        "recent": _recent(request.app, admin),
    }
    return _TEMPLATE.substitute(fields)


def _options(values: Sequence[str], chosen: object) -> str:
    """`<option>`s, the chosen one selected (and listed, even when no instance has it)."""
    chosen = getattr(chosen, "value", chosen)
    if isinstance(chosen, str) and chosen not in values:
        values = [*values, chosen]
    return "".join(
        f'<option value="{escape(v)}"{" selected" if v == chosen else ""}>{escape(v)}</option>'
        for v in values
    )


async def _view(request: web.Request, view: View, admin: bool, now_ms: int) -> str:
    """The applications that match (a page of them) and the instances that do, listed when
    few enough."""
    f = view.filters
    apps = "".join(_app_row(row, f) for row in view.apps) or (
        '<tr class="empty"><td colspan="4">No application matches.</td></tr>'
    )
    pager = ""
    if view.pages > 1:
        page = min(f.page, view.pages)
        before = f'<a href="{escape(f.query(page=page - 1))}">previous</a> ' if page > 1 else ""
        after = f' <a href="{escape(f.query(page=page + 1))}">next</a>' if page < view.pages else ""
        pager = f'<p class="pager">{before}page {page} of {view.pages}{after}</p>'
    opened = ""
    if f.open is not None:  # the page number is the opened application's instances'
        opened = f' of {escape(f.open)} (<a href="{escape(f.query(open=None, page=1))}">all</a>)'
    if view.instances is None:
        shown = f"{view.matched} of {view.total} instances match"
        instances = (
            f'<p class="note">{view.matched} instances match: open an application, or narrow '
            "the filters, to list them.</p>"
        )
    else:
        shown = f"{view.matched} of {view.total} shown"
        instances = await _instances_table(request, view.instances, admin, now_ms)
    apps_pager, instances_pager = ("", pager) if f.open is not None else (pager, "")
    return (
        f'<p id="shown" class="sub">{shown}</p>'
        f'<table id="apps"><thead><tr><th>Application</th><th>Instances</th><th>By status</th>'
        f"<th>By zone</th></tr></thead><tbody>{apps}</tbody></table>{apps_pager}"
        f"<h3>Instances{opened}</h3>{instances}{instances_pager}"
    )


def _app_row(row: AppRow, filters: Filters) -> str:
    statuses = " ".join(
        f"{_badge(status)} {count}" for status, count in sorted(row.statuses.items())
    )
    zones = " · ".join(f"{escape(z)} {n}" for z, n in sorted(row.zones.items())) or "none"
    link = escape(filters.query(open=row.name, page=1))
    return (
        f'<tr data-app-row="{escape(row.name)}"><td><a href="{link}">{escape(row.name)}</a></td>'
        f"<td>{row.total}</td><td>{statuses}</td><td>{zones}</td></tr>"
    )


async def _instances_table(
    request: web.Request, leases: Sequence[Lease], admin: bool, now_ms: int
) -> str:
    registry = request.app[REGISTRY]
    notes, held = registry.overrides.notes, registry.checks
    checker = request.app[CHECKER]
    # Up to MAX_ROWS rows (500: about 2 ms): let heartbeats in meanwhile.
    rows, pacer = [], Pacer()
    for lease in leases:
        # Why, who and until when are the admin plane's to read (as `overrides` is); so is a
        # check's target and outcome (to a client it would be a port scanner's answer).
        iid = lease.instance.instance_id
        note = notes.of(iid, lease.instance.overridden_status)
        if admin:
            check = _check(checker.status_of(iid)) if checker is not None else ""
        else:
            check = _HELD if iid in held else ""
        rows.append(_row(lease, note if admin else None, check, now_ms=now_ms, admin=admin))
        await pacer.pace()
    empty = (
        f'<tr class="empty"><td colspan="{7 if admin else 6}">No instances registered.</td></tr>'
    )
    actions = "<th>Actions</th>" if admin else ""
    return (
        '<table id="instances"><thead><tr><th>Application</th><th>Instance</th><th>Host</th>'
        f"<th>Status</th><th>Override</th><th>Lease left</th>{actions}</tr></thead>"
        f"<tbody>{''.join(rows) or empty}</tbody></table>"
    )


def _recent(app: web.Application, admin: bool) -> str:
    """The overrides in force (the first RECENT) and the latest changes, newest first."""
    registry, journal = app[REGISTRY], app[JOURNAL]
    notes = registry.overrides.notes
    overrides = []
    for iid, status in list(registry.overrides.items())[:RECENT]:
        note = notes.of(iid, status)
        said = escape(note.reason or "") if admin and note is not None else ""
        overrides.append((escape(iid), _badge(status), said))
    in_force = len(registry.overrides)
    parts = [f"<h2>Overrides in force ({in_force})</h2>"]
    if overrides:
        parts.append(_table(("Instance", "Override", "Reason"), overrides))
    else:
        parts.append('<p class="sub">None.</p>')
    changes = journal.after(max(journal.forgotten_index, registry.index - RECENT)) or []
    rows = [
        (
            _time(entry.at_ms),
            entry.action.value,
            escape(entry.lease.instance.app),
            escape(entry.lease.instance.instance_id),
            _badge(entry.lease.instance.status),
        )
        for entry in reversed(changes)
    ]
    parts.append("<h2>Latest changes</h2>")
    parts.append(
        _table(("When", "Change", "Application", "Instance", "Status"), rows)
        if rows
        else '<p class="sub">None in the journal.</p>'
    )
    return "".join(parts)


async def asset(request: web.Request) -> web.Response:
    """GET /page/{name}: the page's script and style sheet."""
    found = _ASSETS.get(request.match_info["name"])
    if found is None:
        return await no_such_endpoint(request)
    body, content_type = found
    return web.Response(
        body=body,
        content_type=content_type,
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )


def _viewer(request: web.Request) -> str:
    user = auth.principal(request)
    if user is not None:
        role = "may administer" if auth.may_administer(request) else "read only"
        return f"Signed in as <strong>{escape(user)}</strong> ({role})"
    return "Open: no credentials configured (loopback only)"


_HELD = '<div class="sub">held DOWN by a check</div>'


def _check(check: dict[str, Any] | None) -> str:
    """Under the status: the server-side check and its last result, if the instance has one."""
    if check is None:
        return ""
    if "notCheckable" in check:  # the application's check cannot reach this one
        return f'<div class="sub">not checkable: {escape(check["notCheckable"])}</div>'
    last = check["lastResult"] or "not run yet"
    source = " (the application's)" if check["setOn"] == "application" else ""
    return f'<div class="sub">{escape(check["check"])}{source}: {escape(last)}</div>'


def _row(lease: Lease, note: Note | None, check: str, *, now_ms: int, admin: bool) -> str:
    i = lease.instance
    port = i.port.number if i.port.enabled else i.secure_port.number
    left = (lease.last_renewal_ms + lease.duration_ms - now_ms) // 1000
    override = ""
    if i.overridden_status is not InstanceStatus.UNKNOWN:
        override = _badge(i.overridden_status) + _note(note)
    actions = ""
    if admin:  # both buttons; the style sheet shows the one that fits the row's override
        actions = (
            '<td><button type="button" data-action="take-out">Take out of service</button>'
            '<button type="button" data-action="put-back">Put back in service</button></td>'
        )
    return (
        f'<tr data-app="{escape(i.app)}" data-id="{escape(i.instance_id)}"'
        f' data-status="{i.status.value}" data-override="{i.overridden_status.value}">'
        f"<td>{escape(i.app)}</td>"
        f'<td class="id">{escape(i.instance_id)}</td>'
        f'<td>{escape(i.host_name)}<div class="sub">{escape(i.ip_addr)}:{port}</div></td>'
        f'<td class="current">{_badge(i.status)}{check}</td>'
        f'<td class="override">{override}</td>'
        f'<td class="lease">{"expired" if lease.is_expired(now_ms) else f"{left} s"}</td>'
        f"{actions}</tr>"
    )


def _checks_card(app: web.Application, admin: bool) -> str:
    """How many instances are checked and held DOWN; to an admin, also how the checks went and
    which were not run, and why."""
    registry, checker = app[REGISTRY], app[CHECKER]
    assert checker is not None
    held = len(registry.checks)
    stats = checker.stats
    detail = f"{held} held DOWN by their check"
    if admin:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(stats.skipped.items()) if n)
        detail += (
            f" · {stats.checks} checks run, {stats.failures} failed"
            + (f" · not run: {skipped}" if skipped else "")
            + f" · {_count(len(registry.app_checks), 'application')} checked by an admin"
            + (f", {len(checker.unchecked)} not checkable" if checker.unchecked else "")
        )
    checked = _count(len(checker.checked), "instance")
    return _card("Health checks", "warn" if held else "ok", f"{checked} checked", detail)


def _badge(status: InstanceStatus) -> str:
    return f'<span class="status s-{status.value}">{status.value}</span>'


def _note(note: Note | None) -> str:
    """Why, who and when of an override: what the admin said when setting it."""
    if note is None:
        return ""
    said = f'<div class="reason">{escape(note.reason)}</div>' if note.reason else ""
    by = f" by {escape(note.by)}" if note.by else ""
    until = f", until {_time(note.expires_ms)}" if note.expires_ms is not None else ""
    return f'{said}<div class="sub">set{by} {_time(note.set_ms)}{until}</div>'


def _time(ms: int) -> str:
    """A time as people read it; one no calendar holds (a peer's, an earlier release's) as
    its milliseconds, rather than failing the page."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms after 1970"


def _summary(app: web.Application, now_ms: int, zones: Counter[str], admin: bool) -> str:
    """The node's health, as cards: registry, reads, self-preservation, store; then the peers."""
    registry, lifecycle = app[REGISTRY], app[LIFECYCLE]
    health = server_info.node_health(app)
    apps = sum(1 for _ in registry.applications())
    cards = [
        _card(
            "Registry",
            "ok",
            f"{_count(len(registry), 'instance')} in {_count(apps, 'application')}",
            f"index {registry.index} · rendered {_time(now_ms)}",
        ),
        _card(
            "Reads",
            "ok" if lifecycle.serves_reads else "bad",
            "served" if lifecycle.serves_reads else "not served",
            escape(lifecycle.reason),
        ),
        _preservation(health["selfPreservation"], app[PRESERVATION].history),
        _store(health["store"]),
    ]
    if zones:
        largest = zones.most_common(ZONES_SHOWN)
        shown = " · ".join(f"{escape(zone)} {n}" for zone, n in largest)
        more = f" · {len(zones) - ZONES_SHOWN} more" if len(zones) > ZONES_SHOWN else ""
        cards.append(_card("Zones", "ok", _count(len(zones), "zone"), shown + more))
    checker = app[CHECKER]
    if checker is not None and (checker.checked or checker.unchecked):
        cards.append(_checks_card(app, admin))
    membership = health["membership"]
    if membership["dns"] is not None:
        cards.append(_peer_dns(membership["dns"], len(health["peers"])))
    peers = _peers(health["peers"]) + _changes(membership["changes"])
    return f'<div class="cards">{"".join(cards)}</div>{peers}'


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _card(title: str, state: str, headline: str, detail: str) -> str:
    """One fact about the node; `state` (ok, warn, bad) colours it. Callers escape."""
    return (
        f'<div class="card {state}"><h3>{title}</h3><p class="headline">{headline}</p>'
        f'<p class="sub">{detail}</p></div>'
    )


def _preservation(sp: dict[str, Any], history: Sequence[tuple[int, int]]) -> str:
    if not sp["enabled"]:
        headline, state = "off: expired leases are evicted", "ok"
    elif sp["evicting"]:
        headline, state = "evicting expired leases", "ok"
    else:
        headline, state = "eviction held", "warn"
    detail = escape(str(sp["reason"]))
    counted = sp["renews-last-minute"]  # None during the first minute
    detail += f"<br>renewals last minute {'not counted yet' if counted is None else counted}"
    detail += f", threshold {sp['renews-threshold']}"
    detail += (
        f" ({sp['expected-renews-per-minute']:g} expected from {sp['expected-clients']} leases"
    )
    if sp["departed-clients"]:
        detail += f", {sp['departed-clients']} of them evicted since the last recount"
    detail += ")"
    if sp["expired-held"]:
        peers = f", {sp['expired-on-peers']} evicted by peers" if sp["expired-on-peers"] else ""
        detail += f"<br>{sp['expired-held']} expired leases kept{peers}"
    if sp["held-for-seconds"] is not None:
        detail += f", held for {sp['held-for-seconds']} s"
    return _card("Self-preservation", state, headline, detail + _chart(history))


def _chart(history: Sequence[tuple[int, int]]) -> str:
    """The last counting windows' renewals (a line) against the threshold (dashed), as SVG:
    a drop towards the threshold shows before eviction is held."""
    if len(history) < 2:
        return ""
    top = max(max(r, t) for r, t in history) or 1
    width, height = 240, 48
    step = width / (len(history) - 1)

    def line(values: Sequence[int]) -> str:
        return " ".join(
            f"{n * step:.1f},{height - 2 - (height - 4) * v / top:.1f}"
            for n, v in enumerate(values)
        )

    renewals, thresholds = line([r for r, _ in history]), line([t for _, t in history])
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="renewals per window against the threshold, last {len(history)} windows">'
        f'<polyline class="renewals" points="{renewals}"/>'
        f'<polyline class="threshold" points="{thresholds}"/></svg>'
    )


def _store(store: dict[str, Any]) -> str:
    if not store["enabled"]:
        return _card("Store", "ok", "off", "state is kept in memory only (store = false)")
    if store["degraded"]:
        return _card("Store", "bad", "degraded", escape(str(store["last-error"])))
    if store["corrupt-moved-aside"] is not None:
        aside = escape(store["corrupt-moved-aside"]["path"])
        return _card("Store", "warn", "started empty", f"a corrupt database is kept at {aside}")
    return _card("Store", "ok", "writing", f"{escape(store['path'])} · {store['pending']} pending")


def _peer_dns(dns: dict[str, Any], peers: int) -> str:
    name = escape(dns["name"])
    if dns["failingSince"] is not None:
        detail = f"{name}: failing since {_time(dns['failingSince'])}, {escape(dns['lastError'])}"
        return _card(
            "Peers from DNS", "warn", f"lookups fail: keeping {_count(peers, 'peer')}", detail
        )
    found = len(dns["found"])
    detail = f"{name} · last answer {_time(dns['lastSuccessTimestamp'] or 0)}"
    left_out = [f"{count} {why}" for why, count in sorted(dns["refused"].items())]
    if dns["dropped"]:
        left_out.append(f"{dns['dropped']} beyond peers.dns_max_peers ({dns['maxPeers']})")
    if left_out:
        detail += " · not taken: " + ", ".join(left_out)
        return _card("Peers from DNS", "warn", f"{_count(found, 'peer')} named", detail)
    return _card("Peers from DNS", "ok", f"{_count(found, 'peer')} named", detail)


def _changes(changes: list[dict[str, Any]]) -> str:
    """The latest membership changes, newest first."""
    if not changes:
        return ""
    rows = [
        (_time(c["timestamp"]), c["change"], escape(c["peer"]), escape(c["why"]))
        for c in changes[:10]
    ]
    return _table(("When", "Peer change", "Peer", "Why"), rows)


def _peers(peers: list[dict[str, Any]]) -> str:
    if not peers:
        return '<p class="sub">No peers: this node runs alone.</p>'
    rows = [
        (
            escape(p["url"]),
            _HEALTH[p["reachable"]],
            str(p["queueDepth"]),
            f"{p['lagMs']} ms",
            escape(p["lastError"]),
        )
        for p in peers
    ]
    return _table(("Peer", "Health", "Queue", "Lag", "Last error"), rows)


def _table(heads: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """A table of the peers' kind; callers escape the cells."""
    head = "".join(f"<th>{h}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="peers"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
