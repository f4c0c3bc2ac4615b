"""Peer replication (contract 11): what a node sends its peers, and what it takes from them.

`cluster` holds the peer list and takes the commands this node received (the registry tells it,
`on_replicate`), fanning them out to one `dispatcher` per peer, which queues them (`pending`),
encodes them when sent (`items`) and talks HTTP (`transport`). `startup_sync` copies a peer's
registry at start-up and `anti_entropy` repairs differences found by comparing `digest`s, both
through `merge`. What peers send this node is read and applied by
`registry/http/peer_api.py`. Peers found by DNS (`peers.dns_name`) are screened by
`peer_addresses` and capped by `membership`; `transport` signs every request
(registry/codec/peer_signature.py) rather than send the peer credential.
"""
