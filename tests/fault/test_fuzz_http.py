"""HTTP fuzzing of a real server process over every route of the route table.

Each case is a request built from the table: a route's path with its segments filled (tracked
instances, or strings with path tricks), a declared or other method, query parameters the API
knows or not (with broken percent escapes), headers, and a body (an instance document with
fields replaced, arbitrary JSON, XML, bytes). Every case must be answered, 2xx or 4xx, never
5xx nor a dropped connection; a refusal must be a JSON error body and change nothing; and a
request that succeeds may change only the instance it names (a registration, the one its
document names; a peer's batch, anything).

Seeded and replayable: each run draws a new seed, so that runs explore new cases, and prints
it (pytest shows it with a failure); `REGISTRY_FUZZ_SEED` replays a run's cases, and
`REGISTRY_FUZZ_CASES` says how many (2 000 by default, a longer run is one variable away). A
second test sends raw, hand-framed requests over a socket.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from registry.http.routes import PREFIXES, UNVERSIONED, VERSIONED
from tests.helpers import instance_doc
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

CASES = int(os.environ.get("REGISTRY_FUZZ_CASES", "2000"))
SEED = int(os.environ.get("REGISTRY_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
TRACKED = [("ORDERS", "i-1"), ("ORDERS", "i-2"), ("PAYMENTS", "p-1")]
METHODS = ["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"]
# Query keys the API reads (a long-poll's `wait` is left out: a case must not hold for minutes).
KEYS = [
    "value",
    "reason",
    "expires",
    "lastDirtyTimestamp",
    "overriddenstatus",
    "status",
    "index",
    "epoch",
    "since",
    "zone",
]
ROUTES = [
    (prefix + path, list(methods)) for prefix in PREFIXES for path, methods in VERSIONED.items()
] + [(path, list(methods)) for path, methods in UNVERSIONED.items()]


@pytest.fixture(autouse=True)
def _replayable() -> None:
    """The seed, in each test's captured output: shown with its failure."""
    print(f"fuzz seed {SEED}: replay with REGISTRY_FUZZ_SEED={SEED} REGISTRY_FUZZ_CASES={CASES}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real process with a store, three tracked instances and an override; its port.
    Started outside any event loop: these tests are synchronous (hypothesis drives them)."""
    data = tmp_path_factory.mktemp("fuzz")
    settings = {"store__data_dir": data, "limits__fetch_rate_limit": 0, "logging__format": "json"}
    process = ServerProcess(data / "stderr.log", settings=settings | {"logging__level": "warning"})
    process.spawn()
    port = process.port
    try:
        _wait_ready(port)
        for app, iid in TRACKED:
            body = orjson.dumps({"instance": instance_doc(app, iid)})
            assert 204 == _call(port, "POST", f"/eureka/apps/{app}", body=body)[0]
        assert 200 == _call(port, "PUT", "/eureka/apps/ORDERS/i-2/status?value=DOWN")[0]
        yield port
    finally:
        process.stop_blocking(timeout=30)
    # A 5xx is logged as an error: none may have been.
    for line in process.log_text().splitlines():
        logged = json.loads(line)
        assert logged.get("level") not in ("error", "critical"), line


def _wait_ready(port: int) -> None:
    """Poll `/readyz` with this module's blocking calls until it answers 200."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if _call(port, "GET", "/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the server never became ready")


def _call(
    port: int,
    method: str,
    target: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection of its own; a watch stream's body is not waited for."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", "127.0.0.1")
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        stream = response.getheader("Content-Type", "").startswith("text/event-stream")
        return response.status, dict(response.getheaders()), b"" if stream else response.read()
    finally:
        connection.close()


def _state(port: int) -> tuple[dict[tuple[str, str], Any], list[Any]]:
    """What a refusal must not change: each instance as fetched, with its lease's last renewal
    as it is now (a refusal must not renew), and the overrides listed."""
    status, _, body = _call(port, "GET", "/eureka/apps", headers={"Accept": "application/json"})
    assert 200 == status, body
    instances = {}
    for app in orjson.loads(body)["applications"]["application"]:
        for instance in app["instance"]:
            key = (app["name"], instance["instanceId"])
            lease = instance["leaseInfo"] | {"lastRenewalTimestamp": _renewed(port, *key)}
            instances[key] = instance | {"leaseInfo": lease}
    status, _, body = _call(port, "GET", "/eureka/overrides")
    assert 200 == status, body
    return instances, orjson.loads(body)["overrides"]


def _renewed(port: int, app: str, iid: str) -> int | None:
    """An instance's last renewal, read alone: a fetch of the registry may be older (a
    heartbeat changes no encoded payload), one instance's read is not."""
    target = f"/eureka/apps/{quote(app, safe='')}/{quote(iid, safe='')}"
    status, _, body = _call(port, "GET", target, headers={"Accept": "application/json"})
    if status == 404:  # expired or gone since the fetch
        return None
    assert 200 == status, body
    renewed: int = orjson.loads(body)["instance"]["leaseInfo"]["lastRenewalTimestamp"]
    return renewed


def _renewal_forgotten(
    state: tuple[dict[tuple[str, str], Any], list[Any]], named: set[tuple[str, str]]
) -> tuple[dict[tuple[str, str], Any], list[Any]]:
    """`state` without the last renewal of the `named` instances."""
    instances = {
        key: instance | {"leaseInfo": instance["leaseInfo"] | {"lastRenewalTimestamp": None}}
        if key in named
        else instance
        for key, instance in state[0].items()
    }
    return instances, state[1]


segments = st.one_of(
    st.sampled_from([app for app, _ in TRACKED] + [iid for _, iid in TRACKED]),
    st.sampled_from(["..", ".", "%2e%2e", "a%2Fb", "delta", "DELTA", "%00", "%FF", "x" * 300]),
    st.text(min_size=1, max_size=20).map(lambda s: quote(s, safe="")),
)
values = st.one_of(
    st.sampled_from(
        ["", "UP", "DOWN", "OUT_OF_SERVICE", "UNKNOWN", "up", "8h", "9999999d", "-1", "0"]
    ),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=30).map(lambda s: quote(s, safe="")),
    st.sampled_from(["%", "%zz", "%FF", "%C3", "a%00b", "1e400", "NaN"]),
)
plausible = st.sampled_from(
    ["UP", "DOWN", "OUT_OF_SERVICE", "STARTING", "up", "8h", "1735689000000", "0", "x"]
)
# The keys each route reads, by how its path ends: most cases use them, with plausible values,
# so that they reach past the first check.
ROUTE_KEYS = {
    "status": ["value", "reason", "expires", "lastDirtyTimestamp"],
    "{id}": ["status", "lastDirtyTimestamp", "overriddenstatus"],
    "delta}": ["index", "epoch"],
    "history": ["since"],
    "watch": ["index", "epoch"],
    "metadata": ["zone", "value", "k"],
}


def queries(template: str) -> st.SearchStrategy[str]:
    own = next((keys for end, keys in ROUTE_KEYS.items() if template.endswith(end)), KEYS)
    key = (
        st.sampled_from(own)
        | st.sampled_from(own)
        | st.sampled_from(KEYS)
        | st.text(max_size=8).map(quote)
    )
    pairs = st.lists(st.tuples(key, plausible | plausible | values), max_size=4)
    return pairs.map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes | None, str | None]:
    kind = draw(st.sampled_from(["none", "instance", "json", "xml", "bytes"]))
    if kind == "none":
        return None, None
    if kind == "instance":
        app, iid = draw(st.sampled_from([*TRACKED, ("ORDERS", "new-1")]))
        doc = instance_doc(app, iid)
        for key in draw(st.lists(st.sampled_from(sorted(doc)), max_size=3)):
            doc[key] = draw(json_values)
        wrapped = draw(st.sampled_from(["instance", "replicationList", None]))
        body: Any = doc if wrapped is None else {wrapped: doc}
        return json.dumps(body).encode(), "application/json"  # any integer, however large
    if kind == "json":
        return json.dumps(draw(json_values)).encode(), "application/json"
    if kind == "xml":
        text = draw(
            st.sampled_from(
                [
                    "<instance>",
                    "<instance><app>ORDERS</app></instance>",
                    "<!DOCTYPE x [<!ENTITY a 'b'>]><x>&a;</x>",
                ]
            )
        )
        return text.encode(), "application/xml"
    return draw(st.binary(max_size=64)), draw(
        st.sampled_from(["application/json", "application/octet-stream"])
    )


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], bytes | None]:
    template, declared = draw(st.sampled_from(ROUTES))
    app, iid = draw(st.sampled_from(TRACKED))
    real = {"app": app, "id": iid, "vip": app.lower(), "name": "status.js"}
    path = template
    while "{" in path:
        start, end = path.index("{"), path.index("}")
        name = path[start + 1 : end].split(":")[0]
        # Mostly a tracked instance, named consistently, so cases reach the commands.
        filled = real.get(name, "x") if draw(st.integers(0, 9)) < 6 else draw(segments)
        path = path[:start] + filled + path[end + 1 :]
    method = draw(st.one_of(st.sampled_from(declared), st.sampled_from(METHODS)))
    query = draw(queries(template))
    body, content_type = draw(bodies())
    headers = {
        "Accept": draw(
            st.sampled_from(["application/json", "application/xml", "*/*", "text/html", "x/y"])
        )
    }
    if content_type is not None:
        headers["Content-Type"] = content_type
    if draw(st.booleans()):
        headers["x-netflix-discovery-replication"] = "true"
    if draw(st.booleans()):
        headers["Accept-Encoding"] = "gzip"
    return method, f"{path}?{query}" if query else path, headers, body


