"""The raw query reader agrees with aiohttp's own parsing."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp.test_utils import make_mocked_request
from hypothesis import example, given
from hypothesis import strategies as st

from registry.codec import wire
from registry.errors import BadInput
from registry.http.params import last_dirty_ms, query_string, query_value

names = st.sampled_from(["value", "lastDirtyTimestamp", "status", "xvalue", "valu", "v"])
values = st.text(max_size=8)
# lastDirtyTimestamp values worth trying: the usual digits and what only looks like them.
dirty_values = st.one_of(
    st.integers(min_value=0, max_value=10**20).map(str),
    st.sampled_from(["", "-5", " 7", "1_000", "+3", "١٢", "²", "0x10", "1.5", "12a"]),
    values,
)
pairs = st.lists(st.tuples(names, values), max_size=5)


@given(pairs, st.sampled_from(["value", "lastDirtyTimestamp"]))
def test_query_value_matches_request_query(query: list[tuple[str, str]], name: str) -> None:
    """For any query string, the first value read raw is the one request.query gives."""
    raw = "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query)
    request = make_mocked_request("PUT", f"/x?{raw}" if raw else "/x")
    assert request.query.get(name) == query_value(query_string(request), name)


def test_a_fragment_is_not_part_of_the_last_value() -> None:
    """A stray #fragment ends the query, as it does for request.query."""
    request = make_mocked_request("PUT", "/x?lastDirtyTimestamp=1000#f")
    assert "1000" == query_value(query_string(request), "lastDirtyTimestamp")


@given(
    st.lists(st.tuples(st.sampled_from(["xlastDirtyTimestamp", "status"]), values), max_size=3),
    dirty_values,
    st.sampled_from(["first", "last", "absent"]),
    st.booleans(),
)
@example([("xlastDirtyTimestamp", "5")], "", "absent", True)
@example([], "²", "last", False)
@example([], "9" * 19, "last", True)
@example([], "-+5", "last", True)
def test_last_dirty_reader_matches_the_general_rule(
    query: list[tuple[str, str]], dirty: str, where: str, encoded: bool
) -> None:
    """The heartbeat's quick read of lastDirtyTimestamp gives what reading request.query and
    validating the value gives: the same number, or the same refusal."""
    if where != "absent":
        pair = [("lastDirtyTimestamp", dirty)]
        query = [*query, *pair] if where == "last" else [*pair, *query]
    # Unencoded too: a request target may carry raw non-ASCII bytes.
    raw = "&".join(f"{k}={quote(v, safe='') if encoded else v}" for k, v in query)
    request = make_mocked_request("PUT", f"/x?{raw}")
    expected: int | type[BadInput] | None
    try:
        value = request.query.get("lastDirtyTimestamp")
        expected = wire.timestamp(value, "lastDirtyTimestamp") if value else None
    except BadInput:
        expected = BadInput
    try:
        got: int | type[BadInput] | None = last_dirty_ms(query_string(request))
    except BadInput:
        got = BadInput
    assert expected == got
