"""Bucket operations: the service's bucket list, a bucket's life, its
sub-resources (location, versioning) and the listings of its objects."""

from __future__ import annotations

import base64
import binascii

from starlette.responses import Response

from app.http.s3.context import MAX_KEYS, S3Request, empty_response, xml_response
from app.http.s3.errors import S3Error
from app.http.s3.names import validate_object_key
from app.http.s3.xml.listings import (
    BucketEntry,
    ObjectEntry,
    list_buckets_xml,
    list_object_versions_xml,
    list_objects_v1_xml,
    list_objects_v2_xml,
)
from app.http.s3.xml.parsing import (
    parse_create_bucket_configuration,
    parse_delete_objects,
    parse_versioning_configuration,
)
from app.http.s3.xml.responses import (
    DeleteError,
    delete_result_xml,
    location_constraint_xml,
    versioning_configuration_xml,
)
from app.http.s3.xml.writer import DEFAULT_OWNER, STANDARD_STORAGE_CLASS
from app.store.listing import Listing

#: The most buckets one ListBuckets page holds (AWS's cap).
MAX_BUCKETS = 10000


async def list_buckets(req: S3Request) -> Response:
    """ListBuckets, in pages of `max-buckets` when asked (AWS's cap, and
    its page when no size is given, is MAX_BUCKETS)."""
    prefix = req.query.get("prefix", "")
    token = req.query.get("continuation-token")
    max_buckets = req.int_param("max-buckets", MAX_BUCKETS, top=MAX_BUCKETS)
    if max_buckets < 1:
        raise S3Error(
            "InvalidArgument",
            f"max-buckets must be between 1 and {MAX_BUCKETS}.",
            details={"ArgumentName": "max-buckets"},
        )
    buckets = await req.s3.list_buckets(
        prefix=prefix,
        after=_decode_token(token) if token else None,
        limit=max_buckets + 1,
    )
    page = buckets[:max_buckets]
    entries = [BucketEntry(name=b.name, creation_date=b.created_at) for b in page]
    more = len(buckets) > max_buckets
    return xml_response(
        list_buckets_xml(
            entries,
            continuation_token=_encode_token(page[-1].name) if more else None,
            prefix=prefix if "prefix" in req.query else None,
        )
    )


async def create_bucket(req: S3Request) -> Response:
    location = parse_create_bucket_configuration(await req.small_body())
    region = req.settings.s3_region
    # As AWS: a bucket is made in the endpoint's region. Unset, any region
    # is this endpoint's (SDKs send theirs).
    if location is not None and region is not None and location != region:
        raise S3Error(
            "IllegalLocationConstraintException",
            f"The {location} location constraint is incompatible with this endpoint's "
            f"region, {region}.",
        )
    await req.s3.create_bucket(req.bucket)
    return empty_response(headers={"Location": f"/{req.bucket}"})


async def head_bucket(req: S3Request) -> Response:
    await req.s3.require_bucket(req.bucket)
    return empty_response()


async def delete_bucket(req: S3Request) -> Response:
    await req.s3.delete_bucket(req.bucket)
    return empty_response(204)


async def get_location(req: S3Request) -> Response:
    await req.s3.require_bucket(req.bucket)
    return xml_response(location_constraint_xml(req.settings.s3_region))


async def get_versioning(req: S3Request) -> Response:
    await req.s3.require_bucket(req.bucket)
    return xml_response(versioning_configuration_xml())


async def put_versioning(req: S3Request) -> Response:
    """Suspended is what an unversioned bucket already is; Enabled would
    promise old versions that are never kept, so it is refused."""
    await req.s3.require_bucket(req.bucket)
    status = parse_versioning_configuration(await req.small_body())
    if status == "Enabled":
        raise S3Error(
            "NotImplemented",
            "Versioning is not supported: every object has one version (null).",
        )
    return empty_response()


