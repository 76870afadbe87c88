"""Characters that act instead of showing. Bidirectional controls (U+202E
RIGHT-TO-LEFT OVERRIDE and its kind): invisible, they reorder the text
around them, so that `invoice\u202egnp.exe` is shown as `invoiceexe.png`.
Control characters: in a terminal ESC begins an escape sequence (which can
retitle the window, rewrite the screen, or ask the terminal to answer), CR
and BS overwrite what was shown.

Names the service makes itself (native and tus file names) have bidi
controls stripped. S3 keys must come back exactly as they were sent, so they
are kept, and escaped as `[U+202E]` wherever they are shown to a person: the
Content-Disposition of a download, the web page (app/http/web/static/api.js keeps
the same list). Wherever a name reaches a terminal or a log line for humans
(the CLI's output, LOG_FORMAT=console), `escape_controls` also spells out
the control characters, as `\x1b`.
"""

from __future__ import annotations

import re
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


# C0, DEL and C1 (0x9b is a one-byte CSI to many terminals).
_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """`text` as a terminal shows it without acting on it: control characters
    as `\\x1b`, bidi controls as `[U+202E]`."""
    if text.isprintable():  # every ASCII name, most others: nothing to do
        return text
    text = _CONTROLS.sub(lambda control: f"\\x{ord(control.group()):02x}", text)
    return escape_bidi(text)
