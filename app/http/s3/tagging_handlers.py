"""GetObjectTagging, PutObjectTagging and DeleteObjectTagging (the rules: tagging.py)."""

from __future__ import annotations

from starlette.responses import Response

from app.http.s3 import tagging
from app.http.s3.context import S3Request, empty_response, xml_response


async def get_object_tagging(req: S3Request) -> Response:
    info = await req.s3.head_object(req.bucket, req.key)
    return xml_response(tagging.tagging_xml(info.tags))


async def put_object_tagging(req: S3Request) -> Response:
    tags = tagging.parse_document(await req.small_body())
    await req.s3.set_object_tags(req.bucket, req.key, tags)
    return empty_response()


async def delete_object_tagging(req: S3Request) -> Response:
    await req.s3.set_object_tags(req.bucket, req.key, None)
    return empty_response(204)
