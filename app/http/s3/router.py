"""The S3 route table: which handler answers a verified request.

A route is (method, level, sub-resource query flags, required header) ->
handler, where the level is the service (`/`), a bucket (`/bucket`) or an
object (`/bucket/key`). The table is read top to bottom and the first route
that matches wins, so a route with a sub-resource comes before the plain
operation on the same level. A sub-resource S3 has but this server does not
(policies, bucket tagging, ...) is NotImplemented, whatever the method. A
sub-resource served for some methods only is MethodNotAllowed for the others:
it never falls through to the plain operation (a `DELETE ?versioning` is not
a DeleteBucket). No route for the method at that level is MethodNotAllowed.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.responses import Response
from starlette.types import Scope

from app.http.s3 import acl_handlers as acl
from app.http.s3 import attributes_handler as attributes
from app.http.s3 import bucket_handlers as bucket
from app.http.s3 import multipart_handlers as multipart
from app.http.s3 import object_handlers as obj
from app.http.s3 import tagging_handlers as tagging
from app.http.s3.context import S3Request
from app.http.s3.errors import S3Error
from app.http.s3.names import validate_bucket_name, validate_object_key
from app.http.s3.xml.writer import NULL_VERSION_ID
from app.http.shared.route_label import set_route_label

Handler = Callable[[S3Request], Awaitable[Response]]


class Level(enum.Enum):
    SERVICE = "service"
    BUCKET = "bucket"
    OBJECT = "object"


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    level: Level
    handler: Handler
    #: Query flags that must be present: "name", or "name=value" for a value.
    query: tuple[str, ...] = ()
    #: A header that must be present (the copy operations).
    header: str | None = None

    def matches(self, req: S3Request, level: Level) -> bool:
        if self.method != req.method or self.level != level:
            return False
        if self.header is not None and self.header not in req.headers:
            return False
        for flag in self.query:
            name, has_value, value = flag.partition("=")
            if name not in req.query or (has_value and req.query[name] != value):
                return False
        return True


SERVICE, BUCKET, OBJECT = Level.SERVICE, Level.BUCKET, Level.OBJECT

ROUTES: tuple[Route, ...] = (
    # The service
    Route("GET", SERVICE, bucket.list_buckets),
    # Bucket sub-resources
    Route("GET", BUCKET, bucket.get_location, query=("location",)),
    Route("GET", BUCKET, bucket.get_versioning, query=("versioning",)),
    Route("PUT", BUCKET, bucket.put_versioning, query=("versioning",)),
    Route("GET", BUCKET, bucket.list_versions, query=("versions",)),
    Route("GET", BUCKET, multipart.list_uploads, query=("uploads",)),
    Route("POST", BUCKET, bucket.delete_objects, query=("delete",)),
    Route("GET", BUCKET, bucket.list_objects_v2, query=("list-type=2",)),
    Route("GET", BUCKET, acl.get_bucket_acl, query=("acl",)),
    Route("PUT", BUCKET, acl.put_bucket_acl, query=("acl",)),
    # Buckets
    Route("GET", BUCKET, bucket.list_objects_v1),
    Route("PUT", BUCKET, bucket.create_bucket),
    Route("HEAD", BUCKET, bucket.head_bucket),
    Route("DELETE", BUCKET, bucket.delete_bucket),
    # Multipart uploads
    Route(
        "PUT",
        OBJECT,
        multipart.upload_part_copy,
        query=("partNumber", "uploadId"),
        header="x-amz-copy-source",
    ),
    Route("PUT", OBJECT, multipart.upload_part, query=("partNumber", "uploadId")),
    Route("GET", OBJECT, multipart.list_parts, query=("uploadId",)),
    Route("POST", OBJECT, multipart.create_upload, query=("uploads",)),
    Route("POST", OBJECT, multipart.complete_upload, query=("uploadId",)),
    Route("DELETE", OBJECT, multipart.abort_upload, query=("uploadId",)),
    # Object sub-resources
    Route("GET", OBJECT, attributes.get_object_attributes, query=("attributes",)),
    Route("GET", OBJECT, tagging.get_object_tagging, query=("tagging",)),
    Route("PUT", OBJECT, tagging.put_object_tagging, query=("tagging",)),
    Route("DELETE", OBJECT, tagging.delete_object_tagging, query=("tagging",)),
    Route("GET", OBJECT, acl.get_object_acl, query=("acl",)),
    Route("PUT", OBJECT, acl.put_object_acl, query=("acl",)),
    # Objects
    Route("PUT", OBJECT, obj.copy_object, header="x-amz-copy-source"),
    Route("PUT", OBJECT, obj.put_object),
    Route("GET", OBJECT, obj.get_object),
    Route("HEAD", OBJECT, obj.get_object),
    Route("DELETE", OBJECT, obj.delete_object),
)

#: ROUTES by (method, level), in table order: a request looks only at the
#: routes that can match it (scanning all of them was ~3 % of a small GET).
_CANDIDATES: dict[tuple[str, Level], tuple[Route, ...]] = {}
for _route in ROUTES:
    _CANDIDATES[_route.method, _route.level] = (
        *_CANDIDATES.get((_route.method, _route.level), ()),
        _route,
    )

#: Sub-resources S3 defines that no route here serves: NotImplemented,
#: whatever the method.
UNSUPPORTED: dict[Level, frozenset[str]] = {
    SERVICE: frozenset(),
    BUCKET: frozenset({"policy", "cors", "lifecycle", "tagging", "website", "encryption"}),
    OBJECT: frozenset({"retention", "legal-hold", "torrent"}),
}
#: Sub-resources that routes above serve, for some methods only.
SUBRESOURCES: frozenset[str] = frozenset(
    {"acl", "attributes", "delete", "location", "tagging", "uploads", "versioning", "versions"}
)


def route(req: S3Request) -> Handler:
    """The handler for `req`, after its bucket name and key are validated."""
    level = _level(req)
    asked = req.query.keys()
    if UNSUPPORTED[level] & asked:
        raise S3Error("NotImplemented")
    candidates = _CANDIDATES.get((req.method, level), ())
    found = next((candidate for candidate in candidates if candidate.matches(req, level)), None)
    if found is None:
        raise S3Error("MethodNotAllowed")
    served = {flag.partition("=")[0] for flag in found.query}
    if (SUBRESOURCES & asked) - served:
        raise S3Error("MethodNotAllowed")
    return found.handler


def _level(req: S3Request) -> Level:
    if not req.has_bucket:
        return SERVICE
    # Reserved names (the native API's) can be read, never created.
    validate_bucket_name(req.bucket, allow_reserved=req.method != "PUT")
    if not req.has_key:
        return BUCKET
    validate_object_key(req.key)
    if req.query.get("versionId", NULL_VERSION_ID) != NULL_VERSION_ID:
        # Buckets are never versioned: "null" names an object's one version.
        raise S3Error("InvalidArgument", "Invalid version id specified")
    return OBJECT


def label_route(scope: Scope, handler: Callable[..., Awaitable[Response]]) -> None:
    """Name the request by the handler that answers it (`s3:get_object`), for
    /metrics and its log line."""
    set_route_label(scope, f"s3:{handler.__name__}")


async def dispatch(req: S3Request) -> Response:
    handler = route(req)
    label_route(req.request.scope, handler)
    return await handler(req)
