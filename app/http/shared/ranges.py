"""HTTP Range rules (RFC 9110 section 14), shared by the native and S3
download routes."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
