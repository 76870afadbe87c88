"""Foreign posts in the storage channel, as `teleuploader check` reports them.

The channel must belong to the service alone: after an unclean stop,
reconciliation deletes every message above the chat's watermark that no row
holds (app/store/reconcile.py), so a post made there by a person or another
bot would be deleted too. Message ids in a channel rise one by one, so every
id between the watermark and a fresh probe message is the service's (a row
holds it, the service deleted it, or a send of it is in flight) or foreign:
the audit counts the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chat_fill import ChatFillRepository
from app.db.gc import GcRepository
from app.db.intents import IntentRepository, WatermarkRepository
from app.db.session import session_scope
from app.db.types import utcnow
from app.telegram.client import BotClient
from app.telegram.errors import TelegramError

AUDIT_PROBE_BYTES = b"\0"
AUDIT_PROBE_FILE_NAME = "check-probe.bin"
AUDIT_PROBE_CAPTION = "teleuploader check probe"


@dataclass(frozen=True)
class ChannelAudit:
    """Of the ids after `watermark` and before `probe_id`, `foreign` were
    posted by someone else (0 when every id is the service's)."""

    chat_id: int
    watermark: int
    probe_id: int
    foreign: int


async def audit_channel(
    sessionmaker: async_sessionmaker[AsyncSession], client: BotClient, chat_id: int
) -> ChannelAudit | None:
    """Post a probe (deleted at once), then count the posts below it that the
    service did not make. None when the chat had no watermark yet: what came
    before the service's first message is not its to judge, and this probe
    now marks where judging starts."""
    probe = await client.send_document(
        chat_id, AUDIT_PROBE_BYTES, AUDIT_PROBE_FILE_NAME, caption=AUDIT_PROBE_CAPTION
    )
    deleted = True
    try:
        await client.delete_message(chat_id, probe.message_id)
    except TelegramError:
        deleted = False
    # Read after the probe is posted: a send that Telegram finished before it
    # is then either recorded (a row) or still in flight (an open intent).
    async with session_scope(sessionmaker) as session:
        # The probe is the chat's newest message: how many it holds now.
        await ChatFillRepository(session).raise_to({chat_id: probe.message_id})
        marks = WatermarkRepository(session)
        mark = await marks.get(chat_id)
        if mark is None:
            await marks.ensure(chat_id, probe.message_id)
            audit = None
        else:
            held = await marks.held_count(chat_id, mark.message_id, probe.message_id)
            in_flight = await IntentRepository(session).open_in_chat(chat_id)
            unexplained = probe.message_id - 1 - mark.message_id
            unexplained -= held + mark.deleted_above + in_flight
            audit = ChannelAudit(
                chat_id=chat_id,
                watermark=mark.message_id,
                probe_id=probe.message_id,
                foreign=max(0, unexplained),
            )
        if deleted:
            await marks.note_deleted(chat_id, probe.message_id)
        else:
            # The service's GC deletes it later.
            await GcRepository(session).add(
                bot_id=probe.bot_id,
                chat_id=chat_id,
                message_id=probe.message_id,
                file_unique_id=probe.file_unique_id,
                reason="orphaned",
                posted_at=utcnow(),
            )
    return audit
