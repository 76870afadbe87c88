"""The native file API (the predecessor's public routes, so existing links and
scripts keep working).

Upload bodies are read as streams and handed to the object store chunk by
chunk; downloads stream the chunks back with Range and conditional support.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from app.config.settings import Settings
from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ReadAccess, ReadKey, SettingsDep, StoreDep, WriteKey
from app.http.api.errors import ApiError
from app.http.api.file_response import plan_download
from app.http.api.schemas import FileList, FileOut
from app.http.shared.file_names import (
    MAX_FILE_NAME_LENGTH,
    NAMED_PREFIX,
    NATIVE_BUCKET,
    clean_name,
    download_url,
    guess_type,
)
from app.http.shared.forms import StreamingForm
from app.http.shared.parsing import parse_decimal
from app.store.callers import Caller
from app.store.errors import NotOwner
from app.store.limits import MAX_CONTENT_TYPE_LENGTH, MAX_KEY_LENGTH
from app.store.object_write import ObjectWrite
from app.store.service import ListOrder, ObjectInfo, ObjectStore

router = APIRouter(tags=["files"], route_class=SmallBodyRoute)

# A multipart body carries boundaries and part headers besides the file.
FORM_OVERHEAD_ALLOWANCE = 1024 * 1024


def _file_out(request: Request, settings: Settings, info: ObjectInfo) -> FileOut:
    return FileOut(
        public_id=info.public_id,
        file_name=info.name,
        mime_type=info.content_type,
        size_bytes=info.size,
        sha256=info.sha256,
        etag=info.etag,
        created_at=info.created_at,
        updated_at=info.updated_at,
        download_url=download_url(request, settings, info.public_id),
        stored_path=info.key.removeprefix(NAMED_PREFIX)
        if info.key.startswith(NAMED_PREFIX)
        else None,
    )


def _check_declared_length(request: Request, limit: int) -> int | None:
    """Refuse a body whose declared length is over the limit before reading
    it; returns the declared length (None if the body is chunked)."""
    declared = request.headers.get("content-length")
    if declared is None:
        return None
    length = parse_decimal(declared.strip())
    if length is None:
        raise ApiError(400, "bad_request", "Content-Length is not a number")
    if length > limit:
        raise ApiError(
            413,
            "payload_too_large",
            f"the upload is larger than the limit of {limit} bytes",
            {"Connection": "close"},
        )
    return length


def _check_content_type(content_type: str | None) -> None:
    """Refuse, before the body is read, a type the database could not store."""
    if content_type is not None and len(content_type.strip()) > MAX_CONTENT_TYPE_LENGTH:
        raise ApiError(
            400,
            "bad_request",
            f"the Content-Type is longer than {MAX_CONTENT_TYPE_LENGTH} characters",
        )


def _limited_to_own_files(key: Caller) -> int | None:
    """The key id a caller may change files of, or None for an admin key (any file)."""
    return None if key.allows("admin") else key.id


def _belongs_to_another_key(what: str, headers: dict[str, str] | None = None) -> ApiError:
    return ApiError(
        403,
        "forbidden",
        f"{what} belongs to another API key: a `write` key may replace or delete "
        "only the files it uploaded (an `admin` key may change any file)",
        headers,
    )


async def _check_may_replace(store: ObjectStore, key: Caller, object_key: str, name: str) -> None:
    """Refuse before the body is read. The store checks again under the
    object's lock, which is what decides a race."""
    own = _limited_to_own_files(key)
    if own is None:
        return
    existing = await store.get(NATIVE_BUCKET, object_key)
    if existing is not None and existing.owner_key_id != own:
        # The body is not read: the connection cannot be reused.
        raise _belongs_to_another_key(f"the file {name!r}", {"Connection": "close"})


# --- uploads --------------------------------------------------------------------


