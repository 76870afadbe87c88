"""COPY and MOVE (RFC 4918 sections 9.8 and 9.9): a file, or a folder with
everything under it, in one transaction, metadata only.

A moved file keeps its public id (its /f/ link), its chunks and its
properties; a copy points at the same chunks under a new public id, owned by
the key that copied it. `Overwrite: T` (the default) sends what is at the
destination to the trash first; `Overwrite: F` refuses with 412. The
destination's folder must exist (409). A folder cannot go inside itself,
nor onto a folder that holds it (403). Locks stay where they were taken.
"""

from __future__ import annotations

from starlette.responses import Response

from app.http.dav.auth import owner_limit
from app.http.dav.context import BUCKET, DavRequest
from app.http.dav.errors import DavError
from app.http.dav.paths import file_key, folder_key, name_of
from app.http.dav.properties import MTIME
from app.http.dav.writing import kept_parent, mtime_sent
from app.http.shared.file_names import clean_name


async def copy(dav: DavRequest) -> Response:
    return await _relocate(dav, move=False)


async def move(dav: DavRequest) -> Response:
    return await _relocate(dav, move=True)


async def _relocate(dav: DavRequest, *, move: bool) -> Response:
    node = await dav.resolve(dav.path)
    if node is None:
        raise DavError(404, "no file or folder here")
    if not node.path:
        raise DavError(403, "the root folder cannot be copied or moved")
    destination = dav.destination()
    overwrite = dav.overwrite()
    members = True
    if node.is_folder:
        allowed = ("infinity",) if move else ("0", "infinity")
        members = dav.depth("infinity", allowed) == "infinity"
    source = node.path.rstrip("/")
    target = destination.rstrip("/")
    if not target:
        raise DavError(403, "the root folder cannot be replaced")
    if target == source:
        raise DavError(403, "the source and the destination are the same")
    if node.is_folder and target.startswith(source + "/"):
        raise DavError(403, "a folder cannot go inside itself")
    if source.startswith(target + "/"):
        raise DavError(403, "the destination holds the source")
    if not await dav.parent_exists(target):
        raise DavError(409, "the destination's folder does not exist")
    existing = await dav.resolve(destination)
    if existing is not None and not overwrite:
        raise DavError(412, "the destination exists and Overwrite is F")
    await dav.check_if((dav.path, node), (destination, existing))
    target_key = folder_key(target) if node.is_folder else file_key(target)
    name = clean_name(name_of(target_key), "file")
    metadata = None
    mtime = mtime_sent(dav)
    if mtime is not None and node.file is not None:
        metadata = {**node.file.metadata, MTIME: mtime}
    owner = owner_limit(dav.key)
    if move:
        free = await dav.tree.move(
            BUCKET,
            node.key,
            target_key,
            dav.submitted(),
            overwrite=overwrite,
            owner=owner,
            name=name,
            keep=kept_parent(node.key),
            metadata=metadata,
        )
    else:
        free = await dav.tree.copy(
            BUCKET,
            node.key,
            target_key,
            dav.submitted(),
            overwrite=overwrite,
            owner=owner,
            name=name,
            members=members,
            copier=dav.key.id,
            metadata=metadata,
        )
    headers = {"X-OC-Mtime": "accepted"} if metadata is not None else {}
    return Response(status_code=201 if free else 204, headers=headers)
