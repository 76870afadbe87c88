"""Content-Disposition (RFC 6266) for downloads."""

from __future__ import annotations

from urllib.parse import quote

from app.kit.bidi import escape_bidi


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """RFC 6266: an ASCII fallback plus `filename*` when the name is not ASCII.
    Bidi controls are shown, not obeyed: the saved name reads as it is."""
    printable = "".join(ch for ch in filename if ch >= " " and ch != "\x7f")
    cleaned = escape_bidi(printable) or "download"
    fallback = "".join(ch if ch.isascii() and ch not in '"\\' else "_" for ch in cleaned)
    value = f'{disposition}; filename="{fallback}"'
    if fallback != cleaned:
        value += f"; filename*=UTF-8''{quote(cleaned, safe='')}"
    return value