def _is_heartbeat(method: str, target: str) -> bool:
    """PUT apps/{app}/{id}, under any prefix."""
    parts = target.split("?")[0].split("/")
    return method == "PUT" and "apps" in parts and len(parts) == parts.index("apps") + 3


def _targets(method: str, target: str, body: bytes | None) -> set[tuple[str, str]] | None:
    """The instances a successful request may change; None: any (a peer's batch)."""
    parts = target.split("?")[0].split("/")
    if "peerreplication" in parts:
        return None
    named = set()
    if "apps" in parts:
        at = parts.index("apps")
        if len(parts) > at + 2:
            named.add((parts[at + 1].upper(), parts[at + 2]))
        elif method == "POST" and len(parts) > at + 1 and body:
            try:
                doc = orjson.loads(body)
                named.add((parts[at + 1].upper(), doc["instance"]["instanceId"]))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                return None  # an XML or lenient body: which id it names is not read here
    return named


@seed(SEED)
@settings(
    max_examples=CASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=requests())
def test_every_route_answers_every_request_without_a_5xx(
    server: int, request: tuple[str, str, dict[str, str], bytes | None]
) -> None:
    method, target, headers, body = request
    before = _state(server)
    status, answered, content = _call(server, method, target, body=body, headers=headers)
    assert status < 500, (method, target, content[:300])
    after = _state(server)
    if status >= 400:
        if "X-Registry-Error" in answered:  # a heartbeat's 404: empty, as Eureka's
            assert (404, b"") == (status, content)
        elif method != "HEAD":
            assert answered.get("Content-Type", "").startswith("application/json"), content[:200]
            assert "error" in orjson.loads(content)
        named = _targets(method, target, body)
        if _is_heartbeat(method, target) and status in (404, 409) and named:
            # Contract 3.2: the lease is renewed before the caller's lastDirtyTimestamp is
            # compared with ours, so this 404 or 409 is a renewal of the instance it names.
            before, after = _renewal_forgotten(before, named), _renewal_forgotten(after, named)
        assert before == after, (method, target, status)
        return
    allowed = _targets(method, target, body)
    if allowed is None:
        return
    changed = {
        key for key in before[0].keys() | after[0].keys() if before[0].get(key) != after[0].get(key)
    }
    assert changed <= {(app, iid) for app, iid in allowed}, (method, target, changed)


