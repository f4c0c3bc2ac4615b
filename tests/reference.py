"""Fetch documents encoded whole from the registry, as they were before documents were put
together from kept pieces: what the cache's answers are checked against, byte for byte."""

from __future__ import annotations

from collections.abc import Iterable
from xml.sax.saxutils import escape

import orjson

from registry.codec import Format, compact, json_codec, xml_codec
from registry.common.hashcode import reconcile_hash
from registry.core.model import LeaseRecord
from registry.core.registry import Registry
from registry.reads.journal import DeltaJournal, Entry

Apps = Iterable[tuple[str, Iterable[LeaseRecord]]]


def applications(fmt: Format, apps: Apps, *, version: str, hashcode: str) -> bytes:
    if fmt.is_json:
        return orjson.dumps(
            {
                "applications": {
                    "versions__delta": version,
                    "apps__hashcode": hashcode,
                    "application": [_application_dict(name, leases, fmt) for name, leases in apps],
                }
            }
        )
    out = [
        f"<applications><versions__delta>{escape(version)}</versions__delta>"
        f"<apps__hashcode>{escape(hashcode)}</apps__hashcode>".encode()
    ]
    out.extend(_application_xml(name, leases, fmt) for name, leases in apps)
    out.append(b"</applications>")
    return b"".join(out)


def full(registry: Registry, fmt: Format) -> bytes:
    return applications(fmt, registry.applications(), version="1", hashcode=_hash(registry))


def delta(registry: Registry, journal: DeltaJournal, fmt: Format, *, now_ms: int) -> bytes:
    journal.purge(now_ms=now_ms)
    events = journal.after(journal.forgotten_index) or []
    return changes(registry, events, fmt)


def changes(registry: Registry, events: Iterable[Entry], fmt: Format) -> bytes:
    return applications(fmt, grouped(events), version=str(registry.index), hashcode=_hash(registry))


def application(registry: Registry, name: str, fmt: Format) -> bytes:
    leases = registry.application(name)
    if fmt.is_json:
        return orjson.dumps({"application": _application_dict(name, leases, fmt)})
    return _application_xml(name, leases, fmt)


def vip(registry: Registry, address: str, fmt: Format, *, secure: bool) -> bytes:
    matches = []
    for name, leases in registry.applications():
        chosen = [lease for lease in leases if address in _vips(lease, secure)]
        if chosen:
            matches.append((name, chosen))
    statuses = (lease.instance.status for _, chosen in matches for lease in chosen)
    return applications(fmt, matches, version="-1", hashcode=reconcile_hash(statuses))


def grouped(events: Iterable[Entry]) -> list[tuple[str, list[LeaseRecord]]]:
    """The latest snapshot of each instance, grouped by app in first-seen order."""
    latest: dict[tuple[str, str], LeaseRecord] = {}
    for event in events:
        instance = event.lease.instance
        latest[(instance.app, instance.instance_id)] = event.lease
    by_app: dict[str, list[LeaseRecord]] = {}
    for (app, _), snapshot in latest.items():
        by_app.setdefault(app, []).append(snapshot)
    return list(by_app.items())


def _hash(registry: Registry) -> str:
    """Counted afresh, not from the registry's kept counts."""
    return reconcile_hash(lease.instance.status for lease in registry.leases())


def _application_dict(name: str, leases: Iterable[LeaseRecord], fmt: Format) -> dict[str, object]:
    if fmt is Format.JSON_COMPACT:
        return {"name": name, "instance": [compact.instance_dict(x.instance) for x in leases]}
    return {"name": name, "instance": [json_codec.instance_dict(lease) for lease in leases]}


def _application_xml(name: str, leases: Iterable[LeaseRecord], fmt: Format) -> bytes:
    encode = compact.XML.instance_item if fmt is Format.XML_COMPACT else xml_codec.instance_item
    items = b"".join(encode(lease) for lease in leases)
    return f"<application><name>{escape(name)}</name>".encode() + items + b"</application>"


def _vips(lease: LeaseRecord, secure: bool) -> list[str]:
    address = lease.instance.secure_vip_address if secure else lease.instance.vip_address
    return address.split(",") if address else []
