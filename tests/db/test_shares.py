"""The SQL of share links (app/db/shares.py), on both backends: a download
counted once per session however its requests race, the last download of
a share had by one session only, sessions that end, wrong passwords kept
and forgotten, and the journal's rows for every change of a share."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.api_keys import ApiKeyRepository
from app.db.models import JournalEntry, Share, ShareSession
from app.db.retry import in_transaction
from app.db.session import session_scope
from app.db.shares import NewShare, Opened, SessionRules, ShareRepository

Sessions = async_sessionmaker[AsyncSession]
T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
RULES = SessionRules(idle=timedelta(hours=1), max_age=timedelta(hours=24), max_bytes=300)


async def new_share(sessionmaker: Sessions, *, max_downloads: int | None = None) -> int:
    async with session_scope(sessionmaker) as session:
        key, _ = await ApiKeyRepository(session).create(f"owner-{max_downloads}", scope="read")
        share = await ShareRepository(session).create(
            NewShare(
                token=f"token-{max_downloads}",
                owner_key_id=key.id,
                bucket="_native",
                public_id="p" * 24,
                prefix=None,
                disposition="attachment",
                password_hash=None,
                created_at=T0,
                expires_at=None,
                max_downloads=max_downloads,
            )
        )
    return share.id


async def open_download(
    sessionmaker: Sessions, share_id: int, key: str, now: datetime = T0
) -> Opened:
    async def work(session: AsyncSession) -> Opened:
        return await ShareRepository(session).open_download(share_id, key, now, RULES)

    return await in_transaction(sessionmaker, work)


async def downloads(sessionmaker: Sessions, share_id: int) -> int:
    async with session_scope(sessionmaker) as session:
        found = await ShareRepository(session).get(share_id)
    assert found is not None
    return found.downloads


async def test_racing_requests_of_one_session_count_once(sessionmaker: Sessions) -> None:
    share_id = await new_share(sessionmaker)
    opened = await asyncio.gather(*(open_download(sessionmaker, share_id, "k") for _ in range(6)))
    assert sorted(o.value for o in opened) == ["continued"] * 5 + ["counted"]
    assert await downloads(sessionmaker, share_id) == 1


async def test_the_last_download_goes_to_one_session_only(sessionmaker: Sessions) -> None:
    share_id = await new_share(sessionmaker, max_downloads=2)
    opened = await asyncio.gather(
        *(open_download(sessionmaker, share_id, f"key-{n}") for n in range(5))
    )
    assert sorted(o.value for o in opened) == ["counted"] * 2 + ["refused"] * 3
    assert await downloads(sessionmaker, share_id) == 2
    # A session that counted goes on; the refused ones left nothing behind.
    counted = [f"key-{n}" for n, o in enumerate(opened) if o is Opened.COUNTED]
    assert await open_download(sessionmaker, share_id, counted[0]) is Opened.CONTINUED


async def test_a_session_ends_idle_old_or_once_it_sent_enough(sessionmaker: Sessions) -> None:
    share_id = await new_share(sessionmaker)
    assert await open_download(sessionmaker, share_id, "idle") is Opened.COUNTED
    later = T0 + RULES.idle - timedelta(seconds=1)
    assert await open_download(sessionmaker, share_id, "idle", later) is Opened.CONTINUED
    idle = later + RULES.idle + timedelta(seconds=1)
    assert await open_download(sessionmaker, share_id, "idle", idle) is Opened.COUNTED

    assert await open_download(sessionmaker, share_id, "old") is Opened.COUNTED
    # A request every 50 minutes keeps it alive, until its age is up.
    for minutes in range(50, 24 * 60, 250):
        async with session_scope(sessionmaker) as session:  # as if every 50 minutes
            await session.execute(
                ShareSession.__table__.update()
                .where(ShareSession.key_hash == "old")
                .values(last_at=T0 + timedelta(minutes=minutes - 50))
            )
        step = T0 + timedelta(minutes=minutes)
        assert await open_download(sessionmaker, share_id, "old", step) is Opened.CONTINUED
    old = T0 + RULES.max_age + timedelta(seconds=1)
    async with session_scope(sessionmaker) as session:
        await session.execute(
            ShareSession.__table__.update()
            .where(ShareSession.key_hash == "old")
            .values(last_at=old - timedelta(minutes=50))
        )
    assert await open_download(sessionmaker, share_id, "old", old) is Opened.COUNTED

    assert await open_download(sessionmaker, share_id, "bytes") is Opened.COUNTED
    async with session_scope(sessionmaker) as session:
        await ShareRepository(session).add_sent("bytes", RULES.max_bytes - 1)
    assert await open_download(sessionmaker, share_id, "bytes") is Opened.CONTINUED
    async with session_scope(sessionmaker) as session:
        await ShareRepository(session).add_sent("bytes", 1)
    assert await open_download(sessionmaker, share_id, "bytes") is Opened.COUNTED
    assert await downloads(sessionmaker, share_id) == 6


async def test_a_revoked_share_counts_nothing_and_forgets_its_sessions(
    sessionmaker: Sessions,
) -> None:
    share_id = await new_share(sessionmaker)
    assert await open_download(sessionmaker, share_id, "k") is Opened.COUNTED
    async with session_scope(sessionmaker) as session:
        assert await ShareRepository(session).revoke(share_id, T0)
        assert not await ShareRepository(session).revoke(share_id, T0)
    assert await open_download(sessionmaker, share_id, "other") is Opened.REFUSED
    async with session_scope(sessionmaker) as session:
        assert await ShareRepository(session).change(share_id, {"max_downloads": 9}) is None
        assert await ShareRepository(session).list(owner_key_id=None, after=None, limit=10) == []


async def test_wrong_passwords_are_kept_for_the_window_then_forgotten(
    sessionmaker: Sessions,
) -> None:
    share_id = await new_share(sessionmaker)
    window = timedelta(minutes=10)
    async with session_scope(sessionmaker) as session:
        repo = ShareRepository(session)
        for minute in range(3):
            now = T0 + timedelta(minutes=minute)
            await repo.record_failure(share_id, "198.51.100.7", now, now - window)
        of_share, of_address = await repo.failures_since(share_id, "198.51.100.7", T0 - window)
        assert len(of_share) == len(of_address) == 3
        _, elsewhere = await repo.failures_since(share_id, "203.0.113.9", T0 - window)
        assert elsewhere == []
        much_later = T0 + timedelta(hours=1)
        await repo.record_failure(share_id, "203.0.113.9", much_later, much_later - window)
        of_share, _ = await repo.failures_since(share_id, "x", T0 - window)
        assert len(of_share) == 1  # the old ones went when this one was kept


async def test_every_change_of_a_share_is_journaled(sessionmaker: Sessions) -> None:
    share_id = await new_share(sessionmaker)
    assert await open_download(sessionmaker, share_id, "k") is Opened.COUNTED
    async with session_scope(sessionmaker) as session:
        await session.execute(Share.__table__.delete().where(Share.id == share_id))
        named = await session.scalars(
            select(JournalEntry.row_key).where(JournalEntry.table_name == "shares")
        )
        keys = [json.loads(key) for key in named]
    # Made, counted, deleted: each names the share by its id.
    assert keys == [[share_id]] * 3
