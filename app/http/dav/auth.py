"""Who is calling WebDAV: an API key, sent as the password of HTTP Basic
authentication (any user name: most WebDAV clients can send nothing else)
or as `Authorization: Bearer`.

Every method but OPTIONS needs a key; its scope decides what it may do, as
in the native API: `read` lists and downloads, `write` also changes (its own
files: `owner_limit`), `admin` changes any file. A wrong or missing key is a
401 that asks for Basic credentials, so Finder, Explorer and davfs2 prompt.
The key is checked as every other key is (`AccessStore.verify_key`: a key
refused a moment ago is refused from memory, and a client past the limits on
failed checks gets 429).
"""

from __future__ import annotations

import base64
import binascii

from starlette.requests import Request

from app.http.dav.errors import DavError
from app.http.shared.client import client_address
from app.store.callers import Caller, KeyScope
from app.store.services import Services

#: What the 401 asks for: the realm clients show when they prompt.
CHALLENGE = {"WWW-Authenticate": 'Basic realm="TeleUploader WebDAV", charset="UTF-8"'}


def presented_key(request: Request) -> str | None:
    """The API key the request carries, or None when it carries none."""
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.strip().partition(" ")
    credentials = credentials.strip()
    if not credentials:
        return None
    if scheme.lower() == "bearer":
        return credentials
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise DavError(
            401, "the Basic credentials are not base64 of UTF-8", headers=CHALLENGE
        ) from None
    user, _, password = decoded.partition(":")
    # The key is the password; a client that has one field only may put it
    # in the user name.
    return password or user or None


async def caller(request: Request, services: Services, scope: KeyScope) -> Caller:
    """The caller's API key, which must have `scope`: 401 without a valid
    key, 403 with one of a narrower scope."""
    key = presented_key(request)
    if key is None:
        raise DavError(
            401,
            "an API key is required: send it as the password (any user name), "
            "or as `Authorization: Bearer <key>`",
            headers=CHALLENGE,
        )
    # Failed checks are limited per client, as on every route (app/store/key_failures.py).
    found = await services.access.verify_key(key, client_address(request))
    if found is None:
        raise DavError(401, "the API key is unknown or revoked", headers=CHALLENGE)
    if not found.allows(scope):
        raise DavError(
            403,
            f"this needs an API key with the `{scope}` scope (or a wider one); "
            f"the key {found.name!r} has `{found.scope}`",
        )
    return found


def owner_limit(key: Caller) -> int | None:
    """The key whose files `key` may change, or None for an admin key (any file)."""
    return None if key.allows("admin") else key.id
