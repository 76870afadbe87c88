"""The methods that read: OPTIONS, PROPFIND, GET and HEAD.

PROPFIND of a folder with `Depth: 1` lists it through the folder walk
(app/db/tree_listing.py) a page at a time, and streams the multistatus as it
goes: a folder of any size answers in memory of a page. `Depth: infinity` on
a folder is refused, as RFC 4918 section 9.1 allows (`propfind-finite-depth`:
a whole drive in one answer). GET and HEAD serve a file as the native
download does: the same ETag, Range and conditional requests, the same
headers that keep a file from acting as a page of the service's origin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.responses import Response, StreamingResponse

from app.http.dav.context import BUCKET, DavRequest, Node
from app.http.dav.errors import DavError
from app.http.dav.properties import QUOTA, Entry, Facts, Plan, modified_time
from app.http.dav.xml_bodies import MAX_XML_BODY_BYTES, parse_propfind
from app.http.dav.xml_out import ROOT_NAMESPACES, XML_DECLARATION, XML_MEDIA_TYPE
from app.http.shared.active_content import NATIVE_FILE_HEADERS
from app.http.shared.conditions import NOT_MODIFIED, evaluate, http_date, range_applies
from app.http.shared.disposition import content_disposition
from app.http.shared.ranges import RangeNotSatisfiable, parse_range
from app.store.dav_locks import LockInfo
from app.store.file_tree import TreeEntry, TreeFile

#: Every method /dav/ answers (OPTIONS's Allow, and a 405's).
ALLOW = "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE, LOCK, UNLOCK"
DAV_HEADERS = {
    "DAV": "1, 2",
    # Office and Windows' mini-redirector look for it before they author.
    "MS-Author-Via": "DAV",
    "Allow": ALLOW,
}
#: Entries listed per page of a PROPFIND (one walk of the folder each).
PAGE = 1000


async def options(dav: DavRequest) -> Response:
    return Response(status_code=200, headers={**DAV_HEADERS, "Content-Length": "0"})


def entry_of(node: Node) -> Entry:
    if node.file is not None:
        info = node.file
        return Entry(
            key=info.key,
            is_folder=False,
            size=info.size,
            etag=info.etag,
            md5=info.md5,
            content_type=info.content_type,
            created=info.created_at,
            modified=modified_time(info.updated_at, info.metadata),
        )
    created = node.folder.created_at if node.folder is not None else None
    return Entry(key=node.key, is_folder=True, created=created, modified=created)


def _entry_of_listed(listed: TreeEntry) -> Entry:
    if isinstance(listed, TreeFile):
        return Entry(
            key=listed.key,
            is_folder=False,
            size=listed.size,
            etag=listed.etag,
            md5=listed.md5,
            content_type=listed.content_type,
            created=listed.created_at,
            modified=modified_time(listed.updated_at, listed.metadata),
        )
    return Entry(key=listed.prefix, is_folder=True)


async def propfind(dav: DavRequest) -> Response:
    depth = dav.depth("infinity", ("0", "1", "infinity"))
    request = parse_propfind(await dav.body(MAX_XML_BODY_BYTES))
    node = await dav.resolve(dav.path)
    if node is None:
        raise DavError(404, "no file or folder here")
    if depth == "infinity" and node.is_folder:
        raise DavError(
            403,
            "a folder is listed one level at a time: send Depth: 1",
            condition="<D:propfind-finite-depth/>",
        )
    wanted = set(request.names) if request.kind == "prop" else set()
    quota = None
    if wanted & QUOTA and node.is_folder:
        quota = await dav.tree.used_bytes(BUCKET, node.key)
    needs_locks = request.kind != "prop" or (("DAV:", "lockdiscovery") in wanted)
    listing = node.is_folder and depth == "1"
    locks = await dav.locks.covering(BUCKET, node.key, subtree=listing) if needs_locks else []
    own = entry_of(node)
    first: list[TreeEntry] = []
    if listing:
        first = await dav.tree.children(BUCKET, node.key, after=None, limit=PAGE)
    plan = Plan(request)
    if plan.wants_dead and listing and not await dav.tree.has_properties(BUCKET, node.key):
        plan.wants_dead = False
    head = await _page_xml(dav, plan, [own], Facts(locks=locks, quota_used=quota))
    return StreamingResponse(
        _multistatus(dav, plan, node, head, first, locks, listing),
        status_code=207,
        media_type=XML_MEDIA_TYPE,
    )


async def _multistatus(
    dav: DavRequest,
    plan: Plan,
    node: Node,
    head: str,
    page: list[TreeEntry],
    locks: list[LockInfo],
    listing: bool,
) -> AsyncIterator[bytes]:
    yield f"{XML_DECLARATION}<D:multistatus {ROOT_NAMESPACES}>{head}".encode()
    while listing and page:
        entries = [_entry_of_listed(listed) for listed in page]
        yield (await _page_xml(dav, plan, entries, Facts(locks=locks))).encode()
        if len(page) < PAGE:
            break
        last = page[-1]
        after = last.key if isinstance(last, TreeFile) else last.prefix
        page = await dav.tree.children(BUCKET, node.key, after=after, limit=PAGE)
    yield b"</D:multistatus>"


async def _page_xml(dav: DavRequest, plan: Plan, entries: list[Entry], facts: Facts) -> str:
    if plan.wants_dead:
        facts.dead = await dav.tree.properties(BUCKET, [entry.key for entry in entries])
    render = plan.render
    return "".join([render(entry, facts) for entry in entries])


async def get(dav: DavRequest) -> Response:
    node = await dav.resolve(dav.path)
    if node is None:
        raise DavError(404, "no file or folder here")
    if node.file is None:
        raise DavError(
            405,
            "a folder has no content to download: PROPFIND lists it",
            headers={"Allow": ALLOW},
        )
    info = node.file
    modified = modified_time(info.updated_at, info.metadata)
    headers = {
        "ETag": info.etag,
        "Last-Modified": http_date(modified),
        "Accept-Ranges": "bytes",
        # Never a page, script or style sheet of this origin, whatever its
        # type (app.http.shared.active_content), as a native download.
        "Content-Disposition": content_disposition(info.name),
        **NATIVE_FILE_HEADERS,
        "Cache-Control": "private, max-age=0, must-revalidate",
    }
    refused = evaluate(dav.request.headers, etag=info.etag, last_modified=modified)
    if refused is not None:
        if refused == NOT_MODIFIED:
            return Response(status_code=NOT_MODIFIED, headers=headers)
        raise DavError(refused, "the precondition of the request does not hold")
    byte_range = None
    if range_applies(dav.request.headers, etag=info.etag, last_modified=modified):
        try:
            byte_range = parse_range(dav.request.headers.get("range"), info.size)
        except RangeNotSatisfiable as exc:
            raise DavError(
                416, exc.detail, headers={"Content-Range": f"bytes */{info.size}"}
            ) from None
    start, end, status = 0, info.size, 200
    if byte_range is not None:
        start, end, status = byte_range.start, byte_range.end, 206
        headers["Content-Range"] = byte_range.content_range(info.size)
    headers["Content-Length"] = str(end - start)
    if dav.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type=info.content_type)
    body = await dav.services.store.open_range(info, start, end)
    return StreamingResponse(
        body, status_code=status, headers=headers, media_type=info.content_type
    )
