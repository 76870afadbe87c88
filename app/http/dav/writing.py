"""The methods that change one resource: PUT, MKCOL, DELETE and PROPPATCH.

PUT streams the body into the same store path as the native API's
`PUT /api/files/{name}` (chunks in Telegram through the shared upload
buffers, replicas, encryption; a replaced file keeps its /f/ link and goes
to the trash), with `Content-Length` or chunked (Finder sends no length).
The locks are checked before the body is read and again once it is stored,
just before the commit; a refused body is released to the GC.

DELETE sends a file, or a folder with everything under it, to the trash
(`TRASH_RETENTION_SECONDS`), in one transaction.
"""

from __future__ import annotations

import math
from datetime import datetime

from starlette.responses import Response

from app.http.dav.auth import owner_limit
from app.http.dav.context import BUCKET, DavRequest
from app.http.dav.errors import DavError, bad_request
from app.http.dav.paths import ROOT_KEY, file_key, folder_key, href, name_of
from app.http.dav.properties import LIVE, MODIFICATION_TIMES, MTIME
from app.http.dav.xml_bodies import MAX_XML_BODY_BYTES, PropertyUpdate, parse_proppatch
from app.http.dav.xml_out import (
    ROOT_NAMESPACES,
    XML_DECLARATION,
    XML_MEDIA_TYPE,
    element,
    escape,
    status_line,
)
from app.http.shared.conditions import etag_matches, parse_http_date
from app.http.shared.file_names import clean_name, guess_type
from app.http.shared.parsing import parse_decimal
from app.store.dav_locks import Target
from app.store.file_tree import PropertyChange, parent_of
from app.store.limits import MAX_CONTENT_TYPE_LENGTH
from app.store.object_write import ObjectWrite
from app.store.service import WriteCheck

#: Dead properties one file or folder may have.
MAX_PROPERTIES_PER_RESOURCE = 200
#: rclone's owncloud vendor sends the upload's checksum; an MD5 one is checked.
_CHECKSUM_HEADER = "oc-checksum"


def kept_parent(key: str) -> str | None:
    """The folder to keep when `key` leaves it (the root always exists)."""
    parent = parent_of(key)
    return None if parent == ROOT_KEY else parent


# --- PUT ----------------------------------------------------------------------------


def write_refusal(dav: DavRequest, etag: str | None) -> bool:
    """RFC 9110's If-Match / If-None-Match on a write: True when it must not happen."""
    if_match = dav.request.headers.get("if-match")
    if_none_match = dav.request.headers.get("if-none-match")
    if etag is None:
        return if_match is not None
    if if_none_match is not None and etag_matches(if_none_match, etag):
        return True
    return if_match is not None and not etag_matches(if_match, etag)


def mtime_sent(dav: DavRequest) -> float | None:
    """rclone's (and ownCloud clients') `X-OC-Mtime`: seconds since 1970."""
    value = dav.request.headers.get("x-oc-mtime")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or not 0 <= seconds < 2**37:
        return None
    return int(seconds) if seconds.is_integer() else seconds


async def put(dav: DavRequest) -> Response:
    path = dav.path
    if not path or path.endswith("/"):
        raise DavError(405, "a folder cannot be written: PUT names a file (MKCOL makes folders)")
    key = file_key(path)
    node = await dav.resolve(path)
    if node is not None and node.is_folder:
        raise DavError(405, "a folder has this name: it cannot be replaced by a file")
    if not await dav.parent_exists(path):
        raise DavError(409, "the folder this file would go in does not exist")
    settings = dav.settings
    declared = _declared_length(dav, settings.max_upload_size)
    declared_type = dav.request.headers.get("content-type")
    if declared_type is not None and len(declared_type.strip()) > MAX_CONTENT_TYPE_LENGTH:
        raise bad_request(f"the Content-Type is longer than {MAX_CONTENT_TYPE_LENGTH} characters")
    etag = node.etag if node is not None else None
    if write_refusal(dav, etag):
        raise DavError(412, "the precondition of the request does not hold")
    await dav.check_if((path, node))
    targets = [Target(key)] if node is not None else [Target(key), Target(parent_of(key))]
    await dav.locks.check(BUCKET, targets, dav.submitted())
    own = owner_limit(dav.key)
    if node is not None and node.file is not None and own not in (None, node.file.owner_key_id):
        raise foreign(headers={"Connection": "close"})
    mtime = mtime_sent(dav)
    store = dav.services.store
    content = await store.write_content(
        dav.request.stream(), max_size=settings.max_upload_size, label=key, expected_size=declared
    )
    try:
        _check_md5(dav, content.md5_hex)
        # Once more, now the bytes are stored: a lock taken while they came.
        await dav.locks.check(BUCKET, targets, dav.submitted())
    except BaseException:
        await store.discard(content)
        raise
    name = clean_name(name_of(key), "file")
    info = await store.commit(
        content,
        ObjectWrite(
            bucket=BUCKET,
            key=key,
            name=name,
            content_type=guess_type(name, declared_type),
            metadata={MTIME: mtime} if mtime is not None else {},
            owner_key_id=dav.key.id,
            only_if_owned_by=own,
            keep_public_id=True,
            check=_at_commit(dav),
        ),
    )
    headers = {"ETag": info.etag}
    if mtime is not None:
        headers["X-OC-Mtime"] = "accepted"
    return Response(status_code=201 if node is None else 204, headers=headers)


