"""Resumable uploads: the tus 1.0 protocol at /api/tus/.

Core protocol plus the creation, creation-with-upload, creation-defer-length,
termination, checksum (sha1, sha256, md5), expiration and concatenation
extensions (https://tus.io/protocols/resumable-upload). This module speaks
tus (headers, status codes); the storage is behind `ResumableUploads`.

An upload belongs to the API key that created it: for any other key it does
not exist (404). A finished upload becomes a native file (name from the
`filename` metadata, type from `filetype`); the response that finishes it,
and every HEAD after, carry its public id in `X-File-Id` and its download
link in `X-File-Url`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from starlette.requests import ClientDisconnect

from app.config.settings import Settings
from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ServicesDep, SettingsDep, WriteKey
from app.http.api.errors import ApiError
from app.http.api.tus_headers import (
    CHECKSUM_ALGORITHMS,
    MAX_ID_LENGTH,
    TUS_VERSION,
    parse_checksum,
    parse_length,
    parse_metadata,
    partial_ids,
    tus_error,
)
from app.http.shared.conditions import http_date
from app.http.shared.file_names import NATIVE_BUCKET, clean_name, download_url, guess_type
from app.http.shared.links import public_base
from app.store.callers import Caller
from app.store.resumable_protocol import (
    MAX_SEGMENTS,
    AlreadyComplete,
    BodyTooLong,
    ChecksumMismatch,
    ConcatenationRefused,
    FlushFailed,
    OffsetMismatch,
    ResumableUploads,
    TooManySegments,
    TusUploadMissing,
    UploadState,
)

router = APIRouter(tags=["tus"], route_class=SmallBodyRoute)

PREFIX = "/api/tus"
EXTENSIONS = (
    "creation,creation-with-upload,creation-defer-length,termination,checksum,"
    "expiration,concatenation"
)
CONTENT_TYPE = "application/offset+octet-stream"
# tus's own status for a body that does not match its Upload-Checksum.
CHECKSUM_MISMATCH = 460
RESULT_ID_HEADER = "X-File-Id"
RESULT_URL_HEADER = "X-File-Url"
DEFAULT_NAME = "upload"


def get_uploads(services: ServicesDep) -> ResumableUploads:
    return services.resumable


UploadsDep = Annotated[ResumableUploads, Depends(get_uploads)]


async def require_tus_version(request: Request) -> None:
    """Every request but OPTIONS names the protocol version it speaks."""
    version = request.headers.get("tus-resumable")
    if version != TUS_VERSION:
        raise tus_error(
            412,
            "precondition_failed",
            f"send `Tus-Resumable: {TUS_VERSION}` (got {version!r}); "
            f"this server speaks tus {TUS_VERSION}",
            {"Tus-Version": TUS_VERSION},
        )


TusVersion = Annotated[None, Depends(require_tus_version)]


# --- the one place that decides who may touch an upload ---------------------------


async def _owned(uploads: ResumableUploads, upload_id: str, key: Caller) -> UploadState:
    """The upload, if it exists and belongs to `key`; 404 otherwise (another
    key's upload is not revealed), 410 once it has expired."""
    state = await uploads.get(upload_id) if len(upload_id) <= MAX_ID_LENGTH else None
    if state is None or state.api_key_id != key.id:
        raise tus_error(404, "not_found", f"no upload has the id {upload_id[:MAX_ID_LENGTH]!r}")
    if state.expires_at <= datetime.now(UTC):
        raise tus_error(410, "gone", "the upload expired; start a new one")
    return state


# --- headers ----------------------------------------------------------------------


def _upload_url(request: Request, settings: Settings, upload_id: str) -> str:
    return f"{public_base(request, settings)}{PREFIX}/{upload_id}"


def _state_headers(request: Request, settings: Settings, state: UploadState) -> dict[str, str]:
    headers = {
        "Tus-Resumable": TUS_VERSION,
        "Upload-Offset": str(state.offset),
        "Upload-Expires": http_date(state.expires_at),
        "Cache-Control": "no-store",
    }
    if state.length is None:
        headers["Upload-Defer-Length"] = "1"
    else:
        headers["Upload-Length"] = str(state.length)
    if state.metadata:
        headers["Upload-Metadata"] = state.metadata
    if state.kind == "partial":
        headers["Upload-Concat"] = "partial"
    elif state.kind == "final":
        urls = " ".join(f"{PREFIX}/{partial}" for partial in state.concat)
        headers["Upload-Concat"] = f"final;{urls}"
    if state.public_id is not None:
        headers[RESULT_ID_HEADER] = state.public_id
        headers[RESULT_URL_HEADER] = download_url(request, settings, state.public_id)
    return headers


def _name_and_type(metadata: dict[str, str]) -> tuple[str, str]:
    name = clean_name(metadata.get("filename"), DEFAULT_NAME)
    return name, guess_type(name, metadata.get("filetype"))


def _check_size(length: int, settings: Settings) -> None:
    if length > settings.max_upload_size:
        raise tus_error(
            413,
            "payload_too_large",
            f"the upload is larger than the limit of {settings.max_upload_size} bytes "
            "(MAX_UPLOAD_SIZE, sent as Tus-Max-Size)",
        )


async def _until_disconnect(request: Request) -> AsyncIterator[bytes]:
    """The body, ending cleanly if the client goes away midway: what arrived
    is kept."""
    try:
        async for data in request.stream():
            yield data
    except ClientDisconnect:
        return


# --- OPTIONS ----------------------------------------------------------------------


@router.options(PREFIX)
@router.options(PREFIX + "/")
@router.options(PREFIX + "/{upload_id}")
async def options(settings: SettingsDep) -> Response:
    """What this server supports (no key needed)."""
    return Response(
        status_code=204,
        headers={
            "Tus-Resumable": TUS_VERSION,
            "Tus-Version": TUS_VERSION,
            "Tus-Extension": EXTENSIONS,
            "Tus-Max-Size": str(settings.max_upload_size),
            "Tus-Checksum-Algorithm": ",".join(CHECKSUM_ALGORITHMS),
        },
    )


# --- creation ---------------------------------------------------------------------


@router.post(PREFIX, status_code=201)
@router.post(PREFIX + "/", status_code=201)
async def create(
    request: Request,
    _version: TusVersion,
    key: WriteKey,
    uploads: UploadsDep,
    settings: SettingsDep,
) -> Response:
    """Create an upload (`Upload-Length` or `Upload-Defer-Length: 1`), maybe
    with its first bytes, or a final upload from partial ones."""
    raw_metadata, metadata = parse_metadata(request.headers.get("upload-metadata"))
    name, content_type = _name_and_type(metadata)
    concat = (request.headers.get("upload-concat") or "").strip()
    if concat.startswith("final;"):
        return await _create_final(
            request, key, uploads, settings, concat, raw_metadata, name, content_type
        )
    if concat not in ("", "partial"):
        raise tus_error(400, "bad_request", "Upload-Concat must be `partial` or `final;<urls>`")

    length = parse_length(request.headers.get("upload-length"), "Upload-Length")
    deferred = request.headers.get("upload-defer-length")
    if deferred is not None and deferred.strip() != "1":
        raise tus_error(400, "bad_request", "Upload-Defer-Length must be 1")
    if (length is None) == (deferred is None):
        raise tus_error(
            400, "bad_request", "send exactly one of Upload-Length and Upload-Defer-Length: 1"
        )
    if length is not None:
        _check_size(length, settings)
    state = await uploads.create(
        api_key_id=key.id,
        kind="partial" if concat == "partial" else "single",
        length=length,
        metadata=raw_metadata,
        bucket=NATIVE_BUCKET,
        content_type=content_type,
    )
    has_body = request.headers.get("content-length", "0") != "0" or (
        "transfer-encoding" in request.headers
    )
    if has_body and _is_tus_body(request):
        state = await _append(request, uploads, settings, state)
    if state.has_all_bytes and state.kind == "single":
        state = await _complete(uploads, state, name)
    headers = _state_headers(request, settings, state)
    headers["Location"] = _upload_url(request, settings, state.id)
    return Response(status_code=201, headers=headers)


async def _create_final(
    request: Request,
    key: Caller,
    uploads: ResumableUploads,
    settings: Settings,
    concat: str,
    raw_metadata: str,
    name: str,
    content_type: str,
) -> Response:
    if "upload-length" in request.headers:
        raise tus_error(400, "bad_request", "a final upload takes no Upload-Length")
    partials = partial_ids(concat)
    total = 0
    for partial_id in partials:
        partial = await uploads.get(partial_id)
        if partial is not None and partial.api_key_id == key.id:
            total += partial.length or 0
    _check_size(total, settings)
    try:
        state = await uploads.concatenate(
            api_key_id=key.id,
            partial_ids=partials,
            metadata=raw_metadata,
            bucket=NATIVE_BUCKET,
            name=name,
            content_type=content_type,
        )
    except ConcatenationRefused as exc:
        raise tus_error(400, "bad_request", f"cannot concatenate: {exc}") from None
    except FlushFailed as exc:
        raise _storage_unavailable(exc) from None
    headers = _state_headers(request, settings, state)
    headers["Location"] = _upload_url(request, settings, state.id)
    return Response(status_code=201, headers=headers)


# --- HEAD, PATCH, DELETE ----------------------------------------------------------


@router.head(PREFIX + "/{upload_id}")
async def head(
    upload_id: str,
    request: Request,
    _version: TusVersion,
    key: WriteKey,
    uploads: UploadsDep,
    settings: SettingsDep,
) -> Response:
    """Where the upload stands; once finished, its file's id and link."""
    state = await _owned(uploads, upload_id, key)
    if state.has_all_bytes and state.kind == "single" and state.public_id is None:
        # The PATCH that brought the last byte could not finish (no bot then).
        name, _ = _name_and_type(parse_metadata(state.metadata)[1])
        # No bot now: the offset is still true, and a later HEAD tries again.
        with contextlib.suppress(FlushFailed):
            state = await uploads.complete(state.id, name=name)
    return Response(status_code=200, headers=_state_headers(request, settings, state))


@router.patch(PREFIX + "/{upload_id}")
async def patch(
    upload_id: str,
    request: Request,
    _version: TusVersion,
    key: WriteKey,
    uploads: UploadsDep,
    settings: SettingsDep,
) -> Response:
    """Append the body at `Upload-Offset`."""
    if not _is_tus_body(request):
        raise tus_error(415, "unsupported_media_type", f"send the bytes as {CONTENT_TYPE}")
    offset = parse_length(request.headers.get("upload-offset"), "Upload-Offset")
    if offset is None:
        raise tus_error(400, "bad_request", "Upload-Offset is missing")
    state = await _owned(uploads, upload_id, key)
    if state.kind == "final":
        raise tus_error(403, "forbidden", "a final upload cannot be appended to")
    declared = parse_length(request.headers.get("upload-length"), "Upload-Length")
    if declared is not None:
        _check_size(declared, settings)
        try:
            state = await uploads.declare_length(state.id, declared)
        except ValueError as exc:
            raise tus_error(400, "bad_request", f"Upload-Length: {exc}") from None
    if offset != state.offset:
        raise tus_error(
            409, "conflict", f"Upload-Offset is {offset}, but the upload is at {state.offset}"
        )
    state = await _append(request, uploads, settings, state)
    if state.has_all_bytes and state.kind == "single":
        name, _ = _name_and_type(parse_metadata(state.metadata)[1])
        state = await _complete(uploads, state, name)
    return Response(status_code=204, headers=_state_headers(request, settings, state))


@router.delete(PREFIX + "/{upload_id}")
async def terminate(
    upload_id: str, _version: TusVersion, key: WriteKey, uploads: UploadsDep
) -> Response:
    """Delete the upload and the bytes it has (not the file it became)."""
    state = await _owned(uploads, upload_id, key)
    try:
        await uploads.terminate(state.id)
    except TusUploadMissing:
        raise tus_error(404, "not_found", "the upload is gone") from None
    return Response(status_code=204, headers={"Tus-Resumable": TUS_VERSION})


@router.post(PREFIX + "/{upload_id}")
async def overridden(
    upload_id: str,
    request: Request,
    _version: TusVersion,
    key: WriteKey,
    uploads: UploadsDep,
    settings: SettingsDep,
) -> Response:
    """POST with `X-HTTP-Method-Override` (for clients whose environment
    cannot send PATCH or DELETE) is that method."""
    method = request.headers.get("x-http-method-override", "").strip().upper()
    if method == "PATCH":
        return await patch(upload_id, request, None, key, uploads, settings)
    if method == "DELETE":
        return await terminate(upload_id, None, key, uploads)
    if method == "HEAD":
        return await head(upload_id, request, None, key, uploads, settings)
    raise tus_error(
        405,
        "method_not_allowed",
        "POST to an upload needs X-HTTP-Method-Override: PATCH, DELETE or HEAD",
        {"Allow": "HEAD, PATCH, DELETE, OPTIONS"},
    )


# --- helpers ----------------------------------------------------------------------


def _is_tus_body(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower() == CONTENT_TYPE


async def _append(
    request: Request, uploads: ResumableUploads, settings: Settings, state: UploadState
) -> UploadState:
    room = (state.length if state.length is not None else settings.max_upload_size) - state.offset
    declared = parse_length(request.headers.get("content-length"), "Content-Length")
    if declared is not None and declared > room:
        if state.length is None:
            _check_size(state.offset + declared, settings)
        raise tus_error(
            400,
            "bad_request",
            f"the body ({declared} bytes) goes past the end of the upload "
            f"({state.length} bytes, at {state.offset})",
        )
    if declared is not None:
        room = declared  # no more can come: the server holds a body to it
    checksum = parse_checksum(request.headers.get("upload-checksum"))
    try:
        return await uploads.append(
            state.id,
            state.offset,
            _until_disconnect(request),
            room=room,
            checksum=checksum,
        )
    except OffsetMismatch as exc:
        raise tus_error(
            409, "conflict", f"another request moved the upload to offset {exc.offset}"
        ) from None
    except ChecksumMismatch as exc:
        raise tus_error(CHECKSUM_MISMATCH, "checksum_mismatch", str(exc)) from None
    except BodyTooLong as exc:
        if state.length is None:
            _check_size(settings.max_upload_size + 1, settings)
        raise tus_error(
            400,
            "bad_request",
            f"the body goes past the end of the upload; kept up to offset {exc.offset}",
        ) from None
    except TooManySegments:
        raise tus_error(
            400,
            "bad_request",
            f"the upload has reached its most segments ({MAX_SEGMENTS}); "
            "resume it in bigger PATCH requests",
        ) from None
    except AlreadyComplete:
        raise tus_error(400, "bad_request", "the upload already has all its bytes") from None
    except TusUploadMissing:
        raise tus_error(404, "not_found", "the upload is gone") from None


async def _complete(uploads: ResumableUploads, state: UploadState, name: str) -> UploadState:
    try:
        return await uploads.complete(state.id, name=name)
    except FlushFailed as exc:
        raise _storage_unavailable(exc) from None


def _storage_unavailable(exc: FlushFailed) -> ApiError:
    return tus_error(
        503,
        "storage_unavailable",
        f"no usable bot: the service cannot store right now ({exc}); "
        "the bytes are kept: HEAD the upload later to finish it",
        {"Retry-After": "30"},
    )
