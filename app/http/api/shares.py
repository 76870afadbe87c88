"""Share links, the owner's side: `POST /api/shares` makes one,
`GET /api/shares` lists them, `PATCH /api/shares/{id}` extends or changes
its limits, `DELETE /api/shares/{id}` revokes it. The recipient's side (the
page, the bytes) is app/http/web/shares.py; the rules are app/store/shares.py.

Who may: any key shares what it can read (every native file and folder);
an S3 object only with an admin key (S3 objects stay behind S3 credentials,
docs/security.md). A share's owner is the key that made it; it, or an admin
key, may list, change and revoke it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.config.settings import Settings
from app.http.api.body_limits import JSON_BODY_LIMIT, SmallBodyRoute, read_small_body
from app.http.api.deps import ReadKey, ServicesDep
from app.http.api.errors import ApiError
from app.http.shared.file_names import NAMED_PREFIX, NATIVE_BUCKET
from app.http.shared.links import public_base
from app.store.callers import Caller
from app.store.limits import MAX_KEY_LENGTH
from app.store.services import Services
from app.store.share_passwords import MAX_PASSWORD_LENGTH
from app.store.shares import ShareChanges, ShareInfo, ShareState, ShareTarget

router = APIRouter(tags=["shares"], route_class=SmallBodyRoute)

#: The furthest a share's expiry may be set: ten years.
MAX_EXPIRY = timedelta(days=3650)
MAX_DOWNLOADS_LIMIT = 1_000_000_000
#: Shares listed a page at most.
MAX_PAGE = 1000

Disposition = Literal["attachment", "inline"]


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_in: int | None = Field(
        None, ge=1, le=int(MAX_EXPIRY.total_seconds()), description="seconds from now"
    )
    expires_at: datetime | None = None
    password: str | None = Field(None, min_length=1, max_length=MAX_PASSWORD_LENGTH)
    max_downloads: int | None = Field(None, ge=1, le=MAX_DOWNLOADS_LIMIT)
    disposition: Disposition | None = None


class ShareIn(_Limits):
    """Exactly one of `file` (a public id; with `bucket`, an S3 object's) and
    `folder` (a native folder: a name prefix ending in "/")."""

    file: str | None = Field(None, min_length=1, max_length=64)
    bucket: str | None = Field(None, min_length=1, max_length=255)
    folder: str | None = Field(None, min_length=1, max_length=MAX_KEY_LENGTH - len(NAMED_PREFIX))


class ShareUpdate(_Limits):
    """Fields sent are changed, fields left out stay; `null` removes a limit
    (`expires_at: null`: no expiry, `max_downloads: null`: no limit,
    `password: null`: no password)."""


class ShareOut(BaseModel):
    id: int
    # The share's page (`/s/{token}`): what to hand out.
    url: str
    # The bytes (`curl -OJ`): the file, or the folder as one zip.
    download_url: str
    kind: Literal["file", "folder"]
    file: str | None
    bucket: str | None
    folder: str | None
    # The file's name now (None while it is not there: trashed or deleted).
    name: str | None
    owner: str
    created_at: datetime
    expires_at: datetime | None
    max_downloads: int | None
    downloads: int
    last_download_at: datetime | None
    has_password: bool
    disposition: Disposition
    # `unavailable`: live, but its file is not there (in the trash, deleted).
    state: Literal["active", "expired", "exhausted", "unavailable"]


class ShareList(BaseModel):
    items: list[ShareOut]
    next_cursor: str | None


def _parse(model: type[_Limits], body: bytes) -> _Limits:
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ApiError(422, "invalid_request", problems) from None


def _expiry(limits: _Limits) -> datetime | None:
    if limits.expires_in is not None and limits.expires_at is not None:
        raise ApiError(400, "bad_request", "send `expires_in` or `expires_at`, not both")
    now = datetime.now(UTC)
    if limits.expires_in is not None:
        return now + timedelta(seconds=limits.expires_in)
    if limits.expires_at is None:
        return None
    moment = limits.expires_at
    if moment.tzinfo is None:
        raise ApiError(
            400, "bad_request", "`expires_at` needs a time zone (e.g. 2027-01-31T12:00Z)"
        )
    if moment <= now:
        raise ApiError(400, "bad_request", "`expires_at` is in the past")
    if moment - now > MAX_EXPIRY:
        raise ApiError(400, "bad_request", f"`expires_at` is more than {MAX_EXPIRY.days} days away")
    return moment.astimezone(UTC)


def share_urls(request: Request, settings: Settings, share: ShareInfo) -> tuple[str, str]:
    page = f"{public_base(request, settings)}/s/{share.token}"
    return page, f"{page}/download"


async def _share_out(request: Request, services: Services, share: ShareInfo) -> ShareOut:
    page, download = share_urls(request, services.settings, share)
    state = share.state()
    name: str | None = None
    folder = None
    if share.target.prefix is not None:
        folder = share.target.prefix.removeprefix(NAMED_PREFIX)
        name = folder.rstrip("/").rsplit("/", 1)[-1]
    else:
        found = await services.shares.file_of(share)
        name = None if found is None else found.name
    shown_state: Literal["active", "expired", "exhausted", "unavailable"]
    if state is ShareState.ACTIVE and share.target.prefix is None and name is None:
        shown_state = "unavailable"
    elif state is ShareState.EXPIRED:
        shown_state = "expired"
    elif state is ShareState.EXHAUSTED:
        shown_state = "exhausted"
    else:
        shown_state = "active"
    native = share.target.bucket == NATIVE_BUCKET
    return ShareOut(
        id=share.id,
        url=page,
        download_url=download,
        kind="folder" if share.is_folder else "file",
        file=share.target.public_id,
        bucket=None if native else share.target.bucket,
        folder=folder,
        name=name,
        owner=share.owner_name,
        created_at=share.created_at,
        expires_at=share.expires_at,
        max_downloads=share.max_downloads,
        downloads=share.downloads,
        last_download_at=share.last_download_at,
        has_password=share.has_password,
        disposition="inline" if share.disposition == "inline" else "attachment",
        state=shown_state,
    )


async def _target(services: Services, key: Caller, asked: ShareIn) -> ShareTarget:
    if (asked.file is None) == (asked.folder is None):
        raise ApiError(400, "bad_request", "send one of `file` (a public id) and `folder`")
    if asked.folder is not None:
        folder = asked.folder
        if asked.bucket is not None:
            raise ApiError(400, "bad_request", "a folder share is of native files: no `bucket`")
        if not folder.endswith("/") or folder.startswith("/") or "\x00" in folder:
            raise ApiError(
                400, "bad_request", "`folder` is a name prefix ending in `/` (e.g. photos/2024/)"
            )
        prefix = NAMED_PREFIX + folder
        listing = await services.buckets.list_objects(
            NATIVE_BUCKET, prefix=prefix, delimiter=None, after=None, max_keys=1
        )
        if not listing.objects:
            raise ApiError(404, "not_found", f"no file is in the folder {folder[:256]!r}")
        return ShareTarget(NATIVE_BUCKET, prefix=prefix)
    public_id = asked.file or ""
    bucket = asked.bucket or NATIVE_BUCKET
    if asked.bucket is not None:
        if asked.bucket.startswith("_"):
            raise ApiError(400, "bad_request", f"no S3 bucket is named {asked.bucket!r}")
        if not key.allows("admin"):
            raise ApiError(
                403,
                "forbidden",
                "only an `admin` key may share an S3 object (S3 objects stay behind "
                "S3 credentials; docs/security.md)",
            )
    found = None
    if "\x00" not in public_id:
        found = await services.store.get_by_public_id(public_id, bucket=bucket)
    if found is None:
        raise ApiError(404, "not_found", f"no file has the id {public_id[:64]!r}")
    return ShareTarget(bucket, public_id=public_id)


def _json_body(model: type[BaseModel]) -> dict[str, object]:
    """The OpenAPI description of a body the route reads itself (bounded)."""
    schema = {"schema": model.model_json_schema()}
    return {"requestBody": {"required": True, "content": {"application/json": schema}}}


@router.post(
    "/api/shares", status_code=201, response_model=ShareOut, openapi_extra=_json_body(ShareIn)
)
async def create_share(request: Request, services: ServicesDep, key: ReadKey) -> ShareOut:
    """Share a file (`{"file": PUBLIC_ID}`) or a folder (`{"folder": "PREFIX/"}`),
    optionally until `expires_in` seconds from now or `expires_at`, behind a
    `password`, for at most `max_downloads` downloads, served `inline` or as
    an `attachment` (the default). The answer's `url` is the page to hand out;
    `download_url` the bytes. The body is JSON of at most 4 KiB."""
    asked = _parse(ShareIn, await read_small_body(request, JSON_BODY_LIMIT))
    assert isinstance(asked, ShareIn)
    target = await _target(services, key, asked)
    share = await services.shares.create(
        key.id,
        target,
        expires_at=_expiry(asked),
        max_downloads=asked.max_downloads,
        password=asked.password,
        disposition=asked.disposition or "attachment",
    )
    return await _share_out(request, services, share)


def _cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 19):
        raise ApiError(400, "bad_request", "the cursor is not one this listing gave")
    return int(cursor)


@router.get("/api/shares", response_model=ShareList)
async def list_shares(
    request: Request,
    services: ServicesDep,
    key: ReadKey,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=32)] = None,
) -> ShareList:
    """The key's shares not revoked, newest first (an admin key: everyone's),
    a page at a time (pass `next_cursor` back as `cursor`)."""
    owner = None if key.allows("admin") else key.id
    found = await services.shares.list(owner, after=_cursor(cursor), limit=limit + 1)
    page = found[:limit]
    return ShareList(
        items=[await _share_out(request, services, share) for share in page],
        next_cursor=str(page[-1].id) if len(found) > limit else None,
    )


async def _owned(services: Services, key: Caller, share_id: int) -> ShareInfo:
    share = await services.shares.get(share_id)
    if share is None or not (key.allows("admin") or share.owner_key_id == key.id):
        # Another key's share is answered as absent: its id tells nothing.
        raise ApiError(404, "not_found", f"you have no share with the id {share_id}")
    return share


@router.get("/api/shares/{share_id}", response_model=ShareOut)
async def get_share(
    share_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    request: Request,
    services: ServicesDep,
    key: ReadKey,
) -> ShareOut:
    """One of the key's shares."""
    return await _share_out(request, services, await _owned(services, key, share_id))


