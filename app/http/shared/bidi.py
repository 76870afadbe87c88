"""Bidirectional control characters (U+202E RIGHT-TO-LEFT OVERRIDE and its
kind): invisible, they reorder the text around them, so that
`invoice\u202egnp.exe` is shown as `invoiceexe.png`.

Names the service makes itself (native and tus file names) have them
stripped. S3 keys must come back exactly as they were sent, so they are kept,
and escaped as `[U+202E]` wherever they are shown to a person: the
Content-Disposition of a download, the web page (app/http/web/static/api.js keeps
the same list).
"""

from __future__ import annotations

from typing import Final

BIDI_CONTROLS: Final = frozenset(
    "\u061c"  # ARABIC LETTER MARK
    "\u200e\u200f"  # LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
    "\u202a\u202b\u202c\u202d\u202e"  # embeddings, POP DIRECTIONAL FORMATTING, overrides
    "\u2066\u2067\u2068\u2069"  # isolates, POP DIRECTIONAL ISOLATE
)


def strip_bidi(text: str) -> str:
    return "".join(ch for ch in text if ch not in BIDI_CONTROLS)


def escape_bidi(text: str) -> str:
    """`text` with each bidi control shown as `[U+XXXX]`."""
    return "".join(f"[U+{ord(ch):04X}]" if ch in BIDI_CONTROLS else ch for ch in text)
