"""Whether a name can be an HTTP header's (RFC 9110's token): ASCII letters,
digits and ``!#$%&'*+-.^_`|~``. Names that arrive as headers always are one;
names taken from elsewhere (a POST Object form's fields) must be checked
before they are sent back as headers."""

from __future__ import annotations

import re
from typing import Final

_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def is_header_name(name: str) -> bool:
    return _TOKEN.fullmatch(name) is not None
