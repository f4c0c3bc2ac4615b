"""The registry's errors. The HTTP layer maps each class to a status in one table.

RegistryError               500  a bug: never raised on purpose for bad input
├── BadInput                400  the request is malformed; nothing changed
│   ├── UnsupportedMediaType 415  a body in a format we do not read
│   ├── BodyTooLarge        413  a body larger than `limits.max_body_bytes`
│   └── BodyTooSlow         408  a body that did not arrive in time
├── Unauthorized            401  no credential, or one this node does not know (a challenge)
├── Forbidden               403  a credential of another plane, a browser sending for another
│                                site, a name that is not loopback while no credentials are set
├── TooManyRequests         429  a client fetching faster than its bucket allows (Retry-After)
├── UnknownInstance         404  no such lease (or it expired, or must re-register)
├── UnknownApplication      404  no instance of that application
├── AmbiguousInstance       409  an instance id asked for without its application, which
│                                more than one application holds
├── NotServed               403  a read this node does not serve now (delta disabled)
│   └── NotSynced           403  ... because it has not copied the registry from its peers yet
├── IndexExpired            410  a watch or long-poll asks for changes no longer kept
├── StoreUnavailable        503  an override is in force but could not be written to disk yet
├── StaleReplica            409  a peer holds older data than ours; it gets our copy (*)
├── LimitReached            403  a registration past limits.max_applications or its
│                                application's cap
├── MemoryFull              503  a new instance while memory is above its watermark
└── RemovedHere             409  a peer's copy of an instance removed here after it (*)

(*) in registry/core/conflicts.py: they carry the core's copy or removal, and this module
knows nothing of the core.

An error may carry response headers (`headers`): the 401's challenge, the 429's Retry-After.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


class RegistryError(Exception):
    headers: Sequence[tuple[str, str]] = ()  # added to the error's response

    @property
    def code(self) -> str:
        """The snake_case name clients see in the error body, e.g. `unknown_instance`."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()


def shown(value: object, limit: int = 64) -> str:
    """`value` as an error quotes it, cut at `limit` characters: a refusal never echoes a
    5 000-digit value whole."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def digits(text: str) -> bool:
    """Whether `text` is ASCII digits alone: `str.isdecimal` and `int` also take other
    scripts' digits (full-width ones, say), which no client means as a number."""
    return text.isascii() and text.isdecimal()


class BadInput(RegistryError):
    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


class UnsupportedMediaType(BadInput):
    pass


class BodyTooLarge(BadInput):
    pass


class BodyTooSlow(BadInput):
    pass


class Unauthorized(RegistryError):
    def __init__(self, detail: str, *, challenges: Sequence[str]) -> None:
        super().__init__(detail)
        self.headers = [("WWW-Authenticate", challenge) for challenge in challenges]


class Forbidden(RegistryError):
    """`reason`, when given, is the code clients see (`cross_site`, `not_loopback`)."""

    def __init__(self, detail: str, *, reason: str = "forbidden") -> None:
        super().__init__(detail)
        self.reason = reason

    @property
    def code(self) -> str:
        return self.reason


class TooManyRequests(RegistryError):
    def __init__(self, detail: str, *, retry_after: str) -> None:
        super().__init__(detail)
        self.headers = [("Retry-After", retry_after)]


class UnknownInstance(RegistryError):
    pass


class UnknownApplication(RegistryError):
    pass


class AmbiguousInstance(RegistryError):
    """`instances/{id}` when more than one application holds the id: answering one of them
    would let any application that registers the id answer for another's instance."""


class NotServed(RegistryError):
    pass


class NotSynced(NotServed):
    pass


class IndexExpired(RegistryError):
    pass


class StoreUnavailable(RegistryError):
    pass


class LimitReached(RegistryError):
    """A client's registration of a new instance past `limits.max_applications` or
    `limits.max_instances_per_application`: memory is what a registry runs out of."""


class MemoryFull(RegistryError):
    """A client's registration of a new instance while the process's memory is above its
    watermark (registry/health/memory.py): refused, for the clients to retry, rather than killed."""

    headers = (("Retry-After", "30"),)
