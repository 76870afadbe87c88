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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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


@dataclass(frozen=True, slots=True)
class Entry:
    """What PROPFIND shows of one file or folder."""

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


def response_xml(entry: Entry, request: PropfindRequest, facts: Facts) -> str:
    """One `<D:response>` of a PROPFIND's multistatus."""
    found: list[str] = []
    missing: list[str] = []
    dead = {(row.namespace, row.name): row.value for row in facts.dead.get(entry.key, [])}
    if request.kind == "propname":
        names = [name for name in LIVE if name not in NOT_IN_ALLPROP] + list(dead)
        found = [element(*name) for name in names]
    else:
        if request.kind == "allprop":
            wanted = [name for name in LIVE if name not in NOT_IN_ALLPROP]
            wanted += [name for name in dead if name not in LIVE]
            wanted += [name for name in request.names if name not in wanted]
        else:
            wanted = request.names
        for name in wanted:
            value: str | None
            live = LIVE.get(name)
            value = live(entry, facts) if live is not None else dead.get(name)
            if value is None:
                # allprop lists what a resource has, and 404s only what was named.
                if request.kind == "prop" or name in request.names:
                    missing.append(element(*name))
            else:
                found.append(element(*name, value))
    # The 200 propstat first: rclone reads the first status only.
    propstats = []
    if found or not missing:
        propstats.append(_propstat(found, 200))
    if missing:
        propstats.append(_propstat(missing, 404))
    return (
        f"<D:response><D:href>{escape(href(entry.key))}</D:href>{''.join(propstats)}</D:response>"
    )


def _propstat(props: list[str], status: int) -> str:
    return (
        f"<D:propstat><D:prop>{''.join(props)}</D:prop>"
        f"<D:status>{status_line(status)}</D:status></D:propstat>"
    )
