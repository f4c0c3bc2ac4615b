"""A Eureka-compatible service registry on asyncio."""

from registry.app import create_app
from registry.clock import Clock, FakeClock, SystemClock
from registry.core import Registry
from registry.settings import Settings

__all__ = ["Clock", "FakeClock", "Registry", "Settings", "SystemClock", "create_app"]
