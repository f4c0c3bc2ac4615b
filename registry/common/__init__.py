"""What the server and the asyncio client (`registry.client`) share, and nothing else:
`clock` (the one source of time, fake in tests), `tasks` (background loops, pacing) and
`hashcode` (the reconcile hash a delta is checked with). These import nothing of either.
"""
