"""Response headers that keep stored files from running script on the service's origin.

Anyone with a write key (or S3 credentials) can store an HTML page or an SVG
with a script in it. Served as is from the service's own origin, a public
link to it would run that script with the origin's authority (its cookies,
same-origin requests to the API). Two headers prevent it:

- `X-Content-Type-Options: nosniff` on every download, so a browser never
  guesses an active type from the bytes of a file stored as something else.
- `Content-Security-Policy: sandbox` on active types (HTML, XHTML, SVG, any
  XML, JavaScript, and anything the browser cannot parse as a type): the
  page renders in a unique opaque origin with scripts, forms, plugins and
  pop-ups disabled, however it was opened (top level, <object>, <embed>).
  The Content-Type is left as stored: S3 clients expect it back unchanged.

For S3 responses only active types get the sandbox: a sandboxed PDF does not
open in Chrome's viewer, and an image or a video has nothing to run; they
keep the object's own Content-Disposition, which S3 clients set and expect
back. The native download route (`/f/`) sends every file as
`Content-Disposition: attachment`, so a browser saves it rather than showing
it, and with a policy of its own, `default-src 'none'; sandbox`
(`NATIVE_FILE_HEADERS`): whatever its type, a public link can never act as a
page, a script or a style sheet of the service's origin, even where a policy
of the page allows `'self'`.
"""

from __future__ import annotations

import functools
import re

NOSNIFF = {"X-Content-Type-Options": "nosniff"}
SANDBOX = {"Content-Security-Policy": "sandbox"}
NATIVE_FILE_HEADERS = {**NOSNIFF, "Content-Security-Policy": "default-src 'none'; sandbox"}

# type "/" subtype, as RFC 9110's tokens.
_MEDIA_TYPE = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]+/[!#$%&'*+.^_`|~0-9a-z-]+$")
# Markup a browser renders as a document that can run script. Any XML may
# carry XHTML elements or an XSLT stylesheet that produces them.
_ACTIVE_TYPES = frozenset({"text/html", "multipart/x-mixed-replace"})
_ACTIVE_MARKERS = ("html", "xml", "script", "xsl")


# Downloads repeat a handful of types; a bounded cache keeps the parse off
# the request path (a client's odd types cannot grow it).
@functools.lru_cache(maxsize=512)
def is_active(content_type: str) -> bool:
    """Whether a browser might run script in a document of this Content-Type.

    A header value may list several types ("text/plain, text/html"): browsers
    take the last valid one, so any active one counts. A value with no
    parsable type counts as active: the browser may sniff it.
    """
    types = [part.split(";", 1)[0].strip().lower() for part in content_type.split(",")]
    valid = [media for media in types if _MEDIA_TYPE.match(media)]
    if not valid:
        return True
    return any(
        media in _ACTIVE_TYPES or any(marker in media for marker in _ACTIVE_MARKERS)
        for media in valid
    )


def protective_headers(content_type: str) -> dict[str, str]:
    """The headers every download of a file of `content_type` carries."""
    return {**NOSNIFF, **SANDBOX} if is_active(content_type) else dict(NOSNIFF)
