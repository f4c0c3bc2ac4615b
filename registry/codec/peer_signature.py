"""How our nodes prove to each other that they hold the peer credential, without sending it.

Each request to a peer carries, instead of the credential itself,

    Authorization: Registry-Peer ts=<ms>,nonce=<random>,body=<sha256 of the body>,sig=<hmac>

`sig` is HMAC-SHA256, keyed by a key derived from `credentials.peer`, over the method, the
`Host` the request was sent to, its path and query as sent, the time, the nonce and the
body's digest. The secret never crosses the wire, so a listener a DNS answer chose learns
nothing it can reuse: a signature is good for that one request, to that one address, within
`leases.max_clock_skew` of its time, and once (the receiver remembers the nonces it has seen: see
registry/http/peer_signatures.py). Values are unpadded base64url; the body's digest is of the
bytes on the wire, before any Content-Encoding is undone.

Stock Eureka servers and our releases before this one know only HTTP Basic: a receiver still
takes the peer credential that way; a sender sends Basic only where
`credentials.peer_basic_fallback` allows (peers/transport.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SCHEME = "Registry-Peer"
_VERSION = b"registry-peer-v1"
_FIELDS = ("ts", "nonce", "body", "sig")
_MAX_NONCE = 64  # characters: ours are 22


def peer_key(credential: str) -> bytes:
    """The signing key of `credentials.peer` (`user:password`): derived, so that the key is
    no stored digest of the credential, nor the credential itself."""
    return hashlib.sha256(_VERSION + b"\0" + credential.encode()).digest()


def body_digest(body: bytes) -> str:
    return _b64(hashlib.sha256(body).digest())


@dataclass(frozen=True, slots=True)
class Signed:
    """What a `Registry-Peer` header claims."""

    ts_ms: int
    nonce: str
    body: str  # the body's digest, as body_digest() gives it
    sig: bytes


def sign(key: bytes, *, method: str, host: str, target: str, body: bytes, now_ms: int) -> str:
    """The `Authorization` header value for one request (`target`: its path and query, as
    sent on the request line)."""
    nonce = secrets.token_urlsafe(16)
    digest = body_digest(body)
    sig = _mac(key, method, host, target, now_ms, nonce, digest)
    return f"{SCHEME} ts={now_ms},nonce={nonce},body={digest},sig={_b64(sig)}"


def parse(value: str) -> Signed | None:
    """The claims of a `Registry-Peer` header's value (the part after the scheme); None when
    it is not well formed."""
    fields: dict[str, str] = {}
    for part in value.split(","):
        name, equals, text = part.strip().partition("=")
        if not equals or name not in _FIELDS or name in fields:
            return None
        fields[name] = text
    if set(fields) != set(_FIELDS):
        return None
    ts, nonce = fields["ts"], fields["nonce"]
    if not (ts.isascii() and ts.isdecimal() and len(ts) <= 15):
        return None
    if not (0 < len(nonce) <= _MAX_NONCE and _is_b64(nonce) and _is_b64(fields["body"])):
        return None
    try:
        sig = base64.urlsafe_b64decode(fields["sig"] + "==")
    except ValueError:
        return None
    return Signed(int(ts), nonce, fields["body"], sig)


def verifies(key: bytes, signed: Signed, *, method: str, host: str, target: str) -> bool:
    """Whether `signed` was made with `key` for this method, host and target (compared in
    constant time)."""
    expected = _mac(key, method, host, target, signed.ts_ms, signed.nonce, signed.body)
    return hmac.compare_digest(expected, signed.sig)


def _mac(
    key: bytes, method: str, host: str, target: str, ts_ms: int, nonce: str, digest: str
) -> bytes:
    message = "\n".join((method.upper(), host.lower(), target, str(ts_ms), nonce, digest))
    return hmac.new(key, _VERSION + b"\n" + message.encode(), hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _is_b64(text: str) -> bool:
    return text.isascii() and all(c.isalnum() or c in "-_" for c in text)
