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


class FileList(BaseModel):
    items: list[FileOut]
    next_cursor: str | None


class BotReadiness(BaseModel):
    bot_id: int
    username: str | None
    usable: bool
    cooling_down_seconds: float
    queued: int
    running: bool


class Readiness(BaseModel):
    status: str
    database: bool
    usable_bots: int
    bots: list[BotReadiness]
