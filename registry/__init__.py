"""A Eureka-compatible service registry on asyncio.

`create_app` is imported when first asked for: the core (`registry.core`, the rule chain, the
model) loads no aiohttp, so tools and tests that use it alone stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from registry.clock import Clock, FakeClock, SystemClock
from registry.core import Registry
from registry.settings import Settings

if TYPE_CHECKING:
    from registry.app import create_app

__all__ = ["Clock", "FakeClock", "Registry", "Settings", "SystemClock", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from registry.app import create_app

        return create_app
    raise AttributeError(f"module 'registry' has no attribute {name!r}")
