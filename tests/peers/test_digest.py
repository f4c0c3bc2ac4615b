"""Per-application digests are kept, and only what changed is digested again: at 100 000
instances a recount of everything after any change held the loop for a quarter of a second."""

from __future__ import annotations

import pytest

from peers import digest as digest_module
from peers.digest import Digests
from registry.core.registry import Registry
from tests.factories import T0, make


@pytest.fixture
def digested(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The applications digested, in order, as `Digests` asks."""
    calls: list[str] = []
    real = digest_module.digest

    def counted(leases, removed=()):  # type: ignore[no-untyped-def]
        leases = list(leases)
        calls.append(leases[0].instance.app if leases else "(removals only)")
        return real(leases, removed)

    monkeypatch.setattr(digest_module, "digest", counted)
    return calls


async def test_only_the_changed_application_is_digested_again(digested: list[str]) -> None:
    registry = Registry()
    digests = Digests(registry)
    registry.subscribe(digests)
    for app in ("A", "B", "C"):
        for n in range(3):
            registry.register(make(f"{app}-{n}", app=app), now_ms=T0)
    first = dict(await digests.current())
    assert ["A", "B", "C"] == sorted(digested)
    digested.clear()
    assert first == await digests.current()  # nothing changed: nothing digested
    assert [] == digested
    registry.cancel("B", "B-1", now_ms=T0 + 1)
    after = await digests.current()
    assert ["B"] == digested
    assert (first["A"], first["C"]) == (after["A"], after["C"]) and first["B"] != after["B"]
