"""GetBucketAcl, PutBucketAcl, GetObjectAcl and PutObjectAcl (the rules: acl.py)."""

from __future__ import annotations

from starlette.responses import Response

from app.http.s3 import acl
from app.http.s3.context import S3Request, empty_response, xml_response
from app.http.s3.xml.writer import DEFAULT_OWNER


async def get_bucket_acl(req: S3Request) -> Response:
    await req.s3.require_bucket(req.bucket)
    return xml_response(acl.policy_xml(DEFAULT_OWNER))


async def put_bucket_acl(req: S3Request) -> Response:
    await req.s3.require_bucket(req.bucket)
    await _check_acl_request(req)
    return empty_response()


async def get_object_acl(req: S3Request) -> Response:
    await req.s3.head_object(req.bucket, req.key)
    return xml_response(acl.policy_xml(DEFAULT_OWNER))


async def put_object_acl(req: S3Request) -> Response:
    await req.s3.head_object(req.bucket, req.key)
    await _check_acl_request(req)
    return empty_response()


async def _check_acl_request(req: S3Request) -> None:
    """The canned header, the grant headers or the policy body (one of them)."""
    acl.check_request_headers(req.headers)
    body = await req.small_body()
    if "x-amz-acl" not in req.headers or body.strip():
        acl.check_policy(body, DEFAULT_OWNER)
