"""The credentials this node knows, kept only as digests, and what a presented one proves.

A peer proves it holds the peer credential by signing its request with a key derived from it
(registry/codec/peer_signature.py), or, as stock Eureka servers do, by sending it as HTTP
Basic. A presented credential is hashed and compared with every configured one in constant
time, so the timing shows neither which one matched nor how long any is; credentials are never
logged.
Which routes take which roles is the HTTP layer's (registry/http/auth.py).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac

from registry.codec.peer_signature import peer_key
from registry.settings import Settings, client_applications, client_vip_addresses


class Role(enum.Flag):
    """What a credential proved: a request's roles are every match's."""

    NONE = 0
    CLIENT = enum.auto()
    ADMIN = enum.auto()
    PEER = enum.auto()


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


class Credentials:
    """The configured credentials, kept only as digests, and what a request's header proves."""

    def __init__(self, settings: Settings) -> None:
        self.update(settings)

    def update(self, settings: Settings) -> None:
        """Take `settings`' credentials instead (a reload): the next request is checked
        against them."""
        basic = [(c, Role.CLIENT) for c in settings.credentials.clients]
        basic += [(c, Role.ADMIN) for c in settings.credentials.admins]
        if settings.credentials.peer:
            basic.append((settings.credentials.peer, Role.PEER))
        self._basic = [(_digest(c.encode()), role) for c, role in basic]
        self._tokens = [
            (_digest(t.encode()), Role.ADMIN) for t in settings.credentials.admin_tokens
        ]
        # What a peer's signed request is checked with (registry/http/peer_signatures.py)
        credential = settings.credentials.peer
        self.peer_key = peer_key(credential) if credential else None
        self.peer_user = credential.partition(":")[0]
        # Client users bound to applications (`credentials.client_applications`); others are
        # not bound.
        self.applications = client_applications(settings.credentials.client_applications)
        # The names their instances may give as VIP addresses: their applications' and those
        # `credentials.client_vip_addresses` adds (upper case: compared whatever the case).
        listed = client_vip_addresses(settings.credentials.client_vip_addresses)
        self.vip_addresses = {
            user: apps | listed.get(user, frozenset()) for user, apps in self.applications.items()
        }
        self.configured = Role.NONE
        for _, role in self._basic:
            self.configured |= role
        if self._tokens:
            self.configured |= Role.ADMIN

    def check(self, authorization: str) -> tuple[Role, str | None]:
        """The roles the `Authorization` header proves ("" when there is none), and the user
        name it carries."""
        scheme, _, value = authorization.strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "basic":
            try:
                presented = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                return Role.NONE, None
            roles = _matching(_digest(presented), self._basic)
            # A match is a configured credential's own bytes: UTF-8 (settings are text)
            user = presented.partition(b":")[0].decode() if roles else None
            return roles, user
        if scheme == "bearer":  # a blank token matches none: settings refuse empty ones
            roles = _matching(_digest(value.strip().encode()), self._tokens)
            return roles, ("token" if roles else None)
        return Role.NONE, None


def _matching(digest: bytes, known: list[tuple[bytes, Role]]) -> Role:
    """Every match, each compared in constant time, without stopping at the first."""
    roles = Role.NONE
    for candidate, role in known:
        if hmac.compare_digest(candidate, digest):
            roles |= role
    return roles
