"""What the status page shows for one request's filters (registry/http/status_page.py renders
it): the applications that match, a page of them at a time, each with its instances counted
by status and by zone; and the instances that match, listed when there are few enough to
read (MAX_ROWS), else counted; an opened application's, MAX_ROWS a page. Filters come as
query parameters, so a view can be linked:

    ?app=ORD      applications whose name contains this (any case)
    ?status=DOWN  instances with this status (and the applications that have some)
    ?zone=eu-1a   instances in this zone (registry/core/zones.py)
    ?open=ORDERS  one application's instances, listed however many match
    ?page=2       the applications' page, or the opened application's instances' page

The instances are counted by application, status and zone once for each registry index
(`Tallies`: a pass over 100 000 instances giving the loop turns, about 0.1 s), so a filter
costs a look at the applications, and the instances are read only to be listed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qsl, urlencode

from registry.common.tasks import Pacer
from registry.core.model import InstanceStatus, Lease
from registry.core.registry import Registry
from registry.core.zones import zone_of
from registry.errors import BadInput, shown

MAX_ROWS = 500  # instances listed at once
APPS_PER_PAGE = 100
MAX_FILTER = 256  # characters of a filter's text


@dataclass(frozen=True, slots=True)
class Filters:
    app: str = ""  # upper case; "": any
    status: InstanceStatus | None = None
    zone: str | None = None
    open: str | None = None  # an application, exactly (upper case)
    page: int = 1

    def query(self, **changes: object) -> str:
        """These filters (with `changes`) as a link's query string."""
        f = replace(self, **changes)  # type: ignore[arg-type]
        pairs = [
            ("app", f.app),
            ("status", f.status.value if f.status else ""),
            ("zone", f.zone or ""),
            ("open", f.open or ""),
            ("page", str(f.page) if f.page > 1 else ""),
        ]
        return "?" + urlencode([(k, v) for k, v in pairs if v])


def filters_from(query: str) -> Filters:
    """The filters of a page request's query string; BadInput for one that makes no sense."""
    try:
        values = dict(parse_qsl(query, keep_blank_values=True, errors="strict"))
    except UnicodeDecodeError:
        raise BadInput("query", "its percent escapes are not UTF-8") from None
    for key, value in values.items():
        if len(value) > MAX_FILTER:
            raise BadInput(key, f"longer than {MAX_FILTER} characters")
    status = None
    if values.get("status"):
        try:
            status = InstanceStatus(values["status"])
        except ValueError:
            raise BadInput("status", f"{shown(values['status'])} is not a status") from None
    page = values.get("page") or "1"
    if not (page.isascii() and page.isdigit()) or int(page) < 1:
        raise BadInput("page", f"{shown(page)} is not a page number")
    return Filters(
        app=values.get("app", "").strip().upper(),
        status=status,
        zone=values.get("zone") or None,
        open=(values.get("open") or "").upper() or None,
        page=int(page),
    )


@dataclass(slots=True)
class AppRow:
    name: str
    total: int = 0
    statuses: Counter[InstanceStatus] = field(default_factory=Counter)
    zones: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class View:
    filters: Filters
    apps: list[AppRow]  # this page of the matching applications
    apps_matched: int
    pages: int
    instances: list[Lease] | None  # this page of them; None: more match than are listed
    matched: int  # instances that match
    total: int  # instances registered
    zones: list[str]  # every zone an instance is in, for the zone filter


class Tallies:
    """Each application's instances counted by (status, zone), kept for one registry index:
    typing in the filters asks for a view at every keystroke, and between changes these need
    no pass over the registry again."""

    def __init__(self) -> None:
        self._index = -1
        self._epoch = ""
        self.by_app: dict[str, Counter[tuple[InstanceStatus, str | None]]] = {}

    async def of(self, registry: Registry) -> dict[str, Counter[tuple[InstanceStatus, str | None]]]:
        if (registry.index, registry.epoch) != (self._index, self._epoch):
            pacer, by_app = Pacer(), {}
            index, epoch = registry.index, registry.epoch
            for name, leases in list(registry.applications()):
                by_app[name] = Counter(
                    (lease.instance.status, zone_of(lease.instance)) for lease in leases
                )
                await pacer.pace()
            # What the loop's turns let change meanwhile is counted at the next look.
            self.by_app, self._index, self._epoch = by_app, index, epoch
        return self.by_app

    def zones(self) -> Counter[str]:
        """Instances by zone, as last counted (instances in none left out)."""
        zones: Counter[str] = Counter()
        for counts in self.by_app.values():
            for (_, zone), n in counts.items():
                if zone is not None:
                    zones[zone] += n
        return zones


async def view_of(registry: Registry, filters: Filters, tallies: Tallies) -> View:
    counted = await tallies.of(registry)
    apps: list[AppRow] = []
    zones: set[str] = set()
    matched = total = 0
    for name, counts in counted.items():
        row = AppRow(name)
        hits = 0
        named = filters.app in name and (filters.open is None or name == filters.open)
        for (status, zone), n in counts.items():
            row.total += n
            row.statuses[status] += n
            if zone is not None:
                row.zones[zone] += n
                zones.add(zone)
            if (
                named
                and (filters.status is None or status is filters.status)
                and (filters.zone is None or zone == filters.zone)
            ):
                hits += n
        total += row.total
        if hits:
            apps.append(row)
            matched += hits
    apps.sort(key=lambda row: row.name)
    instances = None
    if filters.open is not None or matched <= MAX_ROWS:
        listed = sorted(
            (
                lease
                for row in apps
                for lease in registry.application(row.name)
                if _matches(lease, filters)
            ),
            key=lambda x: (x.instance.app, x.instance.instance_id),
        )
        if filters.open is not None:  # paged: the page number is the instances'
            pages = max(1, -(-len(listed) // MAX_ROWS))
            start = (min(filters.page, pages) - 1) * MAX_ROWS
            return View(
                filters,
                apps,
                len(apps),
                pages,
                listed[start : start + MAX_ROWS],
                matched,
                total,
                sorted(zones),
            )
        instances = listed
    pages = max(1, -(-len(apps) // APPS_PER_PAGE))
    start = (min(filters.page, pages) - 1) * APPS_PER_PAGE
    return View(
        filters,
        apps[start : start + APPS_PER_PAGE],
        len(apps),
        pages,
        instances,
        matched,
        total,
        sorted(zones),
    )


def _matches(lease: Lease, filters: Filters) -> bool:
    instance = lease.instance
    if filters.status is not None and instance.status is not filters.status:
        return False
    return filters.zone is None or zone_of(instance) == filters.zone
