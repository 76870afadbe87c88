"""The S3 HTTP surface: a pure ASGI gateway in front of the native API.

Which requests are S3's: one signed with SigV4 (an `Authorization:
AWS4-HMAC-SHA256 ...` header or `X-Amz-Signature` in the query) or SigV2
(`Authorization: AWS ...`, or `AWSAccessKeyId` and `Signature`), one addressed
to `<bucket>.<S3_DOMAIN>`, and, while the S3 API is on (S3_CREDENTIALS set),
every request whose path is not the native API's. The native paths are the
app's own routes (read from the app itself, so they cannot drift) and
everything under a reserved bucket name; an unsigned `GET /bucket/key` thus
gets S3's XML AccessDenied, not the native API's JSON 404. Bucket and key come
from the raw path exactly as sent, because that is what the client signed.

The gateway checks the signature, hands the request to the route table
(`router.py`) and renders whatever was raised as an S3 `<Error>` document
(through the error table both APIs share, `app.http.shared.errors`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from urllib.parse import unquote

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.s3.context import XML, S3Request, request_id
from app.http.s3.errors import S3Error, as_s3_error
from app.http.s3.names import is_reserved_bucket, split_path
from app.http.s3.post_object import is_form_post, post_object
from app.http.s3.router import dispatch, label_route
from app.http.s3.service import S3Service
from app.http.s3.signature_limits import checked_signature
from app.http.s3.sigv2 import is_sigv2_request, verify_sigv2
from app.http.s3.sigv4 import is_sigv4_request, verify_request
from app.http.s3.xml.responses import s3_error_xml
from app.http.shared.client import client_address
from app.http.shared.headers import IndexedHeaders
from app.http.shared.route_label import set_route_label
from app.store.services import Services

__all__ = ["XML", "S3Gateway", "draining_refusal", "error_response"]

ServiceLookup = Callable[[Scope], Services | None]
S3Lookup = Callable[[Scope], S3Service | None]


class S3Gateway:
    def __init__(self, app: ASGIApp, services: ServiceLookup, s3: S3Lookup) -> None:
        self.app = app
        self._services = services
        self._s3 = s3

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        services = self._services(scope)
        headers = IndexedHeaders(scope=scope)
        virtual_bucket = _virtual_host_bucket(headers, services)
        if not _belongs_to_s3(scope, headers, services, virtual_bucket):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        response = await _handle(request, headers, services, self._s3(scope), virtual_bucket)
        await response(scope, receive, send)


def draining_refusal(scope: Scope, services: Services | None, request_id: str) -> bytes | None:
    """The `<Error>` body of the 503 that refuses an S3 write during shutdown
    (the request middleware sends it); None if the request is not an S3 one."""
    headers = Headers(scope=scope)
    if not _belongs_to_s3(scope, headers, services, _virtual_host_bucket(headers, services)):
        return None
    path = scope.get("raw_path") or scope["path"].encode()
    error = S3Error("ServiceUnavailable", "The service is shutting down; retry shortly.")
    return s3_error_xml(error, resource=path.decode("latin-1"), request_id=request_id)


def _belongs_to_s3(
    scope: Scope, headers: Headers, services: Services | None, virtual_bucket: str | None
) -> bool:
    if virtual_bucket is not None or _is_signed(headers, scope["query_string"]):
        return True
    s3_api_on = services is not None and bool(services.settings.s3_credentials)
    return s3_api_on and not is_native_path(scope)


def _is_signed(headers: Headers, query: bytes) -> bool:
    return is_sigv4_request(headers, query) or is_sigv2_request(headers, query)


def is_native_path(scope: Scope) -> bool:
    """Whether the native API owns this path: `/`, any path under a reserved
    bucket name (no S3 bucket can have one), or any path one of the app's
    routes matches, whatever its method (the native API answers 405 then)."""
    first = scope["path"].lstrip("/").split("/", 1)[0]
    if first == "" or is_reserved_bucket(first):
        return True
    routes = getattr(scope.get("app"), "routes", ())
    return any(route.matches(scope)[0] is not Match.NONE for route in routes)


def _virtual_host_bucket(headers: Headers, services: Services | None) -> str | None:
    domain = services.settings.s3_domain if services is not None else None
    if not domain:
        return None
    host = headers.get("host", "").rsplit(":", 1)[0].lower()
    suffix = "." + domain.lower().lstrip(".")
    if host.endswith(suffix) and len(host) > len(suffix):
        return host[: -len(suffix)]
    return None


async def _handle(
    request: Request,
    headers: Headers,
    services: Services | None,
    s3: S3Service | None,
    virtual_bucket: str | None,
) -> Response:
    path = request.scope.get("raw_path") or request.scope["path"].encode()
    # Until a handler is chosen (refused before: a bad signature, no credentials).
    set_route_label(request.scope, "s3")
    try:
        if services is None or s3 is None:
            raise S3Error("ServiceUnavailable", "The service is starting.")
        credentials = {
            key: secret.get_secret_value()
            for key, secret in services.settings.s3_credentials.items()
        }
        if not credentials:
            raise S3Error(
                "AccessDenied",
                "The S3 API is turned off: no S3_CREDENTIALS are configured.",
            )
        if virtual_bucket is not None:
            bucket: str | None = virtual_bucket
            key: str | None = unquote(path.decode("latin-1"))[1:] or None
        else:
            bucket, key = split_path(path)
        query = request.scope["query_string"]
        if bucket is not None and key is None and is_form_post(request.method, headers, query):
            # Signed by its policy, in the form: post_object is its authorization.
            label_route(request.scope, post_object)
            return await post_object(request, services, s3, bucket, now=datetime.now(UTC))
        now, region = datetime.now(UTC), services.settings.s3_region
        if is_sigv2_request(headers, query):
            verify = partial(
                verify_sigv2,
                *(request.method, path, query, headers, credentials),
                now=now,
                region=region,
                virtual_bucket=virtual_bucket,
            )
        else:
            verify = partial(
                verify_request,
                *(request.method, path, query, headers, credentials),
                now=now,
                region=region,
            )
        # A wrong signature is a failed key check, limited per client.
        verified = await checked_signature(
            services.access.failures, client_address(request), verify, lambda v: v.access_key
        )
        return await dispatch(S3Request(request, headers, services, s3, verified, bucket, key))
    except ClientDisconnect:
        return Response(status_code=400)
    except Exception as exc:
        return error_response(as_s3_error(exc, request.method), request, path)


def error_response(error: S3Error, request: Request, path: bytes) -> Response:
    rid = request_id()
    headers = {"x-amz-request-id": rid, **error.headers}
    if error.status == 503:
        headers.setdefault("Retry-After", "5")
    if request.method == "HEAD" or error.status == 304:
        return Response(status_code=error.status, headers=headers)
    body = s3_error_xml(error, resource=error.resource or path.decode("latin-1"), request_id=rid)
    return Response(body, status_code=error.status, headers=headers, media_type=XML)
