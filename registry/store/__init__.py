"""Durable state in SQLite: the registry, admin overrides, tombstones and the registry index.

The `writer` subscribes to the core and writes its changes behind, in batches (a cancel's or an
override's 200 waits for its commit), through the `sqlite` store, which does the disk work in
aiosqlite's thread; `record` is the compact stored form of an instance and `schema` the
version and its migrations. At start-up `lock` holds the data directory for this process and
`restore` gives the registry what the store kept, before the node serves.
"""
