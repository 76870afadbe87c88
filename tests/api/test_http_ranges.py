"""Range, conditional and Content-Disposition rules, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.api.http_ranges import (
    ByteRange,
    RangeNotSatisfiable,
    content_disposition,
    etag_matches,
    http_date,
    not_modified,
    parse_range,
    range_applies,
)

MODIFIED = datetime(2026, 11, 30, 8, 0, 0, 500_000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("", None),
        ("bytes=0-0", ByteRange(0, 1)),
        ("bytes=2-", ByteRange(2, 10)),
        ("bytes=-3", ByteRange(7, 10)),
        ("bytes=-30", ByteRange(0, 10)),
        ("bytes=5-100", ByteRange(5, 10)),
        ("BYTES = 1 - 2", ByteRange(1, 3)),
        ("bytes=0-1, 4-5", None),
    ],
)
def test_parse_range(header: str | None, expected: ByteRange | None) -> None:
    assert parse_range(header, 10) == expected


@pytest.mark.parametrize(
    "header", ["bytes=10-", "bytes=-0", "bytes=x-y", "bytes=4-2", "bytes=-", "pages=1-2", "bytes"]
)
def test_bad_ranges_raise_with_the_size(header: str) -> None:
    with pytest.raises(RangeNotSatisfiable) as caught:
        parse_range(header, 10)
    assert caught.value.size == 10


def test_no_range_of_an_empty_object_is_satisfiable() -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range("bytes=0-", 0)
    with pytest.raises(RangeNotSatisfiable):
        parse_range("bytes=-5", 0)


def test_content_range_header() -> None:
    assert ByteRange(5, 10).content_range(10) == "bytes 5-9/10"


def test_etag_lists_and_weak_tags() -> None:
    assert etag_matches('"a", "b"', '"b"')
    assert etag_matches('W/"b"', '"b"')
    assert etag_matches("*", '"b"')
    assert not etag_matches('"a"', '"b"')


def test_not_modified_prefers_if_none_match() -> None:
    stamp = http_date(MODIFIED)
    assert not_modified({"if-modified-since": stamp}, etag='"e"', last_modified=MODIFIED)
    assert not not_modified(
        {"if-none-match": '"other"', "if-modified-since": stamp}, etag='"e"', last_modified=MODIFIED
    )
    earlier = http_date(datetime(2026, 11, 29, tzinfo=UTC))
    assert not not_modified({"if-modified-since": earlier}, etag='"e"', last_modified=MODIFIED)
    assert not not_modified({"if-modified-since": "garbage"}, etag='"e"', last_modified=MODIFIED)


def test_if_range_by_etag_and_by_date() -> None:
    assert range_applies({}, etag='"e"', last_modified=MODIFIED)
    assert range_applies({"if-range": '"e"'}, etag='"e"', last_modified=MODIFIED)
    assert not range_applies({"if-range": '"x"'}, etag='"e"', last_modified=MODIFIED)
    assert range_applies({"if-range": http_date(MODIFIED)}, etag='"e"', last_modified=MODIFIED)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("report.pdf", 'attachment; filename="report.pdf"'),
        ('a"b\\c.txt', "attachment; filename=\"a_b_c.txt\"; filename*=UTF-8''a%22b%5Cc.txt"),
        (
            "résumé.txt",
            "attachment; filename=\"r_sum_.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt",
        ),
        ("bad\r\nheader.txt", 'attachment; filename="badheader.txt"'),
        ("", 'attachment; filename="download"'),
    ],
)
def test_content_disposition_is_safe(name: str, expected: str) -> None:
    value = content_disposition(name)
    assert value == expected
    assert value.isascii()
    assert "\r" not in value and "\n" not in value
