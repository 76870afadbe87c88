"""The fleet: running instances, the bot leases they hold, and the file
paths they ask each other for.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import Base
from app.db.types import UtcDateTime, utcnow


class Instance(Base):
    """A running service process, alive while its heartbeat is fresh.

    Rows it owns (spooled parts) are taken over by another instance only once
    its heartbeat is stale, so two processes on one database never retire each
    other's work.
    """

    __tablename__ = "instances"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    # Jobs waiting in its dispatcher at its last lease round: bots go where
    # the work is (app/store/leases.py).
    backlog: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The block digests it can check, comma-separated (app/store/blocks.py):
    # new chunks get a digest only once every live instance reads it. The
    # default is what an instance of an earlier release reads.
    block_digests: Mapped[str] = mapped_column(
        String(64), default="sha256", server_default="sha256"
    )

    def __repr__(self) -> str:
        return f"Instance(id={self.id!r}, host={self.host!r}, pid={self.pid})"


class BotLease(Base):
    """Which instance may call Telegram with a bot token, until when.

    One call per token holds across the fleet because only the lease holder
    runs a worker for the bot. Keyed by a hash of the token (the token itself
    is a secret and never stored). A 429 cooldown is kept here so the next
    holder honours it.
    """

    __tablename__ = "bot_leases"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    bot_id: Mapped[int] = mapped_column(BigInteger)
    owner: Mapped[str] = mapped_column(String(32))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)
    cooldown_until: Mapped[datetime] = mapped_column(UtcDateTime)

    def __repr__(self) -> str:
        return f"BotLease(bot_id={self.bot_id}, owner={self.owner!r})"


class SharedFilePath(Base):
    """A file_path one instance asked for a chunk whose bot another instance
    holds, and the holder's answer (app/store/shared_paths.py).

    Downloading a file's bytes needs no lease (it is no Bot API method call),
    but getFile does: only the bot's holder may ask Telegram for the path.
    """

    __tablename__ = "shared_file_paths"

    bot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    file_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    requested_at: Mapped[datetime] = mapped_column(UtcDateTime)
    file_path: Mapped[str | None] = mapped_column(String(255), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)
