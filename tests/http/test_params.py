"""The raw query reader agrees with aiohttp's own parsing."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp.test_utils import make_mocked_request
from hypothesis import given
from hypothesis import strategies as st

from registry.http.params import query_string, query_value

names = st.sampled_from(["value", "lastDirtyTimestamp", "status", "xvalue", "valu", "v"])
values = st.text(max_size=8)
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
