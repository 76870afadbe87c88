"""One WebDAV request as its method handlers see it: who asks, about which
resource, and the headers every method reads the same way (Depth,
Overwrite, Destination, If, the body).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

from starlette.requests import Request

from app.config.settings import Settings
from app.http.dav.errors import DavError, bad_request
from app.http.dav.if_header import (
    IfHeaderError,
    IfList,
    ResourceState,
    holds,
    lists_for,
    parse_if,
    submitted_tokens,
)
from app.http.dav.paths import ROOT_KEY, file_key, folder_key, url_path
from app.http.shared.file_names import NATIVE_BUCKET
from app.store.callers import Caller
from app.store.dav_locks import DavLocks, Submitted
from app.store.file_tree import FileTree, FolderInfo
from app.store.service import ObjectInfo
from app.store.services import Services

#: The bucket WebDAV shows: the native files (S3 buckets stay behind S3
#: credentials, docs/security.md).
BUCKET = NATIVE_BUCKET


@dataclass(frozen=True, slots=True)
class Node:
    """A file or a folder that exists."""

    # Its path under /dav/: a folder's ends with "/" ("" is the root).
    path: str
    # The object's key, or the folder's (ending with "/").
    key: str
    file: ObjectInfo | None = None
    folder: FolderInfo | None = None

    @property
    def is_folder(self) -> bool:
        return self.file is None

    @property
    def etag(self) -> str | None:
        return None if self.file is None else self.file.etag


def folder_node(path: str, info: FolderInfo) -> Node:
    clean = path.rstrip("/")
    return Node(path=clean + "/" if clean else "", key=info.key, folder=info)


class DavRequest:
    def __init__(self, request: Request, services: Services, path: str) -> None:
        self.request = request
        self.services = services
        self.path = path
        self.method = request.method
        # Set once the key is checked (every method but OPTIONS).
        self.caller: Caller | None = None

    @property
    def settings(self) -> Settings:
        return self.services.settings

    @property
    def tree(self) -> FileTree:
        return self.services.tree

    @property
    def locks(self) -> DavLocks:
        return self.services.dav_locks

    @property
    def key(self) -> Caller:
        assert self.caller is not None, "the caller is checked before any method runs"
        return self.caller

    # --- resources --------------------------------------------------------------

    async def resolve(self, path: str) -> Node | None:
        """The file or folder at `path`. A path ending with "/" asks for a
        folder first; one without, for a file first (then a folder: Windows
        names folders without the slash, and must not be redirected)."""
        clean = path.rstrip("/")
        if not clean:
            return Node(path="", key=ROOT_KEY, folder=FolderInfo(ROOT_KEY, None))
        folder_first = path.endswith("/")
        for want_folder in (folder_first, not folder_first):
            if want_folder:
                folder = await self.tree.folder(BUCKET, folder_key(clean))
                if folder is not None:
                    return folder_node(clean, folder)
            else:
                info = await self.tree.file(BUCKET, file_key(clean))
                if info is not None:
                    return Node(path=clean, key=info.key, file=info)
        return None

    async def parent_exists(self, path: str) -> bool:
        parent = path.rstrip("/").rpartition("/")[0]
        if not parent:
            return True
        return await self.tree.folder(BUCKET, folder_key(parent)) is not None

    # --- headers ------------------------------------------------------------------

    def depth(self, default: str, allowed: tuple[str, ...]) -> str:
        value = self.request.headers.get("depth", default).strip().lower()
        if value not in allowed:
            raise bad_request(f"Depth must be one of {', '.join(allowed)}")
        return value

    def overwrite(self) -> bool:
        value = self.request.headers.get("overwrite", "T").strip().upper()
        if value not in ("T", "F"):
            raise bad_request("Overwrite must be T or F")
        return value == "T"

    def public_hosts(self) -> set[str]:
        base = self.settings.public_base_url
        return {urlsplit(base).netloc.lower()} if base else set()

    def url_to_path(self, url: str) -> str:
        return url_path(
            url, host=self.request.headers.get("host", ""), public_hosts=self.public_hosts()
        )

    def destination(self) -> str:
        value = self.request.headers.get("destination")
        if not value:
            raise bad_request("COPY and MOVE need a Destination header")
        return self.url_to_path(value)

    @cached_property
    def if_lists(self) -> list[IfList]:
        value = self.request.headers.get("if")
        if value is None:
            return []
        try:
            return parse_if(value)
        except IfHeaderError as exc:
            raise bad_request(f"the If header is malformed: {exc}") from None

    def submitted(self) -> Submitted:
        return Submitted(self.key.id, submitted_tokens(self.if_lists))

    async def check_if(self, *resources: tuple[str, Node | None]) -> None:
        """412 unless the If header holds for each (path, resource) the
        method works on (a missing resource has no tag and no lock)."""
        if not self.if_lists:
            return
        for path, node in resources:
            applicable = lists_for(
                self.if_lists, path, request_path=self.path, path_of=self._tag_path
            )
            if not applicable:
                continue
            key = node.key if node is not None else file_key(path)
            covering = await self.locks.covering(BUCKET, key)
            state = ResourceState(
                etag=None if node is None else node.etag,
                tokens=frozenset(lock.token for lock in covering),
            )
            if not holds(applicable, state):
                raise DavError(412, "the If header's conditions do not hold")

    def _tag_path(self, url: str) -> str | None:
        try:
            return self.url_to_path(url)
        except DavError:
            return None

    async def body(self, limit: int) -> bytes:
        """The request body, refused past `limit` bytes (413) before it is all read."""
        declared = self.request.headers.get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise DavError(
                413, f"the body is larger than {limit} bytes", headers={"Connection": "close"}
            )
        data = bytearray()
        async for piece in self.request.stream():
            data += piece
            if len(data) > limit:
                raise DavError(
                    413, f"the body is larger than {limit} bytes", headers={"Connection": "close"}
                )
        return bytes(data)

    def has_body(self) -> bool:
        headers = self.request.headers
        length = headers.get("content-length", "").strip()
        return "transfer-encoding" in headers or (length not in ("", "0"))
