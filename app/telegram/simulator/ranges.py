"""The Range header of file downloads, as Telegram's file server reads it.

Telegram's Bot API server does not serve files itself: it downloads them to
its disk and a static-file web server (nginx, by its error pages) serves the
paths (tdlib/telegram-bot-api issues 26 and 540). nginx answers one byte
range of a static file with 206 and Content-Range, a range that starts past
the end (or a malformed `bytes=` spec) with 416, and a header of another unit
with the whole file. Several ranges would get multipart/byteranges from
nginx; the simulator sends the whole file instead, which HTTP allows and no
client of the service asks for.

Written apart from the service's own Range parser (app/http/shared/ranges.py), so a
test of the service's ranged reads does not check that parser against itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ASCII digits and blanks only (`\d` would take other scripts' digits).
_SPEC = re.compile(r"[ \t]*([0-9]*)[ \t]*-[ \t]*([0-9]*)[ \t]*")
_UNIT = re.compile(r"[ \t]*bytes[ \t]*=", re.IGNORECASE)
# More digits than this overflow nginx's off_t check: it answers 416. (Python
# would parse them, up to the 4300 digits `int()` allows.)
_MAX_DIGITS = 18


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes `first` to `last` of a file, both included, as Content-Range counts."""

    first: int
    last: int

    @property
    def length(self) -> int:
        return self.last + 1 - self.first

    def content_range(self, size: int) -> str:
        return f"bytes {self.first}-{self.last}/{size}"


class Unsatisfiable(Exception):
    """A byte range the file cannot give: 416, `Content-Range: bytes */size`."""


def requested_span(header: str | None, size: int) -> Span | None:
    """The one span of a `size`-byte file that `header` asks for, or None for
    the whole file. Raises Unsatisfiable for a range outside the file or a
    malformed `bytes=` spec."""
    if header is None:
        return None
    unit = _UNIT.match(header)
    if unit is None:
        return None
    spec = header[unit.end() :]
    if "," in spec:
        return None
    match = _SPEC.fullmatch(spec)
    if match is None:
        raise Unsatisfiable(f"malformed range {spec[:100]!r}")
    first_text, last_text = match.groups()
    if not first_text and not last_text:
        raise Unsatisfiable("a range needs a first or a last byte")
    if len(first_text) > _MAX_DIGITS or len(last_text) > _MAX_DIGITS:
        raise Unsatisfiable("a byte position too large for any file")
    if not first_text:
        suffix = int(last_text)
        if suffix == 0 or size == 0:
            raise Unsatisfiable("an empty tail of the file")
        return Span(max(0, size - suffix), size - 1)
    first = int(first_text)
    last = size - 1 if not last_text else int(last_text)
    if last_text and last < first:
        raise Unsatisfiable(f"range {first}-{last} ends before it starts")
    if first >= size:
        raise Unsatisfiable(f"range starts at {first}, past the file's {size} bytes")
    return Span(first, min(last, size - 1))