@router.post(
    "/api/upload",
    status_code=201,
    response_model=FileOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {
                            "file": {"type": "string", "format": "binary"},
                            "fileName": {"type": "string"},
                        },
                    }
                }
            },
        }
    },
)
async def upload_form(
    request: Request, store: StoreDep, settings: SettingsDep, key: WriteKey
) -> FileOut:
    """Upload a file as the multipart field `file` (an optional `fileName`
    field overrides its name). Every upload makes a new file."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError(
            415,
            "unsupported_media_type",
            "send the file as multipart/form-data in the field `file` "
            "(or use PUT /api/files/{name} for a raw body)",
        )
    _check_declared_length(request, settings.max_upload_size + FORM_OVERHEAD_ALLOWANCE)
    form = StreamingForm(content_type)
    content = await store.write_content(
        form.file_bytes(request.stream()), max_size=settings.max_upload_size, label="upload"
    )
    if not form.file_seen:
        await store.discard(content)
        raise ApiError(400, "bad_request", "the multipart field `file` is missing")
    name = clean_name(form.fields.get("fileName") or form.filename, "file")
    info = await store.commit(
        content,
        ObjectWrite(
            bucket=NATIVE_BUCKET,
            key=f"upload/{secrets.token_urlsafe(18)}",
            name=name,
            content_type=guess_type(name, form.content_type),
            owner_key_id=key.id,
        ),
    )
    return _file_out(request, settings, info)


@router.put("/api/files/{name:path}", status_code=201, response_model=FileOut)
async def upload_raw(
    name: str, request: Request, store: StoreDep, settings: SettingsDep, key: WriteKey
) -> FileOut:
    """Upload the raw request body (`curl -T file URL`). Uploading again under
    the same name replaces the content; the public id stays the same. A
    `write` key may replace only a file it uploaded."""
    clean = clean_name(name, "")
    if not clean:
        raise ApiError(400, "bad_request", "the file name is empty")
    if "\x00" in name:
        raise ApiError(400, "bad_request", "the file name contains NUL")
    if len(NAMED_PREFIX + name) > MAX_KEY_LENGTH:
        raise ApiError(
            400,
            "bad_request",
            f"the file name is longer than {MAX_KEY_LENGTH - len(NAMED_PREFIX)} characters",
        )
    declared = _check_declared_length(request, settings.max_upload_size)
    declared_type = request.headers.get("content-type")
    _check_content_type(declared_type)
    object_key = NAMED_PREFIX + name
    await _check_may_replace(store, key, object_key, clean)
    try:
        info = await store.put_stream(
            request.stream(),
            ObjectWrite(
                bucket=NATIVE_BUCKET,
                key=object_key,
                name=clean,
                content_type=guess_type(clean, declared_type),
                max_size=settings.max_upload_size,
                keep_public_id=True,
                expected_size=declared,
                owner_key_id=key.id,
                only_if_owned_by=_limited_to_own_files(key),
            ),
        )
    except NotOwner:
        raise _belongs_to_another_key(f"the file {clean!r}") from None
    return _file_out(request, settings, info)


# --- downloads ------------------------------------------------------------------


async def _find(store: StoreDep, public_id: str) -> ObjectInfo:
    valid = len(public_id) <= 64 and "\x00" not in public_id
    # Only the native API's own files: S3 objects stay behind S3 credentials.
    info = await store.get_by_public_id(public_id, bucket=NATIVE_BUCKET) if valid else None
    if info is None:
        raise ApiError(404, "not_found", f"no file has the id {public_id[:64]!r}")
    return info


# One route per method: a shared route gives both the same OpenAPI operation id.
@router.get("/f/{public_id}", response_class=StreamingResponse, operation_id="download")
@router.head("/f/{public_id}", response_class=StreamingResponse, operation_id="download_head")
async def download(
    public_id: str,
    request: Request,
    store: StoreDep,
    _access: ReadAccess,
    disposition: Annotated[Literal["attachment", "inline"], Query()] = "attachment",
) -> Response:
    """Stream a file. Supports a single `Range` (206), `If-None-Match` /
    `If-Modified-Since` (304) and `If-Range`; HEAD gives the same headers.
    `disposition=inline` lets a browser show it (the page's preview); it is
    sandboxed either way."""
    info = await _find(store, public_id)
    plan = plan_download(request, info, disposition=disposition)
    if plan.bodiless is not None:
        return plan.bodiless
    body = await store.open_range(info, plan.start, plan.end)
    return StreamingResponse(
        body, status_code=plan.status, headers=plan.headers, media_type=info.content_type
    )


@router.get("/file/{public_id}/info", response_model=FileOut)
async def file_info(
    public_id: str, request: Request, store: StoreDep, settings: SettingsDep, _access: ReadAccess
) -> FileOut:
    """A file's metadata, and whether its data is damaged (`damage`)."""
    info = await _find(store, public_id)
    answer = _file_out(request, settings, info)
    answer.damage = await store.damage(info, replicas=settings.replicas)
    return answer


@router.get("/api/files", response_model=FileList)
async def list_files(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    _key: ReadKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
    prefix: Annotated[str, Query(max_length=MAX_FILE_NAME_LENGTH)] = "",
    order: Annotated[ListOrder, Query()] = "key",
) -> FileList:
    """All files, a page at a time (pass `next_cursor` back as `cursor`);
    `prefix` keeps those whose name starts with it, ignoring case. `order`:
    `key` (internal key order, the default), `newest` (the file uploaded or
    replaced last comes first) or `oldest`. Needs a key: a listing reveals
    every public id."""
    if cursor is not None and "\x00" in cursor:
        raise ApiError(400, "bad_request", "the cursor contains NUL")
    if "\x00" in prefix:
        raise ApiError(400, "bad_request", "the prefix contains NUL")
    if order == "key":
        items = await store.list(
            NATIVE_BUCKET, after_key=cursor, limit=limit + 1, name_prefix=prefix
        )
    else:
        after_id = None if cursor is None else parse_id_cursor(cursor)
        items = await store.list(
            NATIVE_BUCKET, limit=limit + 1, name_prefix=prefix, order=order, after_id=after_id
        )
    page = items[:limit]
    next_cursor = None
    if len(items) > limit:
        next_cursor = page[-1].key if order == "key" else str(page[-1].id)
    return FileList(items=[_file_out(request, settings, i) for i in page], next_cursor=next_cursor)


# Row ids are 64-bit signed integers.
_MAX_ID = 2**63 - 1


def parse_id_cursor(cursor: str) -> int:
    """The cursor of a `newest` or `oldest` listing: the row id the last page
    ended at, as the listing gave it."""
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 19 and int(cursor) <= _MAX_ID):
        raise ApiError(
            400,
            "bad_request",
            "the cursor is not one this listing gave: pass its next_cursor back "
            "with the same order",
        )
    return int(cursor)


@router.delete("/api/files/{public_id}", status_code=204)
async def delete_file(public_id: str, store: StoreDep, key: WriteKey) -> Response:
    """Delete a file; its chunks are deleted from Telegram once nothing else
    uses them. A `write` key may delete only a file it uploaded."""
    if "\x00" in public_id:
        raise ApiError(404, "not_found", f"no file has the id {public_id[:64]!r}")
    try:
        deleted = await store.delete_by_public_id(
            public_id, bucket=NATIVE_BUCKET, only_if_owned_by=_limited_to_own_files(key)
        )
    except NotOwner:
        raise _belongs_to_another_key(f"the file with the id {public_id[:64]!r}") from None
    if not deleted:
        raise ApiError(404, "not_found", f"no file has the id {public_id[:64]!r}")
    return Response(status_code=204)