async def list_objects_v1(req: S3Request) -> Response:
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter") or None
    marker = req.query.get("marker", "")
    max_keys = req.int_param("max-keys", MAX_KEYS, top=MAX_KEYS)
    listing = await req.s3.list_objects(
        req.bucket,
        prefix=prefix,
        delimiter=delimiter,
        after=marker or None,
        max_keys=max_keys,
    )
    return xml_response(
        list_objects_v1_xml(
            bucket=req.bucket,
            prefix=prefix,
            marker=marker,
            max_keys=max_keys,
            is_truncated=listing.truncated,
            contents=_entries(listing),
            common_prefixes=listing.prefixes,
            delimiter=delimiter,
            next_marker=listing.last if listing.truncated and delimiter else None,
            encoding_type=req.encoding_type(),
        )
    )


async def list_objects_v2(req: S3Request) -> Response:
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter") or None
    token = req.query.get("continuation-token")
    start_after = req.query.get("start-after")
    max_keys = req.int_param("max-keys", MAX_KEYS, top=MAX_KEYS)
    after = _decode_token(token) if token else start_after
    listing = await req.s3.list_objects(
        req.bucket, prefix=prefix, delimiter=delimiter, after=after, max_keys=max_keys
    )
    fetch_owner = req.query.get("fetch-owner") == "true"
    return xml_response(
        list_objects_v2_xml(
            bucket=req.bucket,
            prefix=prefix,
            max_keys=max_keys,
            is_truncated=listing.truncated,
            contents=_entries(listing, owner=fetch_owner),
            common_prefixes=listing.prefixes,
            delimiter=delimiter,
            continuation_token=token,
            next_continuation_token=(
                _encode_token(listing.last) if listing.truncated and listing.last else None
            ),
            start_after=start_after,
            encoding_type=req.encoding_type(),
        )
    )


async def list_versions(req: S3Request) -> Response:
    """ListObjectVersions: the objects, each as its one version "null"."""
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter") or None
    key_marker = req.query.get("key-marker", "")
    version_id_marker = req.query.get("version-id-marker", "")
    max_keys = req.int_param("max-keys", MAX_KEYS, top=MAX_KEYS)
    encoding_type = req.encoding_type()
    # A key's only version is "null": after (key, "null") comes the next key.
    listing = await req.s3.list_objects(
        req.bucket,
        prefix=prefix,
        delimiter=delimiter,
        after=key_marker or None,
        max_keys=max_keys,
    )
    return xml_response(
        list_object_versions_xml(
            bucket=req.bucket,
            prefix=prefix,
            key_marker=key_marker,
            version_id_marker=version_id_marker,
            max_keys=max_keys,
            is_truncated=listing.truncated,
            versions=_entries(listing),
            common_prefixes=listing.prefixes,
            delimiter=delimiter,
            next_key_marker=listing.last if listing.truncated else None,
            encoding_type=encoding_type,
        )
    )


async def delete_objects(req: S3Request) -> Response:
    body = await req.small_body()
    request = parse_delete_objects(body)
    await req.s3.require_bucket(req.bucket)
    deleted: list[str] = []
    errors: list[DeleteError] = []
    for key in request.keys:
        try:
            validate_object_key(key)
            await req.s3.delete_object(req.bucket, key)
            deleted.append(key)
        except S3Error as exc:
            errors.append(DeleteError(key=key, code=exc.code, message=exc.message))
    return xml_response(delete_result_xml(deleted, errors, quiet=request.quiet))


def _entries(listing: Listing, *, owner: bool = True) -> list[ObjectEntry]:
    """The listing's objects as its document's entries: up to 1,000 a page,
    built positionally in one loop (keywords and a call per entry took
    twice as long)."""
    page_owner = DEFAULT_OWNER if owner else None
    standard = STANDARD_STORAGE_CLASS
    return [
        ObjectEntry(info.key, info.modified, info.etag, info.size, standard, page_owner)
        for info in listing.objects
    ]


def _encode_token(last: str) -> str:
    return base64.urlsafe_b64encode(last.encode()).decode()


def _decode_token(token: str) -> str:
    try:
        after = base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        after = "\x00"
    if "\x00" in after:
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect")
    return after
