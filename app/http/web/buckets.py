"""Read-only browsing of the S3 buckets for the web page: the buckets, and one
page of a bucket at a prefix, rolled up into folders at "/". Answers 404 while
the S3 API is off (no S3_CREDENTIALS).

S3 objects stay behind S3 credentials: browsing needs an `admin` key (every S3
credential may read every bucket, as only an admin key may touch every native
file), and the links it gives are presigned S3 URLs that expire after
BROWSE_LINK_SECONDS, signed with the first configured S3 credential; never
permanent `/f/` links, which only the native API's own files have."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ServicesDep, require_admin_key
from app.http.api.errors import ApiError
from app.http.s3.sigv4.presign import presign_get
from app.http.shared.disposition import content_disposition
from app.http.shared.links import public_base
from app.store.buckets import BucketStore
from app.store.services import Services

router = APIRouter(tags=["web page"], route_class=SmallBodyRoute)

FOLDER_DELIMITER = "/"
MAX_PAGE = 1000
#: How long a link of the bucket view works (a page lists it again on reload).
BROWSE_LINK_SECONDS = 900
#: The region links are signed for when S3_REGION is unset (any is accepted then).
DEFAULT_REGION = "us-east-1"


class BucketOut(BaseModel):
    name: str
    created_at: datetime


class BucketObject(BaseModel):
    key: str
    size_bytes: int
    mime_type: str
    updated_at: datetime
    download_url: str


class BucketPage(BaseModel):
    bucket: str
    prefix: str
    folders: list[str]
    objects: list[BucketObject]
    next_after: str | None
    # When every `download_url` of this page stops working.
    links_expire_at: datetime


async def _buckets(request: Request, services: Services) -> BucketStore:
    await require_admin_key(request, services)
    if not services.settings.s3_credentials:
        raise ApiError(404, "not_found", "the S3 API is off (S3_CREDENTIALS is not set)")
    return services.buckets


@router.get("/api/buckets", response_model=list[BucketOut])
async def list_buckets(request: Request, services: ServicesDep) -> list[BucketOut]:
    """The S3 buckets."""
    buckets = await _buckets(request, services)
    return [BucketOut(name=b.name, created_at=b.created_at) for b in await buckets.list()]


@router.get("/api/buckets/{bucket}", response_model=BucketPage)
async def browse_bucket(
    bucket: str,
    request: Request,
    services: ServicesDep,
    prefix: Annotated[str, Query(max_length=1024)] = "",
    after: Annotated[str | None, Query(max_length=1024)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> BucketPage:
    """One page of a bucket under `prefix`: its folders and objects (pass
    `next_after` back as `after` for the next page)."""
    buckets = await _buckets(request, services)
    if "\x00" in bucket + prefix + (after or ""):
        raise ApiError(400, "bad_request", "the bucket, prefix or `after` contains NUL")
    if not await buckets.exists(bucket):
        raise ApiError(404, "not_found", f"no bucket is named {bucket[:63]!r}")
    listing = await buckets.list_objects(
        bucket,
        prefix=prefix,
        delimiter=FOLDER_DELIMITER,
        after=after,
        max_keys=limit,
    )
    now = datetime.now(UTC)
    base = public_base(request, services.settings)
    access_key, secret = next(iter(services.settings.s3_credentials.items()))
    region = services.settings.s3_region or DEFAULT_REGION

    def link(key: str) -> str:
        return presign_get(
            base,
            bucket,
            key,
            access_key=access_key,
            secret=secret.get_secret_value(),
            region=region,
            now=now,
            expires_seconds=BROWSE_LINK_SECONDS,
            # A download from the page, never a page of this origin.
            response_params={
                "response-content-disposition": content_disposition(key.rsplit("/", 1)[-1])
            },
        )

    return BucketPage(
        bucket=bucket,
        prefix=prefix,
        folders=listing.prefixes,
        objects=[
            BucketObject(
                key=info.key,
                size_bytes=info.size,
                mime_type=info.content_type,
                updated_at=info.modified,
                download_url=link(info.key),
            )
            for info in listing.objects
        ],
        next_after=listing.last if listing.truncated else None,
        links_expire_at=now + timedelta(seconds=BROWSE_LINK_SECONDS),
    )