tokens = st.sampled_from(
    ["GET", "PUT", "POST", "DELETE", "HEAD", "G ET", "GET\x00", "\xff", "-", ""]
)
targets = st.one_of(
    requests().map(lambda request: request[1]),
    st.sampled_from(["*", "http://127.0.0.1/eureka/apps", "//", "/%", "/\x01", "/" + "a" * 9000]),
)
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.x", "", "HTTP/1.1 extra"])
header_lines = st.lists(
    st.one_of(
        st.tuples(st.text(min_size=1, max_size=12), st.text(max_size=40)).map(
            lambda kv: f"{kv[0]}: {kv[1]}"
        ),
        st.sampled_from(
            [
                "no colon here",
                "Content-Length: 5",
                "Content-Length: -1",
                "Transfer-Encoding: chunked",
                "Transfer-Encoding: gzip",
                "Content-Encoding: deflate",
                "Expect: 100-continue",
                " folded: value",
                "Host: 127.0.0.1",
            ]
        ),
    ),
    max_size=6,
)


def _clean(line: str) -> bytes:
    """A header line as sent: CR and LF would change the framing itself, so they go."""
    return line.replace("\r", "").replace("\n", "").encode("utf-8", "surrogatepass")


@seed(SEED)
@settings(max_examples=max(CASES // 4, 50), deadline=None, database=None)
@given(
    method=tokens, target=targets, version=versions, lines=header_lines, body=st.binary(max_size=32)
)
def test_hand_framed_requests_are_answered_without_a_5xx(
    server: int, method: str, target: str, version: str, lines: list[str], body: bytes
) -> None:
    """Request lines and headers as no client library would send them; each message is
    complete (its length matches its body), so each must be answered, and never with a 5xx."""
    lines = [line for line in lines if not line.lower().startswith(("content-length", "host"))]
    head = [f"{method} {target} {version}".encode("utf-8", "surrogatepass"), b"Host: 127.0.0.1"]
    head += [_clean(line) for line in lines]
    head.append(b"Content-Length: %d" % len(body))
    with socket.create_connection(("127.0.0.1", server), timeout=10) as sock:
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, f"the connection was dropped without an answer: {head!r}"
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0].split()
    assert status_line[0].startswith(b"HTTP/"), answer[:200]  # aiohttp echoes the version
    assert int(status_line[1]) < 500, answer[:300]
