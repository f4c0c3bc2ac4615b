"""Acknowledged means kept: a change that cannot heal by itself is on disk before its answer.

An admin's override and a client's cancel are such changes (a lost registration heals: the
instance's next heartbeat is answered 404 and it registers again; a lost cancel would leave a
dead instance listed until its lease runs out, on every node its peers restored it to). Their
handlers await the store writer's commit: every change pending is written in one transaction,
and a storm of cancels shares its commits rather than queueing one each.
"""

from __future__ import annotations

from aiohttp import web

from registry.appkeys import WRITER
from registry.errors import StoreUnavailable


async def committed(request: web.Request, what: str) -> None:
    """Wait until the change just made is written (when the store is on); StoreUnavailable,
    saying that `what` is in force here but not on disk, when it cannot be."""
    writer = request.app[WRITER]
    if writer is None:
        return
    try:
        await writer.commit()
    except Exception as exc:
        raise StoreUnavailable(
            f"the {what} is in force on this node (and sent to its peers) but could not be "
            f"written to disk ({type(exc).__name__}: {exc}); it is written when the store "
            "recovers, and lost if this node stops before then"
        ) from None
