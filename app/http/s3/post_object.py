"""POST Object: a browser uploads a file into a bucket with an HTML form.

The form is signed by its policy, not by an Authorization header, so the
gateway hands such a request here before any signature check, and this
module is its whole authorization (post_policy.py): the fields sent before
the file are read first, the policy is verified and its conditions checked,
and only then is the file streamed into the store. Fields after the file are
ignored, as in AWS.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from urllib.parse import quote, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from app.http.s3 import sse, tagging
from app.http.s3.context import empty_response, stored_metadata, xml_response
from app.http.s3.errors import S3Error
from app.http.s3.names import validate_bucket_name, validate_object_key
from app.http.s3.payload_checks import verify_checksum
from app.http.s3.post_policy import CHECKSUM_PREFIX, LengthRange, authorize, check_fields
from app.http.s3.service import S3Service
from app.http.s3.signature_limits import checked_signature
from app.http.s3.xml.responses import post_response_xml
from app.http.shared.client import client_address
from app.http.shared.forms import FormError, StreamingForm
from app.http.shared.header_names import is_header_name
from app.http.shared.links import public_base
from app.http.shared.parsing import parse_decimal
from app.store.limits import MAX_CONTENT_TYPE_LENGTH
from app.store.services import Services

#: What a form may carry besides its file (boundaries, part headers, fields).
FORM_OVERHEAD_ALLOWANCE = 1024 * 1024
#: `success_action_status` values honoured; any other answers 204, as AWS.
SUCCESS_STATUSES = frozenset({200, 201, 204})
#: The placeholder in `key` that the file's own name replaces.
FILENAME_PLACEHOLDER = "${filename}"
#: The field holding the object's tags: a `<Tagging>` document, not a header.
TAGGING_FIELD = "tagging"


def is_form_post(method: str, headers: Mapping[str, str], query: bytes) -> bool:
    """A browser's form upload: an unsigned POST of multipart/form-data with
    no query (the gateway checks that it names a bucket and no key)."""
    return (
        method == "POST"
        and not query
        and "authorization" not in headers
        and headers.get("content-type", "").lower().startswith("multipart/form-data")
    )


async def post_object(
    request: Request, services: Services, s3: S3Service, bucket: str, *, now: datetime
) -> Response:
    settings = services.settings
    validate_bucket_name(bucket)
    declared = parse_decimal(request.headers.get("content-length", "").strip())
    if declared is not None and declared > settings.max_upload_size + FORM_OVERHEAD_ALLOWANCE:
        raise _too_large(settings.max_upload_size)
    try:
        form = StreamingForm(
            request.headers.get("content-type", ""),
            named_parts_are_text=True,
            announce_file=True,
        )
    except FormError as exc:
        raise S3Error("MalformedPOSTRequest", str(exc)) from None
    stream = form.file_bytes(request.stream())
    try:
        async for _ in stream:
            break  # the file part began: the fields before it are all that count
    except FormError as exc:
        raise S3Error("MalformedPOSTRequest", str(exc)) from None
    if not form.file_seen:  # the whole body is read: it had no file
        raise S3Error("IncorrectNumberOfFilesInPostRequest")

    fields = {name.lower(): value for name, value in form.fields.items()}
    credentials = {
        access_key: secret.get_secret_value()
        for access_key, secret in settings.s3_credentials.items()
    }
    # A wrong policy signature is a failed key check, limited per client.
    _, policy = await checked_signature(
        services.access.failures,
        client_address(request),
        lambda: authorize(fields, credentials, now=now, region=settings.s3_region),
        lambda authorized: authorized[0],
    )
    key = _object_key(fields, form.filename)
    check_fields(policy, {**fields, "key": key}, bucket)
    content_type = fields.get("content-type") or form.content_type
    if content_type is not None and (
        len(content_type) > MAX_CONTENT_TYPE_LENGTH or not _header_safe(content_type)
    ):
        raise S3Error("InvalidArgument", "The Content-Type field cannot be stored.")
    # The tagging document may span lines; it never goes back out in a header.
    metadata = stored_metadata(
        _as_header_values({name: v for name, v in fields.items() if name != TAGGING_FIELD})
    )
    # Checked before the file is read, as x-amz-tagging on PutObject is:
    # refused tags leave nothing stored.
    tags = _form_tags(fields.get(TAGGING_FIELD))
    # The encryption fields are PutObject's headers: the same refusals, and
    # a customer key seals the file as it would there.
    customer = sse.check_write(fields, encryption_on=services.store.encryption_enabled)

    body = _within(stream, policy.length_range, settings.max_upload_size)
    for name, value in fields.items():
        algorithm = name.removeprefix(CHECKSUM_PREFIX)
        if name.startswith(CHECKSUM_PREFIX) and algorithm not in ("algorithm", "type", "mode"):
            body = verify_checksum(body, algorithm, value)
    with services.store.customer_key(customer):
        info = await s3.put_object(
            bucket,
            key,
            body,
            content_type=content_type,
            metadata=metadata,
            tags=tags,
        )
    sealed = customer is None and (await services.store.seal_of(info)).master
    encryption = sse.response_headers(sealed, customer)
    location = f"{public_base(request, settings)}/{bucket}/{quote(key)}"
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect and urlsplit(redirect).scheme in ("http", "https"):
        query = urlencode({"bucket": bucket, "key": key, "etag": info.etag})
        separator = "&" if urlsplit(redirect).query else "?"
        return empty_response(303, {"Location": f"{redirect}{separator}{query}", **encryption})
    status = parse_decimal(fields.get("success_action_status", "").strip()) or 204
    headers = {"ETag": info.etag, "Location": location, **encryption}
    if status == 201:
        return xml_response(post_response_xml(location, bucket, key, info.etag), 201, headers)
    return empty_response(status if status in SUCCESS_STATUSES else 204, headers)


def _object_key(fields: Mapping[str, str], filename: str | None) -> str:
    key = fields.get("key")
    if not key:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'key'.")
    if FILENAME_PLACEHOLDER in key:
        name = posixpath.basename((filename or "").replace("\\", "/"))
        key = key.replace(FILENAME_PLACEHOLDER, name)
    return validate_object_key(key)


def _form_tags(document: str | None) -> dict[str, str] | None:
    """The `tagging` field's tags, under PutObjectTagging's rules. A blank
    field is no tags, as an empty x-amz-tagging header is."""
    if document is None:
        return None
    if not document.strip():
        return {}
    return tagging.parse_document(document.encode("utf-8"))


def _header_safe(value: str) -> bool:
    """Whether a field's value can be given back in a header (no control
    characters: a CR or LF would break the response)."""
    return all(ch == "\t" or (ch >= " " and ch != "\x7f") for ch in value)


def _as_header_values(fields: Mapping[str, str]) -> list[tuple[str, str]]:
    """Fields as request headers would carry them: UTF-8 bytes read as
    Latin-1, which is how a header's value is stored and given back."""
    pairs = []
    for name, value in fields.items():
        if name.lower().startswith("x-amz-meta-") and not is_header_name(name):
            # PutObject's metadata arrives as headers, so its names always fit
            # one; a form's field name may be anything the policy allows, and
            # one no header can carry would make the object unreadable.
            raise S3Error(
                "InvalidArgument",
                f"The field name {name[:64]!r} cannot be a header name: user metadata "
                "names are ASCII letters, digits and !#$%&'*+-.^_`|~.",
                details={"ArgumentName": name[:64]},
            )
        if not _header_safe(value):
            raise S3Error("InvalidArgument", f"The field {name[:64]!r} holds control characters.")
        pairs.append((name, value.encode("utf-8").decode("latin-1")))
    return pairs


async def _within(
    stream: AsyncIterator[bytes], length_range: LengthRange | None, max_size: int
) -> AsyncIterator[bytes]:
    """The file's bytes, refused as they pass the policy's range or the
    service's limit (the store then discards what it stored)."""
    high = min(length_range.high, max_size) if length_range else max_size
    size = 0
    try:
        async for piece in stream:
            size += len(piece)
            if size > high:
                raise _too_large(high)
            yield piece
    except FormError as exc:
        raise S3Error("MalformedPOSTRequest", str(exc)) from None
    if length_range is not None and size < length_range.low:
        raise S3Error(
            "EntityTooSmall",
            f"Your proposed upload is smaller than the minimum of {length_range.low} bytes "
            "the policy allows.",
        )


def _too_large(limit: int) -> S3Error:
    return S3Error(
        "EntityTooLarge",
        f"Your proposed upload exceeds the maximum allowed size of {limit} bytes.",
    )
