"""Range, conditional and Content-Disposition rules (app/http), without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import Headers

from app.http.shared.conditions import (
    NOT_MODIFIED,
    PRECONDITION_FAILED,
    copy_source_refused,
    etag_matches,
    evaluate,
    http_date,
    not_modified,
    range_applies,
)
from app.http.shared.disposition import content_disposition
from app.http.shared.headers import IndexedHeaders
from app.http.shared.ranges import (
    ByteRange,
    RangeNotSatisfiable,
    parse_range,
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


@given(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30)),
    st.sampled_from(
        [None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
    ),
)
def test_http_dates_are_what_the_standard_library_writes(
    moment: datetime, zone: timezone | None
) -> None:
    """Last-Modified is formatted by hand (the library's formatter cost a
    twentieth of a HEAD); it must be the library's text, seconds truncated,
    with a naive moment taken as UTC."""
    if zone is not None:
        moment = moment.replace(tzinfo=zone)
    as_utc = moment.replace(tzinfo=UTC) if zone is None else moment.astimezone(UTC)
    expected = format_datetime(as_utc.replace(microsecond=0), usegmt=True)
    assert http_date(moment) == expected


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


def test_one_etag_comparison_takes_quoted_bare_and_weak_tags() -> None:
    # The native API compared weakly but only quoted tags; the S3 API took
    # bare tags but not weak ones. One comparer takes all three.
    for sent in ('"e"', "e", 'W/"e"', '"x", e'):
        assert etag_matches(sent, '"e"'), sent
        assert evaluate({"if-none-match": sent}, etag='"e"', last_modified=MODIFIED) == 304
    assert not etag_matches('"ee"', '"e"')


def test_conditions_are_evaluated_in_rfc_order() -> None:
    later = http_date(datetime(2026, 12, 1, tzinfo=UTC))
    earlier = http_date(datetime(2026, 11, 1, tzinfo=UTC))
    assert evaluate({}, etag='"e"', last_modified=MODIFIED) is None
    # If-Match wins over If-Unmodified-Since, and a failed one over everything.
    assert (
        evaluate(
            {"if-match": '"e"', "if-unmodified-since": earlier}, etag='"e"', last_modified=MODIFIED
        )
        is None
    )
    assert (
        evaluate({"if-match": '"x"', "if-none-match": '"e"'}, etag='"e"', last_modified=MODIFIED)
        == PRECONDITION_FAILED
    )
    assert (
        evaluate({"if-unmodified-since": earlier}, etag='"e"', last_modified=MODIFIED)
        == PRECONDITION_FAILED
    )
    # If-None-Match decides alone when present; If-Modified-Since otherwise.
    assert (
        evaluate(
            {"if-none-match": '"x"', "if-modified-since": later}, etag='"e"', last_modified=MODIFIED
        )
        is None
    )
    assert (
        evaluate({"if-modified-since": later}, etag='"e"', last_modified=MODIFIED) == NOT_MODIFIED
    )


def test_copy_source_conditions() -> None:
    later = http_date(datetime(2026, 12, 1, tzinfo=UTC))
    assert not copy_source_refused({}, etag='"e"', last_modified=MODIFIED)
    assert copy_source_refused(
        {"x-amz-copy-source-if-match": "x"}, etag='"e"', last_modified=MODIFIED
    )
    assert copy_source_refused(
        {"x-amz-copy-source-if-none-match": "e"}, etag='"e"', last_modified=MODIFIED
    )
    assert copy_source_refused(
        {"x-amz-copy-source-if-modified-since": later}, etag='"e"', last_modified=MODIFIED
    )
    assert not copy_source_refused(
        {"x-amz-copy-source-if-unmodified-since": later}, etag='"e"', last_modified=MODIFIED
    )


_HEADER_NAMES = st.sampled_from(["host", "range", "if-match", "x-amz-date", "x-amz-meta-a"])


@given(
    raw=st.lists(
        st.tuples(_HEADER_NAMES, st.text(st.characters(min_codepoint=32, max_codepoint=255))),
        max_size=8,
    ),
    asked=st.lists(_HEADER_NAMES.map(str.title) | _HEADER_NAMES | st.just("absent"), min_size=1),
)
def test_indexed_headers_answer_as_starlettes_do(
    raw: list[tuple[str, str]], asked: list[str]
) -> None:
    pairs = [(name.encode(), value.encode("latin-1")) for name, value in raw]
    starlette, indexed = Headers(raw=pairs), IndexedHeaders(raw=pairs)
    for name in asked:
        # First value wins, names in any case, repeated values kept for getlist.
        assert indexed.get(name) == starlette.get(name)
        assert indexed.get(name, "default") == starlette.get(name, "default")
        assert (name in indexed) == (name in starlette)
        assert indexed.getlist(name) == starlette.getlist(name)
        if name in starlette:
            assert indexed[name] == starlette[name]
        else:
            with pytest.raises(KeyError):
                indexed[name]
