"""Credentials on every plane, and the headers that present them: a server made with SECURED
knows them all."""

from __future__ import annotations

import base64

from registry import Settings

CLIENT_PW, ADMIN_PW, PEER_PW, TOKEN = "client-pw-1", "admin-pw-2", "peer-pw-3", "token-4"
SECURED = Settings.of(
    credentials__clients=(f"svc:{CLIENT_PW}",),
    credentials__admins=(f"ops:{ADMIN_PW}",),
    credentials__admin_tokens=(TOKEN,),
    credentials__peer=f"peer:{PEER_PW}",
)


def basic(user: str, password: str) -> dict[str, str]:
    """HTTP Basic headers for `user:password`."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


AS_CLIENT = basic("svc", CLIENT_PW)
AS_ADMIN = basic("ops", ADMIN_PW)
AS_BEARER = {"Authorization": f"Bearer {TOKEN}"}
AS_PEER = basic("peer", PEER_PW)
