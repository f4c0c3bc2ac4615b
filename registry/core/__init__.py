"""The core: what the registry holds and the commands that change it. Pure: no IO, no awaits
in a command, time passed in; it imports nothing of the read side, HTTP, the store or peers.

- `model`: instances as clients describe them, their leases, and the change events.
- `registry`: `Registry`, the only owner of state; its commands tell its `Subscriber`s.
- `overrides`: admins' status overrides, their notes (why, who, until when) and removals.
- `tombstones`: removals remembered, so that no late copy brings an instance back.
- `preservation` and `eviction`: when leases that stopped renewing may go, and the sweep.
- `quotas`: instances per client credential.
The status rule chain they consult is the top-level `rules` package.
"""