@router.patch(
    "/api/shares/{share_id}", response_model=ShareOut, openapi_extra=_json_body(ShareUpdate)
)
async def change_share(
    share_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    request: Request,
    services: ServicesDep,
    key: ReadKey,
) -> ShareOut:
    """Extend a share (`expires_in`, `expires_at`; `null`: never expires),
    change its download limit (`max_downloads`; `null`: none), its password
    (`null`: none) or `disposition`. An expired or exhausted share comes
    back to life when its new limits allow. A revoked one is gone (404)."""
    changed = _parse(ShareUpdate, await read_small_body(request, JSON_BODY_LIMIT))
    await _owned(services, key, share_id)
    sent = changed.model_fields_set
    changes = ShareChanges()
    values: dict[str, object] = {}
    if sent & {"expires_in", "expires_at"}:
        values["expires_at"] = _expiry(changed)
    if "max_downloads" in sent:
        values["max_downloads"] = changed.max_downloads
    if "password" in sent:
        values["password"] = changed.password
    if "disposition" in sent:
        if changed.disposition is None:
            raise ApiError(422, "invalid_request", "disposition: `inline` or `attachment`")
        values["disposition"] = changed.disposition
    if values:
        changes = ShareChanges(**values)  # type: ignore[arg-type]
    share = await services.shares.change(share_id, changes)
    if share is None:
        raise ApiError(404, "not_found", f"you have no share with the id {share_id}")
    return await _share_out(request, services, share)


@router.delete("/api/shares/{share_id}", status_code=204)
async def revoke_share(
    share_id: Annotated[int, Path(ge=1, le=2**63 - 1)], services: ServicesDep, key: ReadKey
) -> Response:
    """Revoke a share for good: its link answers 404 from the next request on,
    a download under way included."""
    await _owned(services, key, share_id)
    if not await services.shares.revoke(share_id):
        raise ApiError(404, "not_found", f"you have no share with the id {share_id}")
    return Response(status_code=204)
