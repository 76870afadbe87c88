"""The trash: deleted and replaced objects, listed and restored
(TRASH_RETENTION_SECONDS; docs/http-api.md, "Trash").

A caller reaches the trash of what it may change: a `write` key its own
native files, an `admin` key every native file and, as on the page's bucket
view, S3 objects (docs/security.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from app.config.settings import Settings
from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ServicesDep, SettingsDep, WriteKey
from app.http.api.errors import ApiError
from app.http.api.files import parse_id_cursor
from app.http.shared.file_names import (
    MAX_FILE_NAME_LENGTH,
    NAMED_PREFIX,
    NATIVE_BUCKET,
    clean_name,
    download_url,
)
from app.store.callers import Caller
from app.store.limits import MAX_KEY_LENGTH, key_bytes
from app.store.object_write import object_name
from app.store.service import ObjectInfo
from app.store.trash import NameTaken, RestoreRefused, TrashItem, TrashScope, TrashStore

router = APIRouter(tags=["trash"], route_class=SmallBodyRoute)


def get_trash(services: ServicesDep) -> TrashStore:
    return services.trash


TrashDep = Annotated[TrashStore, Depends(get_trash)]


class TrashedOut(BaseModel):
    public_id: str
    # A native file's name; for an S3 object, the last part of its key.
    name: str
    # Set for S3 objects only (a native file is known by its name).
    bucket: str | None
    key: str | None
    size_bytes: int
    reason: Literal["deleted", "replaced"]
    trashed_at: datetime
    expires_at: datetime


class TrashList(BaseModel):
    items: list[TrashedOut]
    next_cursor: str | None


class RestoredOut(BaseModel):
    public_id: str
    name: str
    bucket: str | None
    key: str | None
    size_bytes: int
    # A native file's link (the same id as in the trash); None for S3 objects.
    download_url: str | None


def _scope(key: Caller) -> TrashScope:
    if key.allows("admin"):
        return TrashScope(bucket=None, owner_key_id=None)
    return TrashScope(bucket=NATIVE_BUCKET, owner_key_id=key.id)


def _trashed_out(item: TrashItem) -> TrashedOut:
    s3 = item.bucket != NATIVE_BUCKET
    return TrashedOut(
        public_id=item.info.public_id,
        name=item.info.name,
        bucket=item.bucket if s3 else None,
        key=item.key if s3 else None,
        size_bytes=item.info.size,
        reason="replaced" if item.reason == "replaced" else "deleted",
        trashed_at=item.trashed_at,
        expires_at=item.expires_at,
    )


def _restored_out(request: Request, settings: Settings, info: ObjectInfo) -> RestoredOut:
    native = info.bucket == NATIVE_BUCKET
    return RestoredOut(
        public_id=info.public_id,
        name=info.name,
        bucket=None if native else info.bucket,
        key=None if native else info.key,
        size_bytes=info.size,
        download_url=download_url(request, settings, info.public_id) if native else None,
    )


@router.get("/api/trash", response_model=TrashList)
async def list_trash(
    trash: TrashDep,
    key: WriteKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=32)] = None,
) -> TrashList:
    """What the caller may restore, the most recently trashed first, a page
    at a time (pass `next_cursor` back as `cursor`). A `write` key sees its
    own files; an `admin` key every file and S3 object."""
    after = None if cursor is None else parse_id_cursor(cursor)
    items = await trash.list(_scope(key), after=after, limit=limit + 1)
    page = items[:limit]
    next_cursor = str(page[-1].entry_id) if len(items) > limit else None
    return TrashList(items=[_trashed_out(item) for item in page], next_cursor=next_cursor)


def _new_place(as_name: str, *, native: bool) -> tuple[str, str]:
    """The key and the name `?as=` asks for. An S3 key is held to S3's rules
    (its length in bytes of UTF-8): one the S3 API refuses could be
    restored, and then never read, deleted, or its bucket emptied."""
    if not as_name.strip() or "\x00" in as_name:
        raise ApiError(400, "bad_request", "`as` must be a non-empty name without NUL")
    if native:
        clean = clean_name(as_name, "")
        if not clean:
            raise ApiError(400, "bad_request", "`as` is not a usable file name")
        key = NAMED_PREFIX + as_name
        if len(key) > MAX_KEY_LENGTH:
            raise ApiError(400, "bad_request", f"`as` is longer than {MAX_KEY_LENGTH} characters")
        return key, clean
    size = key_bytes(as_name)
    if size is None:
        raise ApiError(400, "bad_request", "`as` is not text an S3 key can hold (UTF-8)")
    if size > MAX_KEY_LENGTH:
        raise ApiError(
            400,
            "bad_request",
            f"`as` is {size} bytes of UTF-8: an S3 key has at most {MAX_KEY_LENGTH}",
        )
    return as_name, object_name(as_name)


@router.post("/api/trash/{public_id}/restore", response_model=RestoredOut)
async def restore(
    public_id: str,
    request: Request,
    trash: TrashDep,
    settings: SettingsDep,
    key: WriteKey,
    as_name: Annotated[str | None, Query(alias="as", max_length=MAX_KEY_LENGTH)] = None,
) -> RestoredOut:
    """Put an object back under its old name (an S3 object under its old
    bucket and key), or under `?as=NEW_NAME`. 409 when a live object holds
    that name; 404 when the caller's trash holds no such id (or it expired)."""
    not_found = ApiError(
        404, "not_found", f"the trash holds no object with the id {public_id[:64]!r}"
    )
    if len(public_id) > 64 or "\x00" in public_id:
        raise not_found
    scope = _scope(key)
    new_key = new_name = None
    if as_name is not None:
        # Which namespace the new name is in depends on where the object was.
        found = await trash.get(public_id, scope)
        if found is None:
            raise not_found
        native = found.bucket == NATIVE_BUCKET
        if native and len(as_name) > MAX_FILE_NAME_LENGTH:
            raise ApiError(
                400, "bad_request", f"`as` is longer than {MAX_FILE_NAME_LENGTH} characters"
            )
        new_key, new_name = _new_place(as_name, native=native)
    try:
        info = await trash.restore(public_id, scope, key=new_key, name=new_name)
    except NameTaken:
        what = f"the key {new_key or ''!r}" if new_key else "its old name"
        raise ApiError(
            409,
            "conflict",
            f"a live object holds {what}: restore it under another name with ?as=NEW_NAME "
            "(or delete or rename the live one first)",
        ) from None
    except RestoreRefused as exc:
        raise ApiError(409, "conflict", f"{exc}: create it again, or restore elsewhere") from None
    if info is None:
        raise not_found
    return _restored_out(request, settings, info)
