"""LOCK and UNLOCK (RFC 4918 sections 9.10 and 9.11): write locks, exclusive
or shared, on a file or a folder (Depth 0, or infinity: everything under it
too), kept in the database so that every instance honours them.

A LOCK with a body takes a new lock; one without refreshes the lock whose
token its If header submits. A LOCK on a name nothing has yet creates an
empty file and locks it (201: RFC 4918 section 7.3), the first step of
Windows' and Office's saves. A lock lasts what its `Timeout` asks, at most
MAX_LOCK_SECONDS; a client refreshes it before then.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

from starlette.responses import Response

from app.http.dav.auth import owner_limit
from app.http.dav.context import BUCKET, DavRequest
from app.http.dav.errors import DavError, bad_request
from app.http.dav.paths import file_key, name_of
from app.http.dav.properties import lock_xml
from app.http.dav.writing import write_refusal
from app.http.dav.xml_bodies import MAX_XML_BODY_BYTES, parse_lockinfo
from app.http.dav.xml_out import XML_DECLARATION, XML_MEDIA_TYPE
from app.http.shared.file_names import clean_name, guess_type
from app.store.dav_locks import LockInfo, LockNotHeld, Target
from app.store.file_tree import parent_of
from app.store.object_write import ObjectWrite

#: The longest lock, and what a LOCK without a Timeout gets: a client holding
#: a file open longer refreshes its lock (davfs2, Windows and Office do).
MAX_LOCK_SECONDS = 3600
#: The longest Lock-Token header looked at.
_MAX_TOKEN_HEADER = 200


def timeout_seconds(value: str | None) -> int:
    """The first usable choice of a `Timeout` header ("Infinite,
    Second-4100000000"), capped at MAX_LOCK_SECONDS."""
    for choice in (value or "").split(","):
        choice = choice.strip()
        if choice.lower() == "infinite":
            return MAX_LOCK_SECONDS
        number = choice[len("Second-") :] if choice[:7].lower() == "second-" else ""
        if number.isascii() and number.isdigit():
            return max(1, min(int(number[:12]), MAX_LOCK_SECONDS))
    return MAX_LOCK_SECONDS


def _lockdiscovery(lock: LockInfo) -> bytes:
    return (
        f'{XML_DECLARATION}<D:prop xmlns:D="DAV:"><D:lockdiscovery>'
        f"{lock_xml(lock, datetime.now(UTC))}</D:lockdiscovery></D:prop>"
    ).encode()


async def lock(dav: DavRequest) -> Response:
    depth = dav.depth("infinity", ("0", "infinity"))
    request = parse_lockinfo(await dav.body(MAX_XML_BODY_BYTES))
    seconds = timeout_seconds(dav.request.headers.get("timeout"))
    node = await dav.resolve(dav.path)
    await dav.check_if((dav.path, node))
    # davfs2 locks a file it is about to create with If-None-Match: *.
    if write_refusal(dav, node.etag if node is not None else None):
        raise DavError(412, "the precondition of the request does not hold")
    if request is None:
        if not dav.if_lists:
            raise bad_request("a LOCK without a body refreshes a lock: submit its token in If")
        if node is None:
            raise DavError(404, "no file or folder here")
        try:
            refreshed = await dav.locks.refresh(
                BUCKET, node.key, dav.submitted().tokens, dav.key.id, seconds
            )
        except LockNotHeld:
            raise DavError(
                412,
                "no lock of the submitted tokens covers this resource",
                condition="<D:lock-token-matches-request-uri/>",
            ) from None
        return Response(_lockdiscovery(refreshed), status_code=200, media_type=XML_MEDIA_TYPE)
    own = owner_limit(dav.key)
    created = False
    if node is None:
        key = file_key(dav.path)
        if not await dav.parent_exists(dav.path):
            raise DavError(409, "the folder this file would go in does not exist")
        await dav.locks.check(BUCKET, [Target(key), Target(parent_of(key))], dav.submitted())
        name = clean_name(name_of(key), "file")
        await dav.services.store.put_stream(
            _nothing(),
            ObjectWrite(
                bucket=BUCKET,
                key=key,
                name=name,
                content_type=guess_type(name, None),
                owner_key_id=dav.key.id,
                only_if_owned_by=own,
                keep_public_id=True,
                max_size=0,
            ),
        )
        created = True
    else:
        key = node.key
        if node.file is not None and own is not None and node.file.owner_key_id != own:
            raise DavError(
                403,
                "this file belongs to another API key: a `write` key locks only the files "
                "it stored",
            )
    taken = await dav.locks.lock(
        BUCKET,
        key,
        infinite=depth == "infinity" and key.endswith("/"),
        exclusive=request.exclusive,
        owner=request.owner,
        seconds=seconds,
        api_key_id=dav.key.id,
    )
    return Response(
        _lockdiscovery(taken),
        status_code=201 if created else 200,
        headers={"Lock-Token": f"<{taken.token}>"},
        media_type=XML_MEDIA_TYPE,
    )


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""


async def unlock(dav: DavRequest) -> Response:
    value = dav.request.headers.get("lock-token", "").strip()
    if not (3 <= len(value) <= _MAX_TOKEN_HEADER and value[0] == "<" and value[-1] == ">"):
        raise bad_request("UNLOCK needs a Lock-Token header: <the lock's token>")
    node = await dav.resolve(dav.path)
    if node is None:
        raise DavError(404, "no file or folder here")
    await dav.locks.unlock(BUCKET, node.key, value[1:-1], dav.key.id)
    return Response(status_code=204)
