"""The HTTP API: handlers parse and validate, the registry decides."""

from registry.http.routes import add_routes

__all__ = ["add_routes"]
