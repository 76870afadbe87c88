"""Bucket names, object keys and the request path they come from.

Path-style addressing only: ``/<bucket>`` and ``/<bucket>/<key>``. Use
:func:`split_path` on the ASGI scope's ``raw_path`` rather than a decoded path:
it keeps ``//``, a trailing ``/`` and ``%2F`` inside keys exactly, and refuses
invalid UTF-8 instead of replacing it.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote_to_bytes

from app.http.s3.errors import S3Error
from app.store.limits import MAX_KEY_LENGTH, key_bytes

#: Names that would collide with the service's own routes (the predecessor
#: answered ``/api``... with a bucket). Refused at creation.
RESERVED_BUCKETS: Final = frozenset(
    {
        "api",
        "f",
        "file",
        "files",
        "health",
        "ready",
        "metrics",
        "docs",
        "redoc",
        "openapi.json",
        "static",
        # WebDAV (app/http/dav).
        "dav",
    }
)

#: The longest key, in bytes of UTF-8 (the store's column holds as many).
MAX_KEY_BYTES: Final = MAX_KEY_LENGTH

_BUCKET_RE: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IPV4_RE: Final = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
_FORBIDDEN_PREFIXES: Final = ("xn--", "sthree-", "amzn-s3-demo-")
_FORBIDDEN_SUFFIXES: Final = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid S3 bucket name, or ``None`` if it is.

    The S3 rules: 3-63 characters of ``a-z 0-9 . -``, starting and ending with
    a letter or digit, no ``..`` (nor ``.-``/``-.``), not an IPv4 address, none
    of AWS's reserved prefixes and suffixes. Reserved route names are *not*
    checked here (see :func:`validate_bucket_name`).
    """
    if not 3 <= len(name) <= 63:
        return "Bucket names must be between 3 and 63 characters long."
    if not _BUCKET_RE.fullmatch(name):
        return (
            "Bucket names can consist only of lowercase letters, numbers, dots and hyphens, "
            "and must begin and end with a letter or number."
        )
    if ".." in name or ".-" in name or "-." in name:
        return "Bucket names must not contain two adjacent periods, nor a period next to a hyphen."
    if _IPV4_RE.fullmatch(name):
        return "Bucket names must not be formatted as an IP address."
    if name.startswith(_FORBIDDEN_PREFIXES) or name.endswith(_FORBIDDEN_SUFFIXES):
        return "Bucket names must not use a reserved prefix or suffix."
    return None


def is_valid_bucket_name(name: str) -> bool:
    return bucket_name_problem(name) is None


def is_reserved_bucket(name: str) -> bool:
    return name in RESERVED_BUCKETS


def validate_bucket_name(name: str, *, allow_reserved: bool = False) -> str:
    """Return ``name`` or raise ``InvalidBucketName``.

    Reserved route names (:data:`RESERVED_BUCKETS`) are refused unless
    ``allow_reserved`` (use the default when creating a bucket).
    """
    problem = bucket_name_problem(name)
    if problem is None and not allow_reserved and name in RESERVED_BUCKETS:
        problem = "This bucket name is reserved by the service."
    if problem is not None:
        raise S3Error("InvalidBucketName", problem, details={"BucketName": name[:255]})
    return name


def validate_object_key(key: str) -> str:
    """Return ``key`` or raise: empty or containing NUL/invalid text -> ``InvalidArgument``,
    over :data:`MAX_KEY_BYTES` bytes of UTF-8 -> ``KeyTooLongError``."""
    if not key:
        raise S3Error("InvalidArgument", "The object key must not be empty.")
    if "\x00" in key:
        raise S3Error("InvalidArgument", "The object key must not contain NUL.")
    size = key_bytes(key)
    if size is None:
        raise S3Error("InvalidArgument", "The object key is not valid UTF-8.")
    if size > MAX_KEY_BYTES:
        raise S3Error(
            "KeyTooLongError",
            details={"MaxSizeAllowed": str(MAX_KEY_BYTES), "Size": str(size)},
        )
    return key


def split_path(raw_path: bytes | str) -> tuple[str | None, str | None]:
    """``(bucket, key)`` of a path-style request path as received (percent-encoded).

    ``/`` -> ``(None, None)``; ``/b`` and ``/b/`` -> ``("b", None)``;
    ``/b/k`` -> ``("b", "k")``; ``/b//k/`` -> ``("b", "/k/")``. The key is
    decoded exactly once (``+`` stays ``+``, ``%2F`` is ``/``). Raises
    ``InvalidURI`` for a path that is not absolute or not UTF-8; neither part is
    validated (:func:`validate_bucket_name`, :func:`validate_object_key`).
    """
    raw = raw_path.encode("latin-1") if isinstance(raw_path, str) else raw_path
    if not raw.startswith(b"/"):
        raise S3Error("InvalidURI")
    bucket_raw, _, key_raw = raw[1:].partition(b"/")
    try:
        bucket = unquote_to_bytes(bucket_raw).decode("utf-8")
        key = unquote_to_bytes(key_raw).decode("utf-8")
    except UnicodeDecodeError:
        raise S3Error("InvalidURI", "The request path is not valid UTF-8.") from None
    if not bucket:
        return None, None
    return bucket, key or None
