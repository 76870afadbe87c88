"""HTTP Range and conditional-request rules (RFC 9110), shared by the native
and S3 download routes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import quote

# ASCII digits and blanks only: `\d` and `\s` would let other scripts' digits in.
_RANGE_RE = re.compile(r"[ \t]*([0-9]*)[ \t]*-[ \t]*([0-9]*)[ \t]*")
#: Positions with more digits than this are past the end of any object.
MAX_POSITION_DIGITS = 19
_BEYOND_ANY_SIZE = 10**MAX_POSITION_DIGITS


class RangeNotSatisfiable(Exception):
    def __init__(self, size: int, detail: str) -> None:
        super().__init__(detail)
        self.size = size
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes [start, end) of an object."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end - 1}/{size}"


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The single byte range asked for, or None for the whole object.

    Several ranges in one header are answered with the whole object, which
    RFC 9110 allows. A malformed or unsatisfiable range raises
    RangeNotSatisfiable (answered with 416 and `Content-Range: bytes */size`).
    """
    if header is None or not header.strip():
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        raise RangeNotSatisfiable(size, f"malformed Range header {header[:100]!r}")
    if "," in spec:
        return None
    match = _RANGE_RE.fullmatch(spec)
    if match is None or (match.group(1) == "" and match.group(2) == ""):
        raise RangeNotSatisfiable(size, f"malformed Range header {header[:100]!r}")
    first, last = match.group(1), match.group(2)
    unsatisfiable = f"range {spec[:100]} is not satisfiable for {size} bytes"
    if first == "":
        suffix = _position(last)
        if suffix == 0 or size == 0:
            raise RangeNotSatisfiable(size, unsatisfiable)
        return ByteRange(max(0, size - suffix), size)
    start = _position(first)
    end = size if last == "" else min(_position(last) + 1, size)
    if last != "" and _position(last) < start:
        raise RangeNotSatisfiable(size, f"malformed Range header {header[:100]!r}")
    if start >= size:
        raise RangeNotSatisfiable(size, unsatisfiable)
    return ByteRange(start, end)


def _position(digits: str) -> int:
    """A byte position of ASCII digits; one too long for any object is past its end
    (and `int()` refuses more than 4300 digits)."""
    return int(digits) if len(digits) <= MAX_POSITION_DIGITS else _BEYOND_ANY_SIZE


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def http_date(moment: datetime) -> str:
    """``Mon, 30 Nov 2026 08:00:00 GMT`` for ``Last-Modified`` (naive means UTC)."""
    return format_datetime(_utc(moment).replace(microsecond=0), usegmt=True)


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP date (``If-Modified-Since``...) as an aware UTC datetime, or None."""
    if not value:
        return None
    try:
        return _utc(parsedate_to_datetime(value))
    except (TypeError, ValueError, IndexError):
        return None


def etag_matches(header: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match list names this ETag (weak compare)."""
    if header.strip() == "*":
        return True
    wanted = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == wanted for tag in header.split(","))


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


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """RFC 6266: an ASCII fallback plus `filename*` when the name is not ASCII."""
    cleaned = "".join(ch for ch in filename if ch >= " " and ch != "\x7f") or "download"
    fallback = "".join(ch if ch.isascii() and ch not in '"\\' else "_" for ch in cleaned)
    value = f'{disposition}; filename="{fallback}"'
    if fallback != cleaned:
        value += f"; filename*=UTF-8''{quote(cleaned, safe='')}"
    return value