def _declared_length(dav: DavRequest, limit: int) -> int | None:
    declared = dav.request.headers.get("content-length")
    if declared is None:
        return None
    length = parse_decimal(declared.strip())
    if length is None:
        raise bad_request("Content-Length is not a number")
    if length > limit:
        raise DavError(
            413,
            f"the file is larger than the limit of {limit} bytes",
            headers={"Connection": "close"},
        )
    return length


def _check_md5(dav: DavRequest, md5_hex: str) -> None:
    value = dav.request.headers.get(_CHECKSUM_HEADER, "")
    for checksum in value.split():
        algorithm, _, digest = checksum.partition(":")
        if algorithm.upper() == "MD5" and digest.lower() != md5_hex:
            raise bad_request("the body's MD5 is not the OC-Checksum sent with it")


def _at_commit(dav: DavRequest) -> WriteCheck | None:
    """If-Match / If-None-Match again, under the key's lock as it commits."""
    if "if-match" not in dav.request.headers and "if-none-match" not in dav.request.headers:
        return None

    def check(etag: str | None) -> None:
        if write_refusal(dav, etag):
            raise DavError(412, "the file changed while the body came: the precondition failed")

    return check


def foreign(headers: dict[str, str] | None = None) -> DavError:
    return DavError(
        403,
        "this belongs to another API key: a `write` key changes only the files it "
        "stored (an `admin` key changes any file)",
        headers=headers,
    )


# --- MKCOL --------------------------------------------------------------------------


async def mkcol(dav: DavRequest) -> Response:
    if dav.has_body():
        raise DavError(415, "MKCOL takes no body")
    path = dav.path
    if not path or await dav.resolve(path) is not None:
        raise DavError(405, "something already has this name")
    if not await dav.parent_exists(path):
        raise DavError(409, "the folder this folder would go in does not exist")
    await dav.check_if((path, None))
    if not await dav.tree.make_folder(BUCKET, folder_key(path), dav.submitted()):
        raise DavError(405, "something already has this name")
    return Response(status_code=201)


# --- DELETE -------------------------------------------------------------------------


async def delete(dav: DavRequest) -> Response:
    node = await dav.resolve(dav.path)
    if node is None:
        raise DavError(404, "no file or folder here")
    if not node.path:
        raise DavError(403, "the root folder cannot be deleted")
    if node.is_folder:
        dav.depth("infinity", ("infinity",))
    await dav.check_if((dav.path, node))
    removed = await dav.tree.remove(
        BUCKET,
        node.key,
        dav.submitted(),
        owner=owner_limit(dav.key),
        keep=kept_parent(node.key),
    )
    if not removed:
        raise DavError(404, "no file or folder here")
    return Response(status_code=204)


# --- PROPPATCH ----------------------------------------------------------------------


def _modification_time(update: PropertyUpdate) -> float | None:
    """The time a `lastmodified` or `Win32LastModifiedTime` sets: seconds
    (rclone), or an HTTP date (Windows); None when it is neither."""
    text = update.text.strip()
    if text.isdigit() and len(text) <= 12:
        return int(text)
    moment: datetime | None = parse_http_date(text)
    return None if moment is None else moment.timestamp()


async def proppatch(dav: DavRequest) -> Response:
    updates = parse_proppatch(await dav.body(MAX_XML_BODY_BYTES))
    node = await dav.resolve(dav.path)
    if node is None:
        raise DavError(404, "no file or folder here")
    await dav.check_if((dav.path, node))
    protected = [update for update in updates if update.name in LIVE]
    if protected:
        statuses = [(update.name, 403 if update in protected else 424) for update in updates]
        return _propstat_response(node.key, statuses)
    metadata = None
    if node.file is not None:
        for update in updates:
            if update.name in MODIFICATION_TIMES and update.value is not None:
                seconds = _modification_time(update)
                if seconds is not None:
                    metadata = {**(metadata or node.file.metadata), MTIME: seconds}
    await dav.tree.patch(
        BUCKET,
        node.key,
        [PropertyChange(*update.name, update.value) for update in updates],
        dav.submitted(),
        owner=owner_limit(dav.key) if node.file is not None else None,
        max_properties=MAX_PROPERTIES_PER_RESOURCE,
        metadata=metadata,
        root=not node.path,
    )
    return _propstat_response(node.key, [(update.name, 200) for update in updates])


def _propstat_response(key: str, statuses: list[tuple[tuple[str, str], int]]) -> Response:
    by_status: dict[int, list[str]] = {}
    for name, status in statuses:
        by_status.setdefault(status, []).append(element(*name))
    propstats = "".join(
        f"<D:propstat><D:prop>{''.join(props)}</D:prop>"
        f"<D:status>{status_line(status)}</D:status></D:propstat>"
        for status, props in by_status.items()
    )
    body = (
        f"{XML_DECLARATION}<D:multistatus {ROOT_NAMESPACES}><D:response>"
        f"<D:href>{escape(href(key))}</D:href>{propstats}</D:response></D:multistatus>"
    )
    return Response(body, status_code=207, media_type=XML_MEDIA_TYPE)
