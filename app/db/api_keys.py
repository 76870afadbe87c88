"""API keys: created once, stored as a hash, verified by hash lookup."""

from __future__ import annotations

import builtins
import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from app.db.models import KEY_SCOPES, ApiKey, KeyScope
from app.db.types import utcnow

KEY_PREFIX = "tu_"
# Recording every use would make every API request a database write (on
# SQLite, a turn at the one write lock); once a minute is enough to answer
# "is this key still used?".
LAST_USED_RESOLUTION = timedelta(minutes=1)
# Keys are 46 characters; anything far longer is not one of ours.
_MAX_KEY_LENGTH = 256


class ApiKeyNameTaken(ValueError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"an API key named {name!r} already exists")


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


class ApiKeyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def create(self, name: str, *, scope: KeyScope) -> tuple[ApiKey, str]:
        """A new key and its plaintext, which is not stored and cannot be shown again."""
        if not name.strip():
            raise ValueError("an API key needs a name")
        if scope not in KEY_SCOPES:
            raise ValueError(f"unknown scope {scope!r}: use one of {', '.join(KEY_SCOPES)}")
        plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(
            name=name,
            # The fixed part only: no character of the secret is kept in the clear.
            prefix=KEY_PREFIX,
            key_hash=hash_key(plaintext),
            scope=scope,
            created_at=utcnow(),
        )
        try:
            async with self._session.begin_nested():
                self._session.add(key)
        except IntegrityError:
            raise ApiKeyNameTaken(name) from None
        return key, plaintext

    async def verify(self, plaintext: str, *, now: datetime | None = None) -> ApiKey | None:
        """The active key `plaintext` is, or None. Commit afterwards: it records the use.

        The lookup is by SHA-256, so timing reveals nothing about stored keys
        (an attacker cannot choose hash prefixes); the final comparison is
        constant-time anyway.
        """
        if not plaintext or len(plaintext) > _MAX_KEY_LENGTH:
            return None
        digest = hash_key(plaintext)
        key = await self._session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
        if key is None or key.revoked or not hmac.compare_digest(key.key_hash, digest):
            return None
        now = now or utcnow()
        if key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION:
            await self._record_use(key, now)
        return key

    async def _record_use(self, key: ApiKey, now: datetime) -> None:
        """Best effort: a request must not fail because its key's timestamp could not be set.

        Concurrent requests with one key all want to write here. On Postgres
        the condition lets only the first one write. On SQLite this
        transaction has already read, so once another connection has written
        it may not write at all (SQLITE_BUSY, "database is locked"); the
        savepoint confines that failure, and the other writer has recorded
        the use anyway.
        """
        stale = or_(
            ApiKey.last_used_at.is_(None), ApiKey.last_used_at <= now - LAST_USED_RESOLUTION
        )
        try:
            async with self._session.begin_nested():
                await self._session.execute(
                    update(ApiKey)
                    .where(ApiKey.id == key.id, stale)
                    .values(last_used_at=now)
                    .execution_options(synchronize_session=False)
                )
        except OperationalError:
            return
        set_committed_value(key, "last_used_at", now)

    async def list(self) -> builtins.list[ApiKey]:
        return builtins.list(await self._session.scalars(select(ApiKey).order_by(ApiKey.name)))

    async def revoke(self, name: str, *, now: datetime | None = None) -> bool:
        """Revoke the key called `name`; False if there is no such active key.

        A revoked key keeps its name, so the name cannot be reused.
        """
        result = await self._session.execute(
            update(ApiKey)
            .where(ApiKey.name == name, ApiKey.revoked_at.is_(None))
            .values(revoked_at=now or utcnow())
            .execution_options(synchronize_session="fetch")
        )
        return bool(getattr(result, "rowcount", 0))
