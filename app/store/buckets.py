"""Buckets (S3's namespaces for keys). The native API's bucket has no row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.buckets import BucketNotEmpty, BucketRepository
from app.db.session import session_scope

__all__ = ["BucketInfo", "BucketNotEmpty", "BucketStore"]


@dataclass(frozen=True, slots=True)
class BucketInfo:
    name: str
    created_at: datetime


class BucketStore:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker

    async def list(self) -> list[BucketInfo]:
        async with session_scope(self._sessionmaker) as session:
            rows = await BucketRepository(session).list()
            return [BucketInfo(row.name, row.created_at) for row in rows]

    async def create(self, name: str) -> bool:
        """True if created, False if it existed."""
        async with session_scope(self._sessionmaker) as session:
            return await BucketRepository(session).create(name)

    async def exists(self, name: str) -> bool:
        async with session_scope(self._sessionmaker) as session:
            return await BucketRepository(session).exists(name)

    async def delete(self, name: str) -> bool:
        """False if there was no such bucket; raises BucketNotEmpty."""
        async with session_scope(self._sessionmaker) as session:
            return await BucketRepository(session).delete(name)
