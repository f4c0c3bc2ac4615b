"""The read side: fetch documents kept ready as the registry changes, never built per request.

Each change event of the core flows to the `journal` (recent changes, for deltas), the
`catalog` (every application's instances encoded, in `encoded` pieces), the `cache` (finished
documents, dropped when a change touches them) and the `feed`, which wakes long-polls and hands
caught-up watch streams to the `fanout` (one subscription per filter, an `interest`); the
feed's `watchers` count the open streams by client, against their caps. `payloads` puts a full
fetch or a delta together from those pieces in one synchronous step; `deflate` gives its gzip
form from pieces compressed once.
Nothing here imports HTTP: the handlers in `registry.http` read from these parts.
"""
