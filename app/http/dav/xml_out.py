"""Writing WebDAV's XML: escaping, and elements in any namespace.

Answers are built as text (a PROPFIND of 10,000 entries is some 5 MB of it,
streamed a page at a time): `DAV:` is the prefix `D`, ownCloud's namespace
`oc` and Microsoft's `Z`, declared once on the root element; any other
namespace (a dead property's) is declared on the element that uses it.
"""

from __future__ import annotations

import re

XML_DECLARATION = '<?xml version="1.0" encoding="utf-8"?>\n'
XML_MEDIA_TYPE = "application/xml; charset=utf-8"

DAV = "DAV:"
OWNCLOUD = "http://owncloud.org/ns"
MICROSOFT = "urn:schemas-microsoft-com:"
#: The namespaces the root of every multistatus declares, and their prefixes.
PREFIXES = {DAV: "D", OWNCLOUD: "oc", MICROSOFT: "Z"}
ROOT_NAMESPACES = " ".join(f'xmlns:{prefix}="{uri}"' for uri, prefix in PREFIXES.items())

# XML 1.0 cannot carry these characters at all, escaped or not (a name made
# through the native API may hold them): they are left out of text.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})


def escape(text: str) -> str:
    """`text` as XML character data or an attribute value."""
    if _NEEDS_WORK.search(text) is None:
        return text
    return _NOT_XML.sub("", text).translate(_ESCAPES)


# Most text (names, types) needs nothing done: one search finds out.
_NEEDS_WORK = re.compile('[&<>"\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]')


def element(namespace: str, name: str, content: str | None = None) -> str:
    """`<name>content</name>` in `namespace` (content already XML); empty
    when `content` is None."""
    prefix = PREFIXES.get(namespace)
    if prefix is not None:
        tag, declaration = f"{prefix}:{name}", ""
    elif namespace:
        tag, declaration = f"ns0:{name}", f' xmlns:ns0="{escape(namespace)}"'
    else:
        tag, declaration = name, ' xmlns=""'
    if content is None or content == "":
        return f"<{tag}{declaration}/>"
    return f"<{tag}{declaration}>{content}</{tag}>"


def status_line(status: int) -> str:
    return f"HTTP/1.1 {status} {_REASONS.get(status, '')}".rstrip()


_REASONS = {
    200: "OK",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    423: "Locked",
    424: "Failed Dependency",
    507: "Insufficient Storage",
}
