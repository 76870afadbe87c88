"""Content-Disposition (RFC 6266) for downloads."""

from __future__ import annotations

from urllib.parse import quote


def content_disposition(filename: str, disposition: str = "attachment") -> str:
    """RFC 6266: an ASCII fallback plus `filename*` when the name is not ASCII."""
    cleaned = "".join(ch for ch in filename if ch >= " " and ch != "\x7f") or "download"
    fallback = "".join(ch if ch.isascii() and ch not in '"\\' else "_" for ch in cleaned)
    value = f'{disposition}; filename="{fallback}"'
    if fallback != cleaned:
        value += f"; filename*=UTF-8''{quote(cleaned, safe='')}"
    return value
