"""Conditional requests (RFC 9110 section 13) and HTTP dates, shared by the
native and S3 download routes: one ETag comparison for both."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

PRECONDITION_FAILED = 412
NOT_MODIFIED = 304


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(moment: datetime) -> str:
    """``Mon, 30 Nov 2026 08:00:00 GMT`` for ``Last-Modified`` (naive means UTC).

    What ``email.utils.format_datetime(..., usegmt=True)`` writes, by hand:
    that took a twentieth of a small HEAD's CPU."""
    t = _utc(moment)
    return (
        f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year:04d} "
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d} GMT"
    )


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP date (``If-Modified-Since``...) as an aware UTC datetime, or None."""
    if not value:
        return None
    try:
        return _utc(parsedate_to_datetime(value))
    except (TypeError, ValueError, IndexError):
        return None


def _opaque(tag: str) -> str:
    """An entity tag without its weak marker and quotes (S3 clients send
    If-Match values both quoted and bare)."""
    return tag.strip().removeprefix("W/").strip('"')


def etag_matches(header: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match list names this ETag (weak compare)."""
    if header.strip() == "*":
        return True
    wanted = _opaque(etag)
    return any(_opaque(tag) == wanted for tag in header.split(","))


def not_modified(headers: Mapping[str, str], *, etag: str, last_modified: datetime) -> bool:
    """True when If-None-Match / If-Modified-Since say the client's copy is current."""
    if_none_match = headers.get("if-none-match")
    if if_none_match is not None:
        return etag_matches(if_none_match, etag)
    since = parse_http_date(headers.get("if-modified-since"))
    return since is not None and last_modified.replace(microsecond=0) <= since


def range_applies(headers: Mapping[str, str], *, etag: str, last_modified: datetime) -> bool:
    """If-Range: serve the range only if the client's copy is still current."""
    value = headers.get("if-range")
    if value is None:
        return True
    if value.strip().startswith(('"', "W/")):
        return value.strip() == etag
    moment = parse_http_date(value)
    return moment is not None and last_modified.replace(microsecond=0) <= moment


def evaluate(headers: Mapping[str, str], *, etag: str, last_modified: datetime) -> int | None:
    """All four conditions in RFC 9110's order, as S3 applies them to GET and
    HEAD: PRECONDITION_FAILED, NOT_MODIFIED, or None to go on."""
    modified = last_modified.replace(microsecond=0)
    if_match = headers.get("if-match")
    if if_match is not None and not etag_matches(if_match, etag):
        return PRECONDITION_FAILED
    if if_match is None:
        since = parse_http_date(headers.get("if-unmodified-since"))
        if since is not None and modified > since:
            return PRECONDITION_FAILED
    if not_modified(headers, etag=etag, last_modified=last_modified):
        return NOT_MODIFIED
    return None


def copy_source_refused(headers: Mapping[str, str], *, etag: str, last_modified: datetime) -> bool:
    """S3's x-amz-copy-source-if-* conditions: True when the copy must not happen."""
    modified = last_modified.replace(microsecond=0)
    match = headers.get("x-amz-copy-source-if-match")
    if match is not None and not etag_matches(match, etag):
        return True
    none_match = headers.get("x-amz-copy-source-if-none-match")
    if none_match is not None and etag_matches(none_match, etag):
        return True
    unmodified = parse_http_date(headers.get("x-amz-copy-source-if-unmodified-since"))
    if unmodified is not None and modified > unmodified:
        return True
    since = parse_http_date(headers.get("x-amz-copy-source-if-modified-since"))
    return since is not None and modified <= since
