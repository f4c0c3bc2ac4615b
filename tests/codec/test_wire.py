"""wire.timestamp, the reader of every lastDirtyTimestamp (bodies, heartbeats, peers' items),
on literal values: what each gives, or that it is refused with the field named."""

from __future__ import annotations

import pytest

from registry.codec import wire
from registry.errors import BadInput

JAVA_LONG_MAX = 9_223_372_036_854_775_807


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1735689000000", 1_735_689_000_000),
        (1_735_689_000_000, 1_735_689_000_000),
        (1735689000000.0, 1_735_689_000_000),  # a JSON number written with a fraction of 0
        ("0", 0),
        ("+5", 5),
        ("-0", 0),
        (" 12 ", 12),  # the spaces around, not within
        ("\t7\n", 7),
        ("0" * 38 + "5", 5),  # 39 characters: the longest text read
        ("9" * 18, 999_999_999_999_999_999),
        ("9223372036854775807", JAVA_LONG_MAX),  # 19 digits, Java's Long.MAX_VALUE
        (JAVA_LONG_MAX, JAVA_LONG_MAX),
        (None, None),
    ],
)
def test_what_a_timestamp_reads_as(value: object, expected: int | None) -> None:
    """Decimal text or a whole number, up to a Java long, one sign at most."""
    assert expected == wire.timestamp(value, "lastDirtyTimestamp")


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("12a", "must be a whole number, not '12a'"),
        ("١٢", "must be a whole number, not '١٢'"),  # Arabic-Indic digits: int() reads 12
        ("\uff11\uff12", "must be a whole number, not '\uff11\uff12'"),  # full-width 12
        ("²", "must be a whole number, not '²'"),
        ("1_000", "must be a whole number, not '1_000'"),  # int() reads 1000
        ("1 2", "must be a whole number, not '1 2'"),
        ("0x10", "must be a whole number, not '0x10'"),
        ("1e3", "must be a whole number, not '1e3'"),
        ("", "must be a whole number, not ''"),
        (" ", "must be a whole number, not ' '"),
        ("-", "must be a whole number, not '-'"),
        ("-+5", "must be a whole number, not '-+5'"),
        ("+-5", "must be a whole number, not '+-5'"),
        ("--5", "must be a whole number, not '--5'"),
        ("0" * 39 + "5", f"must be a whole number, not '{'0' * 36}..."),  # 40 characters
        ("-5", "must not be negative"),
        (-1, "must not be negative"),
        (
            "9223372036854775808",
            "9223372036854775808 is out of range (at most 9223372036854775807)",
        ),
        ("9" * 19, "9999999999999999999 is out of range (at most 9223372036854775807)"),
        ("1" + "0" * 19, "10000000000000000000 is out of range (at most 9223372036854775807)"),
        (1.5, "must be a whole number, not 1.5"),
        (True, "must be a number, not a boolean"),
        ([1], "must be a whole number, not [1]"),
    ],
)
def test_what_a_timestamp_refuses(value: object, detail: str) -> None:
    """Anything else is a BadInput naming the field (a 400), never another error (a 500)."""
    with pytest.raises(BadInput) as caught:
        wire.timestamp(value, "lastDirtyTimestamp")
    assert ("lastDirtyTimestamp", detail) == (caught.value.field, caught.value.detail)
