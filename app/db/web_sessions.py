"""Sign-ins of the web page: a random token in an HttpOnly cookie names a row
holding the token's SHA-256, the key it was opened with, and its expiry."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import ApiKey, WebSession
from app.db.types import utcnow

# Tokens are 43 characters; anything far longer is not one of ours.
_MAX_TOKEN_LENGTH = 128
#: Sessions one key may have at once; a new one ends the oldest past this.
MAX_SESSIONS_PER_KEY = 10


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class WebSessionRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def open(self, key: ApiKey, lifetime: timedelta, *, now: datetime | None = None) -> str:
        """A new session for `key`; returns its token (not stored, only its hash).
        Expired sessions of every key are swept on the way, and the key's
        oldest past MAX_SESSIONS_PER_KEY end."""
        now = now or utcnow()
        await self._session.execute(delete(WebSession).where(WebSession.expires_at <= now))
        token = secrets.token_urlsafe(32)
        self._session.add(
            WebSession(
                token_hash=_hash(token),
                api_key_id=key.id,
                created_at=now,
                expires_at=now + lifetime,
            )
        )
        await self._session.flush()
        newest = (
            select(WebSession.id)
            .where(WebSession.api_key_id == key.id)
            .order_by(WebSession.id.desc())
            .limit(MAX_SESSIONS_PER_KEY)
        )
        await self._session.execute(
            delete(WebSession).where(
                WebSession.api_key_id == key.id, WebSession.id.not_in(newest.scalar_subquery())
            )
        )
        return token

    async def key_of(self, token: str, *, now: datetime | None = None) -> ApiKey | None:
        """The active key a live session was opened with, or None."""
        if not token or len(token) > _MAX_TOKEN_LENGTH:
            return None
        row = await self._session.execute(
            select(ApiKey)
            .join(WebSession, WebSession.api_key_id == ApiKey.id)
            .where(
                WebSession.token_hash == _hash(token),
                WebSession.expires_at > (now or utcnow()),
                ApiKey.revoked_at.is_(None),
            )
        )
        return row.scalar_one_or_none()

    async def close(self, token: str) -> None:
        if token and len(token) <= _MAX_TOKEN_LENGTH:
            await self._session.execute(
                delete(WebSession).where(WebSession.token_hash == _hash(token))
            )
