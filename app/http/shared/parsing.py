"""Total parsers for numbers in client input (headers, query strings, XML).

``str.isdigit()`` is True for ``'²'`` and ``'٣'``, and ``int()`` accepts
``' 1_0 '`` and refuses more than 4300 digits, so neither alone decides what a
client may send. Every number a client sends is read here: ASCII digits only,
with a cap on their count, and ``None`` for anything else, so the caller
answers with its own 4xx.
"""

from __future__ import annotations

from typing import Final

#: Enough digits for any 64-bit size or offset; callers pass smaller caps.
MAX_DECIMAL_DIGITS: Final = 19


def parse_decimal(text: str, *, max_digits: int = MAX_DECIMAL_DIGITS) -> int | None:
    """The value of ``text`` if it is 1 to ``max_digits`` ASCII digits, else ``None``.

    No sign, no blanks, no underscores: callers strip what their syntax allows.
    """
    if not 0 < len(text) <= max_digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)
