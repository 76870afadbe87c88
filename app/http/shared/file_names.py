"""What the native files' faces (the native API's forms, raw PUT and tus;
WebDAV) share: where their objects live, how a file's name and type are
taken from what the client sent, and the link a file is downloaded from."""

from __future__ import annotations

import mimetypes

from fastapi import Request

from app.config.settings import Settings
from app.http.shared.links import public_base
from app.kit.bidi import strip_bidi
from app.store.limits import MAX_CONTENT_TYPE_LENGTH
from app.store.service import DEFAULT_CONTENT_TYPE

# The bucket the native API keeps its objects in. S3 bucket names cannot start
# with "_", so it can never collide with a bucket created through S3.
NATIVE_BUCKET = "_native"
# Files stored by name (`PUT /api/files/{name}`, WebDAV) have their name under
# this key prefix: `named/photos/a.jpg`. Form and tus uploads have random keys.
NAMED_PREFIX = "named/"
# File names are cut to this many characters (they name downloads).
MAX_FILE_NAME_LENGTH = 255


def download_url(request: Request, settings: Settings, public_id: str) -> str:
    return f"{public_base(request, settings)}/f/{public_id}"


def clean_name(name: str | None, fallback: str) -> str:
    """A file name as it is kept: no control characters (C0, DEL, C1: 0x9b
    begins an escape sequence in many terminals), bidi ones included
    (app.kit.bidi), no folders, at most MAX_FILE_NAME_LENGTH characters."""
    printable = "".join(ch for ch in (name or "") if ch >= " " and not "\x7f" <= ch <= "\x9f")
    cleaned = strip_bidi(printable).strip()
    # Browsers on Windows send a full path as the file name.
    cleaned = cleaned.replace("\\", "/").rsplit("/", 1)[-1]
    return (cleaned or fallback)[:MAX_FILE_NAME_LENGTH]


def guess_type(name: str, declared: str | None) -> str:
    """The declared type unless it is missing, generic, or not something a
    Content-Type header can carry back (printable ASCII, up to
    MAX_CONTENT_TYPE_LENGTH); then a guess from the name."""
    declared = (declared or "").strip()
    usable = (
        declared.isascii()
        and declared.isprintable()
        and len(declared) <= MAX_CONTENT_TYPE_LENGTH
        and declared.split(";")[0].strip() not in ("", DEFAULT_CONTENT_TYPE)
    )
    if usable:
        return declared
    guessed, _ = mimetypes.guess_type(name)
    return guessed or DEFAULT_CONTENT_TYPE
