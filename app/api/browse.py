"""Read-only browsing of the S3 buckets for the web page: the buckets, and one
page of a bucket at a prefix, rolled up into folders at "/". Needs a key, and
answers 404 while the S3 API is off (no S3_CREDENTIALS)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from app.api.deps import ServicesDep, verify_key
from app.api.errors import ApiError
from app.services import Services
from app.store.buckets import BucketStore

router = APIRouter(tags=["web page"])

FOLDER_DELIMITER = "/"
MAX_PAGE = 1000


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


async def _buckets(request: Request, services: Services) -> BucketStore:
    await verify_key(request, services)
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
    base = (services.settings.public_base_url or str(request.base_url)).rstrip("/")
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
                download_url=f"{base}/f/{info.public_id}",
            )
            for info in listing.objects
        ],
        next_after=listing.last if listing.truncated else None,
    )
