"""Making SigV4 presigned GET URLs (the other direction of ``presigned``).

The service hands out short-lived links to S3 objects (the web page's bucket
view) without ever making an object public: the link is signed with one of
the configured S3 credentials, expires, and is checked by the same code that
checks any S3 client's presigned URL. The path is encoded once, as the
canonical URI, so what a browser sends back is what was signed; ``.`` and
``..`` segments are percent-encoded, since a browser would otherwise resolve
them away before sending.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote, urlsplit

from app.http.s3.sigv4.canonical import canonical_query_string, string_to_sign
from app.http.s3.sigv4.presigned import MAX_PRESIGN_EXPIRES
from app.http.s3.sigv4.request import UNSIGNED_PAYLOAD
from app.http.s3.sigv4.signing import (
    ALGORITHM,
    SERVICE,
    TERMINATOR,
    derive_signing_key,
    format_amz_date,
    sign_hex,
)


def object_path(bucket: str, key: str) -> str:
    """`/{bucket}/{key}` as a path-style request spells it, encoded once."""
    segments = [quote(segment, safe="") for segment in f"{bucket}/{key}".split("/")]
    # A browser resolves `.` and `..` segments before sending: keep them as they are.
    segments = [s.replace(".", "%2E") if s in (".", "..") else s for s in segments]
    return "/" + "/".join(segments)


def presign_get(
    base_url: str,
    bucket: str,
    key: str,
    *,
    access_key: str,
    secret: str,
    region: str,
    now: datetime,
    expires_seconds: int,
    response_params: dict[str, str] | None = None,
) -> str:
    """A presigned GetObject URL for (bucket, key) on the service at `base_url`
    (whose host is signed), valid `expires_seconds` from `now`.
    `response_params` (``response-content-disposition`` and its kind) are
    signed too, so nobody can change them."""
    if not 1 <= expires_seconds <= MAX_PRESIGN_EXPIRES:
        raise ValueError(f"a presigned URL lasts 1 to {MAX_PRESIGN_EXPIRES} seconds")
    base = urlsplit(base_url)
    path = object_path(bucket, key)
    amz_date = format_amz_date(now)
    scope = f"{amz_date[:8]}/{region}/{SERVICE}/{TERMINATOR}"
    params = {
        "X-Amz-Algorithm": ALGORITHM,
        "X-Amz-Credential": f"{access_key}/{scope}",
        "X-Amz-Date": amz_date,
        "X-Amz-Expires": str(expires_seconds),
        "X-Amz-SignedHeaders": "host",
        **(response_params or {}),
    }
    query = canonical_query_string("&".join(f"{quote(n)}={quote(v)}" for n, v in params.items()))
    canonical_request = "\n".join(
        ["GET", path, query, f"host:{base.netloc}", "", "host", UNSIGNED_PAYLOAD]
    ).encode("utf-8")
    signing_key = derive_signing_key(secret, amz_date[:8], region)
    signature = sign_hex(signing_key, string_to_sign(amz_date, scope, canonical_request))
    return f"{base.scheme}://{base.netloc}{path}?{query}&X-Amz-Signature={signature}"
