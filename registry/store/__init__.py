"""Durable state in SQLite: the registry, admin overrides and the registry index."""
