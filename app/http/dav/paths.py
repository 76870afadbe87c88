"""Where a WebDAV URL points: `/dav/photos/2026/a.jpg` is the native file
stored by the name `photos/2026/a.jpg` (key `named/photos/2026/a.jpg`), and
`/dav/photos/` the folder of such names.

Paths are taken from the raw request path, percent-decoded once, and must be
UTF-8. A path that ends with "/" asks for a folder; one that does not may
still name one (Windows asks for folders without the slash, and must not be
redirected). The `Destination` of COPY and MOVE and the resources of an `If`
header are full URLs or absolute paths on this service.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote_to_bytes, urlsplit

from app.http.dav.errors import DavError, bad_request
from app.http.shared.file_names import NAMED_PREFIX
from app.store.limits import MAX_KEY_LENGTH

#: Where WebDAV is served.
DAV_PREFIX = "/dav"
#: The key every path lies under: the files stored by name.
ROOT_KEY = NAMED_PREFIX

# Characters no name may hold: controls (XML cannot carry most of them, and
# a terminal would act on them).
_CONTROLS = frozenset(chr(code) for code in [*range(0x20), 0x7F])


def path_of(raw_path: bytes) -> str:
    """The path under /dav/ of a raw request path: "" for the root,
    "a/b.txt", "a/b/" (the trailing slash kept). DavError 400 if it is not
    a path a file or folder can have."""
    text = raw_path.split(b"?", 1)[0]
    prefix = DAV_PREFIX.encode()
    if not text.startswith(prefix):
        raise bad_request("the path is not under /dav/")
    rest = text[len(prefix) :]
    if rest and not rest.startswith(b"/"):
        raise DavError(404, "no such resource")
    return checked_path(rest.lstrip(b"/"))


def checked_path(encoded: bytes) -> str:
    """A percent-encoded path under /dav/, decoded and checked."""
    try:
        path = unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("the path is not UTF-8 once percent-decoded") from None
    if any(char in _CONTROLS for char in path):
        raise bad_request("the path holds a control character")
    segments = path.rstrip("/").split("/")
    if path and any(segment in ("", ".", "..") for segment in segments):
        raise bad_request("the path has an empty, `.` or `..` segment")
    if len(ROOT_KEY + path) > MAX_KEY_LENGTH:
        raise bad_request(f"the path is longer than {MAX_KEY_LENGTH - len(ROOT_KEY)} characters")
    return path


def file_key(path: str) -> str:
    """The object key of the file at `path`."""
    return ROOT_KEY + path.rstrip("/")


def folder_key(path: str) -> str:
    """The key (ending with "/") of the folder at `path`."""
    return ROOT_KEY + path.rstrip("/") + "/" if path.rstrip("/") else ROOT_KEY


def href(key: str) -> str:
    """The URL path of the file or folder `key`, percent-encoded (a folder's
    ends with "/"): characters that need no encoding in a path and no
    escaping in XML, whatever else."""
    path = key[len(ROOT_KEY) :]
    if _PLAIN.fullmatch(path) is None:
        path = quote(path, safe="/")
    return _HREF_PREFIX + path


_HREF_PREFIX = DAV_PREFIX + "/"
# What `quote(path, safe="/")` leaves as it is: checked first, it spares the
# quoting of most names (a listing quotes 10,000).
_PLAIN = re.compile(r"[A-Za-z0-9_.~/-]*")


def name_of(key: str) -> str:
    """The last segment of a key: a file's or folder's name."""
    return key.rstrip("/").rpartition("/")[2]


def url_path(target: str, *, host: str, public_hosts: set[str]) -> str:
    """The path under /dav/ that a Destination or If-header URL names.

    DavError 502 when it names another server (RFC 4918 section 9.8.5), 400
    when it is no URL at all."""
    try:
        parts = urlsplit(target.strip())
    except ValueError:
        raise bad_request("the URL is malformed") from None
    if parts.scheme or parts.netloc:
        if parts.scheme.lower() not in ("http", "https"):
            raise bad_request("the URL is not http or https")
        if parts.netloc.lower() != host.lower() and parts.netloc.lower() not in public_hosts:
            raise DavError(502, "the destination is on another server")
    raw = parts.path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b"/"):
        raise bad_request("the URL's path is not absolute")
    try:
        return path_of(raw)
    except DavError as exc:
        if exc.status == 400 and not raw.startswith(DAV_PREFIX.encode()):
            raise DavError(502, "the destination is outside /dav/") from None
        raise
