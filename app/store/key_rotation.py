"""`teleuploader encryption rotate`: every sealed chunk's data key re-wrapped
under the current master key (docs/encryption.md).

Only the database changes: a data key, unwrapped with the master key that
wrapped it and wrapped again with the current one; Telegram's bytes were
sealed under the data key (through each copy's key) and stay as they are.
A batch is one transaction, and a row is rewritten only if it is still as
it was read, so a pass can run beside the service, stop anywhere, and be
run again: it takes up what is left. Afterwards no chunk names the old
master keys, and they can leave ENCRYPTION_KEYS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.sealing import SealingRepository
from app.db.session import session_scope
from app.sealing.keys import Keyring, UnwrapFailed, unwrap, wrap

log = structlog.get_logger("app.store.key_rotation")

BATCH = 500


@dataclass(slots=True)
class Rotation:
    """How a pass went: re-wrapped, and left alone (their master key is not
    configured, or does not unwrap them)."""

    rewrapped: int = 0
    unavailable: int = 0


async def rotate(
    sessionmaker: async_sessionmaker[AsyncSession],
    keyring: Keyring,
    *,
    batch: int = BATCH,
    on_progress: Callable[[Rotation], None] | None = None,
) -> Rotation:
    current = keyring.current
    done = Rotation()
    after = 0
    while True:
        async with session_scope(sessionmaker) as session:
            repo = SealingRepository(session)
            rows = await repo.wrapped_not_under(current.id, after, batch)
            for row in rows:
                master = keyring.get(row.key_id)
                try:
                    if master is None:
                        raise UnwrapFailed(f"master key {row.key_id} is not configured")
                    data_key = unwrap(master, row.wrapped)
                except UnwrapFailed:
                    done.unavailable += 1
                    log.warning(
                        "rotation_key_unavailable", chunk_id=row.chunk_id, key_id=row.key_id
                    )
                    continue
                if await repo.rewrap(row.chunk_id, row, current.id, wrap(current, data_key)):
                    done.rewrapped += 1
        if not rows:
            break
        after = rows[-1].chunk_id
        if on_progress is not None:
            on_progress(done)
    log.info(
        "rotation_done", key_id=current.id, rewrapped=done.rewrapped, unavailable=done.unavailable
    )
    return done
