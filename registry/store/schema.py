"""The store's schema: one version number and the forward migrations that reach it.

A database at version N is brought to `VERSION` by running the steps of N+1, N+2, ... in order,
each in its own transaction with the version it reaches. A database newer than `VERSION` was
written by a newer server and is refused rather than misread.
"""

from __future__ import annotations

VERSION = 7

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # Registry-wide values: the registry index and epoch, so indexes survive a restart.
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        # One row per registered instance with its lease's timestamps. `doc` holds the compact
        # form (registry/store/record.py, a JSON array); rows written before it hold the
        # instance as `GET apps` shows it, read back by the lenient wire reader. (These two
        # lease timestamps are not read back; schema 4 adds the one that is.)
        """CREATE TABLE instances (
            app TEXT NOT NULL,
            id TEXT NOT NULL,
            doc BLOB NOT NULL,
            registration_ms INTEGER NOT NULL,
            service_up_ms INTEGER NOT NULL,
            PRIMARY KEY (app, id)
        )""",
        # Admin overrides in force, with why, when and until when.
        """CREATE TABLE overrides (
            id TEXT PRIMARY KEY,
            app TEXT NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            set_ms INTEGER NOT NULL,
            expires_ms INTEGER
        )""",
        # The audit trail: every change to an override (set, deleted, expired, instance cancelled).
        """CREATE TABLE override_history (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            at_ms INTEGER NOT NULL,
            action TEXT NOT NULL,
            app TEXT NOT NULL,
            id TEXT NOT NULL,
            status TEXT,
            reason TEXT,
            expires_ms INTEGER
        )""",
        "CREATE INDEX override_history_at ON override_history (at_ms)",
    ),
    2: (
        # Who: the admin's user name, once credentials are configured.
        "ALTER TABLE overrides ADD COLUMN set_by TEXT",
        "ALTER TABLE override_history ADD COLUMN actor TEXT",
    ),
    3: (
        # The compact form nests the data center and the ports as the model does (msgspec
        # reads it into the struct): a flat array of 29 fields, as releases before wrote it,
        # is rewritten. Its data center metadata was null when empty.
        """UPDATE instances SET doc = json_array(
            doc -> 0, doc -> 1, doc -> 2, doc -> 3,
            json_array(doc -> 4, doc -> 5, json(coalesce(doc ->> 6, '{}'))),
            doc -> 7, doc -> 8,
            json_array(doc -> 9, doc -> 10), json_array(doc -> 11, doc -> 12),
            doc -> 13, doc -> 14, doc -> 15, doc -> 16, doc -> 17, doc -> 18, doc -> 19,
            doc -> 20, doc -> 21, doc -> 22, doc -> 23, doc -> 24, doc -> 25, doc -> 26,
            doc -> 27, doc -> 28)
        WHERE json_valid(doc) AND json_type(doc) = 'array' AND json_array_length(doc) = 29""",
    ),
    4: (
        # A restored lease keeps its last renewal (as of the row's last write: heartbeats are
        # not written), the evidence peers weigh against their removals of it.
        "ALTER TABLE instances ADD COLUMN last_renewal_ms INTEGER NOT NULL DEFAULT 0",
        "UPDATE instances SET last_renewal_ms = registration_ms",
        # Removals remembered (registry/core/tombstones.py): the lastDirtyTimestamp removed, and
        # when.
        """CREATE TABLE tombstones (
            app TEXT NOT NULL,
            id TEXT NOT NULL,
            dirty_ms INTEGER NOT NULL,
            at_ms INTEGER NOT NULL,
            PRIMARY KEY (app, id)
        )""",
    ),
    5: (
        # A server-side check holding the instance DOWN (registry/core/checks.py), as JSON
        # (the client's claim, since when, why); NULL: none. A restart keeps it held, so the
        # check's recovery releases it.
        "ALTER TABLE instances ADD COLUMN check_hold TEXT",
    ),
    6: (
        # Admins' checks on applications (registry/core/app_checks.py), as peers exchange
        # them: {"app", "check", "interval", "timeout", "path", "setAt", "setBy"}, or a
        # removal {"app", "removedAt"}, which is kept so that an older check never returns.
        "CREATE TABLE app_checks (app TEXT PRIMARY KEY, doc TEXT NOT NULL)",
    ),
    7: (
        # Whether a removal was an eviction (1) rather than a cancel (0): for peers, evidence
        # their own eviction weighs, not an order (registry/core/preservation.py). Rows written
        # before are taken as evidence: a cancel so taken only waits for the lease to run out.
        "ALTER TABLE tombstones ADD COLUMN expired INTEGER NOT NULL DEFAULT 1",
        # Whether the instance's client had renewed: a restart expects renewals from those
        # alone. Rows written before were all taken so.
        "ALTER TABLE instances ADD COLUMN renewed INTEGER NOT NULL DEFAULT 1",
    ),
}
