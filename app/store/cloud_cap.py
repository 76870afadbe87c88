"""Chunks the cloud cannot serve: a move from a local Bot API server back to
api.telegram.org is refused while there are any.

A local server (`--local`) takes chunks of any size up to 2000 MB, and its
getFile has no cap. Telegram's own server refuses to download a file over
20 MiB (telegram-bot-api Client.h: MAX_DOWNLOAD_FILE_SIZE = 20 << 20;
Client.cpp, do_get_file: "file is too big"): a chunk above that, stored
while on a local server, would never be read back from the cloud.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config.settings import CLOUD_GETFILE_CAP
from app.db.chunks import ChunkRepository
from app.db.session import session_scope
from app.sealing.layout import largest_plaintext


async def chunks_above_cloud_cap(sessionmaker: async_sessionmaker[AsyncSession]) -> int:
    """How many stored chunks the cloud's getFile would refuse."""
    async with session_scope(sessionmaker) as session:
        return await ChunkRepository(session).count_larger(
            CLOUD_GETFILE_CAP, largest_plaintext(CLOUD_GETFILE_CAP)
        )


def cloud_refusal(count: int) -> str:
    """What to tell an operator who moves such chunks to the cloud (one line)."""
    return (
        f"{count} stored chunks are larger than the 20 MiB api.telegram.org's getFile serves "
        "(they were stored through a local Bot API server), so they could never be read "
        "back: keep TELEGRAM_LOCAL_SERVER=true and TELEGRAM_API_BASE on the local server, "
        "or first move them: lower CHUNK_SIZE to 19 MiB or less there and upload the objects "
        "that use them again (deploy/README.md, Leaving a local Bot API server)"
    )
