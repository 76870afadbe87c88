"""User metadata values (`x-amz-meta-*`) beyond US-ASCII, as AWS documents
them: "Values of such headers are character decoded as per RFC 2047 before
storing and encoded as per RFC 2047 to make them mail-safe before returning.
If the string contains only US-ASCII characters, it is presented as is."

A value arrives as header bytes (Starlette hands them over as Latin-1 text).
UTF-8 bytes are read as UTF-8, and RFC 2047 encoded-words
(`=?UTF-8?B?...?=`) are decoded; either way the stored value is the text the
client meant, and its size is counted in UTF-8 bytes. Bytes that are not
UTF-8 stay as Latin-1 text. On the way out, a value with anything beyond
US-ASCII becomes one RFC 2047 encoded-word of its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from typing import Final

_ENCODED_WORD_START: Final = "=?"


def _has_control(text: str) -> bool:
    # A tab is allowed in a header value; other control characters are not.
    return any((char < " " and char != "\t") or char == "\x7f" for char in text)


def _decoded_words(text: str) -> str:
    if _ENCODED_WORD_START not in text:
        return text
    try:
        decoded = str(make_header(decode_header(text)))
    except (HeaderParseError, LookupError, UnicodeError, binascii.Error, ValueError):
        return text  # not valid RFC 2047: kept as sent
    return decoded


def from_header(value: str) -> str:
    """A received header value (Latin-1 text of its bytes) as the text stored.

    A value whose decoding holds control characters is kept as sent: they
    could not go back out in a header (nor NUL into Postgres).
    """
    text = value
    if not text.isascii():
        try:
            text = text.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return value
    text = _decoded_words(text)
    return value if _has_control(text) and text != value else text


def to_header(value: str) -> str:
    """A stored value as a header value: as is in US-ASCII, else RFC 2047."""
    if value.isascii():
        return value
    encoded = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode("ascii")
    return f"=?UTF-8?B?{encoded}?="
