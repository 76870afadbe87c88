"""Which databases TeleUploader speaks to, read from a DATABASE_URL.

Here, below both the settings (which refuse another scheme with one line
naming the setting) and the database layer (which connects).
"""

from __future__ import annotations

from sqlalchemy.engine import make_url
from sqlalchemy.engine.url import URL


def normalize_url(url: str) -> URL:
    """Pick our async drivers for plain `postgres(ql)://` and `sqlite://` URLs."""
    # make_url does not know the "postgres" scheme Heroku-style URLs use.
    if url.startswith("postgres://"):
        url = "postgresql://" + url.removeprefix("postgres://")
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgresql+asyncpg"):
        return parsed.set(drivername="postgresql+asyncpg")
    if parsed.drivername in ("sqlite", "sqlite+aiosqlite"):
        return parsed.set(drivername="sqlite+aiosqlite")
    raise ValueError(
        f"unsupported database URL scheme {parsed.drivername!r}: use postgresql:// or sqlite://"
    )
