"""S3 error codes and the exception that carries one.

Every failure of the S3 protocol layer is an :class:`S3Error`. It knows its S3
``Code``, the HTTP status and a message that is safe to send to the client (no
secret, no signing key, no internal detail). ``details`` holds extra elements
for the ``<Error>`` document, exactly as AWS adds them (for example
``StringToSign``/``CanonicalRequest`` on ``SignatureDoesNotMatch``, ``Region`` on
a wrong-region ``AuthorizationHeaderMalformed`` -- minio-go reads that one to
retry in the right region). They are built from what the client itself sent,
with the secrets it sent taken out (`redact_signed_text`: an SSE-C key is a
signed header, and an error must not hand it to whoever reads the answer).

Use::

    raise S3Error("NoSuchKey", resource="/bucket/key")
    raise S3Error("InvalidArgument", "max-keys must be a non-negative integer")

``app.http.s3.xml.responses.s3_error_xml(err, ...)`` renders it. Store, Telegram and database
errors become S3Errors through the table both APIs share (`s3_error_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote

import structlog

from app.http.shared.errors import Failure, failure_for

log = structlog.get_logger("app.s3")

#: Headers (and presigned query parameters) whose values are secrets: what a
#: signature error echoes of the signed text shows them as REDACTED.
SECRET_HEADERS: Final = frozenset(
    {
        "x-amz-server-side-encryption-customer-key",
        "x-amz-copy-source-server-side-encryption-customer-key",
        "x-amz-security-token",
        "authorization",
        "cookie",
    }
)
REDACTED: Final = "<redacted>"

#: code -> (HTTP status, default message). Messages follow AWS's wording.
ERROR_TABLE: Final[Mapping[str, tuple[int, str]]] = {
    # 3xx (conditional requests; rendered without a body by the routes)
    "NotModified": (304, "Not Modified"),
    # 400
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (
        400,
        "Error parsing the X-Amz-Credential parameter or other presigned query parameters.",
    ),
    "BadDigest": (400, "The Content-MD5 or checksum you specified did not match what we received."),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed object size."),
    "EntityTooSmall": (
        400,
        "Your proposed upload is smaller than the minimum allowed object size.",
    ),
    "IllegalLocationConstraintException": (
        400,
        "The location constraint is incompatible for the region specific endpoint "
        "this request was sent to.",
    ),
    "IncompleteBody": (
        400,
        "You did not provide the number of bytes specified by the Content-Length HTTP header.",
    ),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidEncryptionAlgorithmError": (
        400,
        "The encryption request you specified is not valid. The valid value is AES256.",
    ),
    "InvalidDigest": (400, "The Content-MD5 or checksum you specified is not valid."),
    "IncorrectNumberOfFilesInPostRequest": (
        400,
        "POST requires exactly one file upload per request.",
    ),
    "InvalidPolicyDocument": (
        400,
        "The content of the form does not meet the conditions specified in the policy document.",
    ),
    "MalformedPOSTRequest": (
        400,
        "The body of your POST request is not well-formed multipart/form-data.",
    ),
    "InvalidPart": (
        400,
        "One or more of the specified parts could not be found. The part may not have been "
        "uploaded, or the specified entity tag may not match the part's entity tag.",
    ),
    "InvalidPartOrder": (
        400,
        "The list of parts was not in ascending order. Parts must be ordered by part number.",
    ),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidTag": (400, "The tag provided was not a valid tag."),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "KeyTooLongError": (400, "Your key is too long."),
    "MalformedACLError": (
        400,
        "The XML you provided was not well-formed or did not validate against our published "
        "schema.",
    ),
    "MalformedXML": (
        400,
        "The XML you provided was not well-formed or did not validate against our published "
        "schema.",
    ),
    "MetadataTooLarge": (
        400,
        "Your metadata headers exceed the maximum allowed metadata size.",
    ),
    "MissingRequestBodyError": (400, "Request Body is empty."),
    "RequestTimeout": (
        400,
        "Your socket connection to the server was not read from or written to within the "
        "timeout period.",
    ),
    "XAmzContentSHA256Mismatch": (
        400,
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
    ),
    # 403
    "AccessDenied": (403, "Access Denied"),
    "InvalidAccessKeyId": (
        403,
        "The AWS Access Key Id you provided does not exist in our records.",
    ),
    "RequestTimeTooSkewed": (
        403,
        "The difference between the request time and the current time is too large.",
    ),
    "SignatureDoesNotMatch": (
        403,
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
    ),
    # 404
    "NoSuchBucket": (404, "The specified bucket does not exist."),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchUpload": (
        404,
        "The specified multipart upload does not exist. The upload ID may be invalid, or the "
        "upload may have been aborted or completed.",
    ),
    # 405, 409, 411, 412, 416
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "BucketAlreadyExists": (
        409,
        "The requested bucket name is not available. Please select a different name and try again.",
    ),
    "BucketAlreadyOwnedByYou": (
        409,
        "Your previous request to create the named bucket succeeded and you already own it.",
    ),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty."),
    "ConditionalRequestConflict": (
        409,
        "The conditional request cannot succeed due to a conflicting operation against this "
        "resource.",
    ),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "PreconditionFailed": (
        412,
        "At least one of the preconditions you specified did not hold.",
    ),
    "InvalidRange": (416, "The requested range is not satisfiable."),
    "InvalidPartNumber": (416, "The requested partnumber is not satisfiable."),
    # 5xx
    "InternalError": (500, "We encountered an internal error. Please try again."),
    # Ours, not AWS's: no intact copy of the object's data is left in
    # Telegram (docs: "Durability"). Not 503: retrying cannot help.
    "ObjectDamaged": (502, "The object is damaged: no intact copy of its data is left."),
    # Ours: the object is encrypted under a master key this service is not
    # given (docs/encryption.md); it is never served as its sealed bytes.
    "EncryptionKeyUnavailable": (
        503,
        "The object is encrypted under a master key that is not configured.",
    ),
    "NotImplemented": (
        501,
        "A header you provided implies functionality that is not implemented.",
    ),
    "ServiceUnavailable": (503, "Please reduce your request rate."),
    "SlowDown": (503, "Please reduce your request rate."),
    # Ours: every storage chat holds CHAT_MESSAGE_LIMIT messages; nothing new
    # is stored until an operator adds a chat. (MinIO answers its full disks
    # with 507 too.) Not 503: retrying cannot help.
    "StorageFull": (507, "The storage is full: every storage chat is at its message limit."),
}


class S3Error(Exception):
    """An S3 error response: ``code`` (e.g. ``NoSuchKey``), ``status``, ``message``.

    ``message`` and ``status`` default to the table entry of ``code``; an unknown
    code without an explicit status is a programming error (``KeyError``).
    ``resource`` is the ``<Resource>`` of the error document (usually the request
    path); ``details`` adds further elements (``{"Region": "eu-west-1"}``);
    ``headers`` are response headers the routes should add (rarely needed).

    ``str(err)`` is ``"Code: message"`` and, like ``message``, safe to log and to
    show a client.
    """

    def __init__(
        self,
        code: str,
        message: str | None = None,
        status: int | None = None,
        *,
        resource: str | None = None,
        details: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if status is None or message is None:
            default_status, default_message = ERROR_TABLE[code]
            status = default_status if status is None else status
            message = default_message if message is None else message
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.resource = resource
        self.details: dict[str, str] = dict(details or {})
        self.headers: dict[str, str] = dict(headers or {})

    def __repr__(self) -> str:
        return f"S3Error({self.code!r}, {self.message!r}, {self.status})"


def from_failure(failure: Failure) -> S3Error:
    """The S3 rendering of a decision of the shared error table."""
    status = failure.s3_status if failure.s3_status is not None else failure.status
    return S3Error(failure.s3_code, failure.message, status, headers=failure.headers)


def s3_error_for(exc: BaseException) -> S3Error | None:
    """A store, Telegram or database error as S3 reports it (the table in
    `app.http.shared.errors`); None for anything else."""
    failure = failure_for(exc)
    return None if failure is None else from_failure(failure)


def as_s3_error(exc: BaseException, method: str) -> S3Error:
    """What an operation raised, as an S3 client reads it (the cause of an
    unexpected error is logged, never shown)."""
    if isinstance(exc, S3Error):
        return exc
    error = s3_error_for(exc)
    if error is not None:
        return error
    log.error("s3_internal_error", method=method, exc_info=exc)
    return S3Error("InternalError")


def redact_signed_text(text: str, *, query_line: int | None = None) -> str:
    """A canonical request or string to sign, as an error may echo it: each
    `name:value` line of a secret header, and each secret `name=value` of the
    query on line `query_line`, with REDACTED for the value."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        if number == query_line:
            lines[number] = "&".join(_redacted_pair(pair) for pair in line.split("&"))
            continue
        name, colon, _ = line.partition(":")
        if colon and name.strip().lower() in SECRET_HEADERS:
            lines[number] = f"{name}:{REDACTED}"
    return "\n".join(lines)


def _redacted_pair(pair: str) -> str:
    name, equals, _ = pair.partition("=")
    if equals and unquote(name).lower() in SECRET_HEADERS:
        return f"{name}={REDACTED}"
    return pair
