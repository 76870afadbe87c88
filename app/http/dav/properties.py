"""A resource's properties, as PROPFIND shows them (RFC 4918 section 15).

Live ones are computed: `getetag` is the content's MD5 (the ETag every face
gives), `getlastmodified` the modification time a client set (rclone's
`X-OC-Mtime`, Windows' `Win32LastModifiedTime`) or else when the file was
stored, `oc:checksums` its MD5 as ownCloud clients and rclone's owncloud
vendor read it. Dead ones are what clients set with PROPPATCH, kept in the
database. The quota properties (RFC 4331) are computed only when asked for,
and only for the resource itself, not its children: they sum a folder's
sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from app.http.dav.paths import ROOT_KEY, href, name_of
from app.http.dav.xml_bodies import PropertyName, PropfindRequest
from app.http.dav.xml_out import DAV, MICROSOFT, OWNCLOUD, element, escape, status_line
from app.http.shared.conditions import http_date
from app.store.dav_locks import LockInfo
from app.store.file_tree import PropertyRow

#: Reported as the space left: Telegram sets no limit to a channel's size
#: (2^50 bytes, a PiB: Finder checks a copy fits before it starts).
QUOTA_AVAILABLE_BYTES = 2**50
#: Where a client's modification time is kept, in the file's metadata.
MTIME = "mtime"

SUPPORTED_LOCK = "".join(
    "<D:lockentry><D:lockscope>"
    f"<D:{scope}/></D:lockscope><D:locktype><D:write/></D:locktype></D:lockentry>"
    for scope in ("exclusive", "shared")
)


class Entry(NamedTuple):
    """What PROPFIND shows of one file or folder (a named tuple: a listing
    builds 10,000 of them)."""

    key: str
    is_folder: bool
    size: int = 0
    etag: str | None = None
    md5: str | None = None
    content_type: str = ""
    created: datetime | None = None
    modified: datetime | None = None


def modified_time(stored: datetime, metadata: Mapping[str, Any]) -> datetime:
    """The modification time a client set (whole seconds since 1970), or else `stored`."""
    mtime = metadata.get(MTIME)
    if isinstance(mtime, int | float) and math.isfinite(mtime):
        try:
            return datetime.fromtimestamp(mtime, UTC)
        except (OverflowError, OSError, ValueError):
            return stored
    return stored


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lock_xml(lock: LockInfo, now: datetime) -> str:
    """One `<D:activelock>` of a lockdiscovery."""
    left = max(0, math.ceil((lock.expires_at - now).total_seconds()))
    scope = "exclusive" if lock.exclusive else "shared"
    return (
        f"<D:activelock><D:locktype><D:write/></D:locktype>"
        f"<D:lockscope><D:{scope}/></D:lockscope>"
        f"<D:depth>{'infinity' if lock.infinite else '0'}</D:depth>"
        f"{lock.owner}<D:timeout>Second-{left}</D:timeout>"
        f"<D:locktoken><D:href>{escape(lock.token)}</D:href></D:locktoken>"
        f"<D:lockroot><D:href>{escape(href(lock.key))}</D:href></D:lockroot></D:activelock>"
    )


class Facts:
    """What the properties of one response draw on besides the entry."""

    def __init__(
        self,
        *,
        locks: Iterable[LockInfo] = (),
        dead: Mapping[str, list[PropertyRow]] | None = None,
        quota_used: int | None = None,
        now: datetime | None = None,
    ) -> None:
        self.locks = list(locks)
        self.dead = dead or {}
        self.quota_used = quota_used
        self.now = now or datetime.now(UTC)

    def locks_on(self, key: str) -> list[LockInfo]:
        """The locks covering `key`: its own, and the infinite ones above it."""
        return [
            lock
            for lock in self.locks
            if lock.key == key
            or (lock.infinite and lock.key.endswith("/") and key.startswith(lock.key))
        ]


LiveValue = Callable[[Entry, Facts], str | None]


def _live() -> dict[PropertyName, LiveValue]:
    def creationdate(entry: Entry, facts: Facts) -> str | None:
        return None if entry.created is None else _rfc3339(entry.created)

    def displayname(entry: Entry, facts: Facts) -> str | None:
        return "" if entry.key == ROOT_KEY else escape(name_of(entry.key))

    def getcontentlength(entry: Entry, facts: Facts) -> str | None:
        return None if entry.is_folder else str(entry.size)

    def getcontenttype(entry: Entry, facts: Facts) -> str | None:
        return None if entry.is_folder else escape(entry.content_type)

    def getetag(entry: Entry, facts: Facts) -> str | None:
        return None if entry.etag is None else escape(entry.etag)

    def getlastmodified(entry: Entry, facts: Facts) -> str | None:
        return None if entry.modified is None else http_date(entry.modified)

    def resourcetype(entry: Entry, facts: Facts) -> str | None:
        return "<D:collection/>" if entry.is_folder else ""

    def supportedlock(entry: Entry, facts: Facts) -> str | None:
        return SUPPORTED_LOCK

    def lockdiscovery(entry: Entry, facts: Facts) -> str | None:
        return "".join(lock_xml(lock, facts.now) for lock in facts.locks_on(entry.key))

    def quota_used(entry: Entry, facts: Facts) -> str | None:
        return None if facts.quota_used is None else str(facts.quota_used)

    def quota_available(entry: Entry, facts: Facts) -> str | None:
        return None if facts.quota_used is None else str(QUOTA_AVAILABLE_BYTES)

    def checksums(entry: Entry, facts: Facts) -> str | None:
        if entry.is_folder or not entry.md5:
            return None
        return f"<oc:checksum>MD5:{escape(entry.md5)}</oc:checksum>"

    return {
        (DAV, "creationdate"): creationdate,
        (DAV, "displayname"): displayname,
        (DAV, "getcontentlength"): getcontentlength,
        (DAV, "getcontenttype"): getcontenttype,
        (DAV, "getetag"): getetag,
        (DAV, "getlastmodified"): getlastmodified,
        (DAV, "resourcetype"): resourcetype,
        (DAV, "supportedlock"): supportedlock,
        (DAV, "lockdiscovery"): lockdiscovery,
        (DAV, "quota-used-bytes"): quota_used,
        (DAV, "quota-available-bytes"): quota_available,
        (OWNCLOUD, "checksums"): checksums,
    }


LIVE: dict[PropertyName, LiveValue] = _live()
#: Not in `allprop` (RFC 4331 section 3; ownCloud's are asked for by name).
NOT_IN_ALLPROP = frozenset(
    {(DAV, "quota-used-bytes"), (DAV, "quota-available-bytes"), (OWNCLOUD, "checksums")}
)
QUOTA = frozenset({(DAV, "quota-used-bytes"), (DAV, "quota-available-bytes")})
#: Properties PROPPATCH may set although they mean something here: the
#: modification time (rclone's owncloud vendor, and Windows).
MODIFICATION_TIMES = frozenset({(DAV, "lastmodified"), (MICROSOFT, "Win32LastModifiedTime")})


def wants_dead(request: PropfindRequest) -> bool:
    """Whether answering `request` needs the dead properties."""
    return request.kind != "prop" or any(name not in LIVE for name in request.names)


_OK = f"<D:status>{status_line(200)}</D:status></D:propstat>"
_NOT_FOUND = f"<D:status>{status_line(404)}</D:status></D:propstat>"


class _Tag(NamedTuple):
    """A property's element, written out once for a whole listing."""

    name: PropertyName
    opening: str
    closing: str
    empty: str

    @classmethod
    def of(cls, name: PropertyName) -> _Tag:
        empty = element(*name)
        opening = empty[:-2] + ">"
        closing = "</" + opening[1:].split(" ", 1)[0].rstrip(">") + ">"
        return cls(name, opening, closing, empty)

    def with_value(self, value: str) -> str:
        return self.opening + value + self.closing if value else self.empty


