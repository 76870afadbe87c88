"""Bot leases: which instance may call Telegram with a bot token, until when.

Every statement here is one statement in its own short transaction: no
session-level lock or state, which pgbouncer's transaction pooling would not
keep. Taking and renewing are the same upsert; its WHERE lets it through only
when the lease is free (expired or released) or already ours, so of two
instances racing for a free lease exactly one gets a row back.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, exists, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.dialects import upsert_insert
from app.db.locking import dialect_name
from app.db.models import BotLease, Instance
from app.db.types import utcnow


@dataclass(frozen=True, slots=True)
class LeaseRow:
    token_hash: str
    bot_id: int
    owner: str
    expires_at: datetime
    cooldown_until: datetime
    # False: its owner's instance row is gone (it died and was claimed).
    owner_registered: bool


class LeaseRepository:
    def __init__(self, session: AsyncSession) -> None:
        self._session = session

    async def take(
        self,
        token_hash: str,
        bot_id: int,
        owner: str,
        *,
        seconds: float,
        cooldown_until: datetime,
        now: datetime | None = None,
    ) -> datetime | None:
        """Take or renew the lease for `seconds` if it is free (expired or
        released) or ours. Not because its owner has no instance row: a live
        instance's row can be claimed by mistake while it still calls.

        Returns the lease's cooldown end (the later of ours and the one on
        the row, so a new holder honours its predecessor's 429), or None
        when another instance holds it."""
        now = now or utcnow()
        values = {
            "token_hash": token_hash,
            "bot_id": bot_id,
            "owner": owner,
            "expires_at": now + timedelta(seconds=seconds),
            "cooldown_until": cooldown_until,
        }
        statement = upsert_insert(dialect_name(self._session), BotLease).values(values)
        later_cooldown = case(
            (
                BotLease.cooldown_until > statement.excluded.cooldown_until,
                BotLease.cooldown_until,
            ),
            else_=statement.excluded.cooldown_until,
        )
        upsert = statement.on_conflict_do_update(
            index_elements=[BotLease.token_hash],
            set_={
                "owner": statement.excluded.owner,
                "expires_at": statement.excluded.expires_at,
                "cooldown_until": later_cooldown,
            },
            where=(BotLease.expires_at <= now) | (BotLease.owner == owner),
        ).returning(BotLease.cooldown_until)
        row = (await self._session.execute(upsert)).first()
        if row is None:
            return None
        cooldown: datetime = row[0]
        return cooldown

    async def release(
        self, token_hash: str, owner: str, *, cooldown_until: datetime, now: datetime | None = None
    ) -> bool:
        """Give the lease up now (it stays free for anyone); keeps the cooldown."""
        now = now or utcnow()
        result = await self._session.execute(
            update(BotLease)
            .where(BotLease.token_hash == token_hash, BotLease.owner == owner)
            .values(
                expires_at=now,
                cooldown_until=case(
                    (BotLease.cooldown_until > cooldown_until, BotLease.cooldown_until),
                    else_=cooldown_until,
                ),
            )
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def all(self) -> builtins.list[LeaseRow]:
        registered = exists().where(Instance.id == BotLease.owner)
        rows = await self._session.execute(
            select(BotLease, registered.label("registered")).order_by(BotLease.bot_id)
        )
        return [
            LeaseRow(
                lease.token_hash,
                lease.bot_id,
                lease.owner,
                lease.expires_at,
                lease.cooldown_until,
                bool(is_registered),
            )
            for lease, is_registered in rows
        ]

    async def publish_backlog(self, instance_id: str, backlog: int) -> bool:
        """Publish the backlog (and beat); False if the instance has no row."""
        result = await self._session.execute(
            update(Instance)
            .where(Instance.id == instance_id)
            .values(backlog=backlog, heartbeat_at=utcnow())
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def backlogs(self, stale_after: float) -> dict[str, int]:
        """The backlog each live instance published, by id."""
        fresh = utcnow() - timedelta(seconds=stale_after)
        rows = await self._session.execute(
            select(Instance.id, Instance.backlog).where(Instance.heartbeat_at >= fresh)
        )
        return {instance_id: backlog for instance_id, backlog in rows}
