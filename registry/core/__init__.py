"""The core: what the registry holds and the commands that change it. Pure: no IO, no awaits
in a command, time passed in; it imports nothing of the read side, HTTP, the store, the codecs
or peers.

- `model`: instances as clients describe them, their leases, and the change events.
- `registry`: `Registry`, the only owner of state: the lease table, the commands clients send
  and the reads. Its other commands are in parts, each a base of the class (`part` declares
  what they call of it): `override_commands` (admins' overrides), `check_commands` (health
  checks' holds and admins' checks), `removals` (evictions, and peers' removals, copies and
  renewals) and `warm_restart` (a store's state taken back); `registration` holds what a
  registration makes of an instance, for `register` and the warm restart alike.
- `subscriber`: how the registry tells the parts that follow it (`Registry.subscribe`).
- `overrides`: the overrides' state: the status each holds, notes (why, who, until when),
  removals, and the telling of their changes.
- `tombstones`: removals remembered, so that no late copy brings an instance back.
- `preservation` and `eviction`: when leases that stopped renewing may go, and the sweep.
- `quotas`: instances per client credential.
The status rule chain they consult is the top-level `rules` package.
"""