class Plan:
    """How to answer one PROPFIND, worked out once for all its entries (a
    listing of 10,000 entries writes each element's tags once, not 10,000
    times): which live properties to compute, which dead ones to look up."""

    def __init__(self, request: PropfindRequest) -> None:
        self.kind = request.kind
        self.named = frozenset(request.names)
        if request.kind == "propname":
            wanted = [name for name in LIVE if name not in NOT_IN_ALLPROP]
        elif request.kind == "allprop":
            wanted = [name for name in LIVE if name not in NOT_IN_ALLPROP]
            wanted += [name for name in request.names if name not in wanted]
        else:
            wanted = list(dict.fromkeys(request.names))
        self.live = [(_Tag.of(name), LIVE[name]) for name in wanted if name in LIVE]
        self.dead = [_Tag.of(name) for name in wanted if name not in LIVE]
        self.wants_dead = wants_dead(request)

    def render(self, entry: Entry, facts: Facts) -> str:
        """One `<D:response>` of the multistatus."""
        found: list[str] = []
        missing: list[str] = []
        rows = facts.dead.get(entry.key) if self.wants_dead else None
        if self.kind == "propname":
            found = [tag.empty for tag, _ in self.live]
            found += [element(row.namespace, row.name) for row in rows or ()]
            return _response(entry.key, found, missing)
        for tag, live in self.live:
            value = live(entry, facts)
            if value is not None:
                found.append(tag.with_value(value))
            elif self.kind == "prop" or tag.name in self.named:
                # allprop lists what a resource has, and 404s only what was named.
                missing.append(tag.empty)
        if rows is None:
            missing += [tag.empty for tag in self.dead]
            return _response(entry.key, found, missing)
        values = {(row.namespace, row.name): row.value for row in rows}
        for tag in self.dead:
            value = values.pop(tag.name, None)
            (missing.append(tag.empty) if value is None else found.append(tag.with_value(value)))
        if self.kind == "allprop":
            found += [element(*name, value) for name, value in values.items() if name not in LIVE]
        return _response(entry.key, found, missing)


def _response(key: str, found: list[str], missing: list[str]) -> str:
    # The 200 propstat first: rclone reads the first status only.
    parts = ["<D:response><D:href>", href(key), "</D:href>"]
    if found or not missing:
        parts += ["<D:propstat><D:prop>", *found, "</D:prop>", _OK]
    if missing:
        parts += ["<D:propstat><D:prop>", *missing, "</D:prop>", _NOT_FOUND]
    parts.append("</D:response>")
    return "".join(parts)


def response_xml(entry: Entry, request: PropfindRequest, facts: Facts) -> str:
    """One `<D:response>` of a PROPFIND's multistatus (`Plan` for many)."""
    return Plan(request).render(entry, facts)
