"""Response bodies of the native API (they also document it in /docs)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class FileOut(BaseModel):
    public_id: str
    file_name: str
    mime_type: str
    size_bytes: int
    sha256: str | None
    etag: str
    created_at: datetime
    updated_at: datetime
    download_url: str
    # The name it was stored under with `PUT /api/files/{path}`, folders
    # included ("photos/2024/a.jpg"); None for uploads that have no path.
    stored_path: str | None = None
    # In a file's own answer (/file/{id}/info): "degraded" when a chunk of it
    # has fewer intact copies in Telegram than REPLICAS (the scrub repairs
    # it), "lost" when one has none (it cannot be served); None: whole.
    damage: str | None = None


class FileList(BaseModel):
    items: list[FileOut]
    next_cursor: str | None


class BotReadiness(BaseModel):
    bot_id: int
    username: str | None
    usable: bool
    checking: bool  # its getMe check has not passed yet
    # The storage chats it may post to (its check passed there).
    chats: list[int]
    cooling_down_seconds: float
    queued: int
    running: bool


class Readiness(BaseModel):
    """`status` for everyone; the rest only with metrics access."""

    status: str
    #: Why the status is `degraded` (ready, but something needs an operator).
    reason: str | None = None
    database: bool | None = None
    usable_bots: int | None = None
    bots: list[BotReadiness] | None = None
