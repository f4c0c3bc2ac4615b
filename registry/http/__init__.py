"""The HTTP side: handlers parse and validate, the core decides, the read side answers.

`routes` is the table of every endpoint (its plane, its handler, its docs); `auth` and
`throttle` guard it, `answering` times and answers each request, `error_handling` maps the
errors to statuses. One module per plane: `instance_api` (what instances say of themselves:
register, heartbeat, cancel), `discovery_api` and `watch_api` (fetches, deltas, long-polls,
streams), `admin_api` (overrides, metadata), `peer_api` (what peers send), `status_page`,
`server_info` and `metrics_api`. `negotiation` picks a format and writes documents;
`request_body`, `params` and `durability` read bodies, read parameters and wait for the disk;
`connections`, `credentials`, `peer_signatures` and `ratelimit` are what a connection and a
caller are held to.
"""
