"""S3's ETag of a multipart object, from its parts' ETags.

Its own module because it is S3's arithmetic, not SQL: the multipart and
tus repositories (app.db.multipart, app.db.resumable) compute it, and the
store (app.store.multipart) to recognise an object an upload completed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

_MD5_HEX = re.compile(r"[0-9a-fA-F]{32}")


def unquote_etag(etag: str) -> str:
    return etag.strip().strip('"')


def multipart_etag(part_etags: Sequence[str]) -> str:
    """S3's ETag of a multipart object: MD5 of the parts' binary MD5s, then '-<parts>'.

    A part ETag that is not an MD5 (a copy's synthetic ETag) contributes the
    MD5 of its text instead, so the result is still deterministic.
    """
    digest = hashlib.md5(usedforsecurity=False)
    for etag in part_etags:
        bare = unquote_etag(etag)
        if _MD5_HEX.fullmatch(bare):
            digest.update(bytes.fromhex(bare))
        else:
            digest.update(hashlib.md5(bare.encode(), usedforsecurity=False).digest())
    return f'"{digest.hexdigest()}-{len(part_etags)}"'
