"""Server-side health checks: an instance asks for one in its metadata, and the registry
checks it and holds it DOWN while it fails.

`spec` reads what check an instance asks for and where it may go (its own address and port
only); `probe` runs one check (HTTP GET or TCP connect, bounded in time); `checker` keeps every
checked instance's schedule, runs checks with bounded concurrency, a global rate and jitter,
counts failures and successes in a row, and tells the core (`Registry.check_failed`,
`check_passed`: registry/core/checks.py holds the verdicts).
"""
