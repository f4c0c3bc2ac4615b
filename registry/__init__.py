"""A Eureka-compatible service registry on asyncio.

The names below are imported when first asked for, so that `import registry.client` (the
asyncio client, a product of its own) loads nothing of the server, and the core loads no
aiohttp. Where things are: `docs/architecture.md`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from registry.app import create_app
    from registry.common.clock import Clock, FakeClock, SystemClock
    from registry.core.registry import Registry
    from registry.settings import Settings

_WHERE = {
    "Clock": "registry.common.clock",
    "FakeClock": "registry.common.clock",
    "SystemClock": "registry.common.clock",
    "Registry": "registry.core.registry",
    "Settings": "registry.settings",
    "create_app": "registry.app",
}
__all__ = ["Clock", "FakeClock", "Registry", "Settings", "SystemClock", "create_app"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'registry' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
