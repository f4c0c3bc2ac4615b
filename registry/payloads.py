"""The fetch documents, built from the registry in one synchronous step.

Because nothing can change the registry while one of these runs, every payload and its
`apps__hashcode` describe the same state. The response cache keeps what these return.
"""

from __future__ import annotations

from registry.codec import Format, encode_application, encode_applications
from registry.core import Registry
from registry.hashcode import reconcile_hash
from registry.journal import DeltaJournal
from registry.model import Lease, LeaseSnapshot

# A full fetch always says "1": clients treat "-1" as "never fetch deltas" (contract 9.3).
FULL_FETCH_VERSION = "1"
VIP_VERSION = "-1"


def full_registry(registry: Registry, fmt: Format) -> bytes:
    """Every application with all its instances, expired-but-not-evicted included."""
    return encode_applications(
        fmt,
        registry.applications(),
        version=FULL_FETCH_VERSION,
        hashcode=registry.reconcile_hash(),
    )


def delta(registry: Registry, journal: DeltaJournal, fmt: Format, *, now_ms: int) -> bytes:
    """Recent changes, versioned by the registry index, hashed over the whole registry."""
    return encode_applications(
        fmt,
        journal.recent(now_ms=now_ms),
        version=str(registry.index),
        hashcode=registry.reconcile_hash(),
    )


def changes(
    registry: Registry, changed: list[tuple[str, list[LeaseSnapshot]]], fmt: Format
) -> bytes:
    """A delta of the changes a long-poll asked for, versioned and hashed like `delta`."""
    return encode_applications(
        fmt, changed, version=str(registry.index), hashcode=registry.reconcile_hash()
    )


def application(registry: Registry, name: str, fmt: Format) -> bytes:
    return encode_application(fmt, name, registry.application(name))


def vip_matches(registry: Registry, address: str, *, secure: bool) -> list[tuple[str, list[Lease]]]:
    """Each application's instances whose comma-separated (secure) VIP address names `address`."""
    matches: list[tuple[str, list[Lease]]] = []
    for name, leases in registry.applications():
        chosen = [lease for lease in leases if address in _vips(lease, secure)]
        if chosen:
            matches.append((name, chosen))
    return matches


def vip(matches: list[tuple[str, list[Lease]]], fmt: Format) -> bytes:
    """The VIP document of `matches`, hashed over its own content."""
    hashcode = reconcile_hash(lease.instance.status for _, chosen in matches for lease in chosen)
    return encode_applications(fmt, matches, version=VIP_VERSION, hashcode=hashcode)


def _vips(lease: Lease, secure: bool) -> list[str]:
    address = lease.instance.secure_vip_address if secure else lease.instance.vip_address
    return address.split(",") if address else []
