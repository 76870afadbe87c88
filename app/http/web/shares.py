"""A share link, the recipient's side: `/s/{token}` is its page,
`/s/{token}/download` its bytes (a folder's: one zip; `/download/{path}`
one file of it), `/s/{token}/view[/{path}]` the same bytes shown in the
browser (the page's previews), `/s/{token}/unlock` the password form.

Every request checks the share anew: revoked (or its owner key revoked)
answers 404, expired 410, a new download of an exhausted share 410, a
missing password 401 (HTTP Basic for scripts, the form for browsers), too
many wrong ones 429. Each answer that refuses is a short page saying why.
Bytes are only ever served from here, through the store's reader (never a
Telegram or presigned URL), with the sandbox policy of `/f/`. The counting
rule is app/store/shares.py's; the token never reaches a log line (routes
are logged by their template, errors by app.http.shared.route_label.logged_path).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import secrets
from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse

from app.http.api.body_limits import JSON_BODY_LIMIT, SmallBodyRoute, read_small_body
from app.http.api.deps import ServicesDep
from app.http.api.file_response import plan_download
from app.http.shared.active_content import NATIVE_FILE_HEADERS
from app.http.shared.disposition import content_disposition
from app.http.shared.file_names import MAX_FILE_NAME_LENGTH, NAMED_PREFIX
from app.http.shared.links import public_base
from app.http.web.share_page import file_page, folder_page, password_page, refusal
from app.kit.zip_stream import MemberChanged, ZipMember, member_path, zip_length, zip_stream
from app.store.limits import MAX_KEY_LENGTH
from app.store.object_info import ObjectInfo
from app.store.services import Services
from app.store.shares import (
    Limited,
    Opened,
    PasswordCheck,
    ShareInfo,
    ShareState,
)

router = APIRouter(tags=["share links"], route_class=SmallBodyRoute)

#: The page's download session: one per browser and share (app/store/shares.py).
SESSION_COOKIE = "tu_share_session"
#: Set once the right password was given on the page (app/store/share_passwords.py).
UNLOCK_COOKIE = "tu_share_unlock"
SESSION_COOKIE_SECONDS = 24 * 3600
#: Entries of a folder page.
FOLDER_PAGE = 200
_CACHE = "private, no-cache"
_ZIP_ITEM = "\x00zip"
# Bytes-sent updates in flight (app/store/shares.py counts sessions by them).
_pending_updates: set[asyncio.Task[None]] = set()


def _address(request: Request) -> str:
    return request.client.host if request.client else ""


def _secure(request: Request, services: Services) -> bool:
    base = services.settings.public_base_url or ""
    return request.url.scheme == "https" or base.startswith("https://")


def _client(request: Request) -> str:
    """Who downloads, for the session key: the page's cookie, or else the
    client's address and User-Agent (curl, download managers)."""
    cookie = request.cookies.get(SESSION_COOKIE, "")
    if 16 <= len(cookie) <= 64 and cookie.isascii():
        return "cookie:" + cookie
    agent = request.headers.get("user-agent", "")[:256]
    return f"client:{_address(request)}\x00{agent}"


def _basic_password(request: Request) -> str | None:
    """The password of `Authorization: Basic` (any user name), if sent."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic" or len(credentials) > 4096:
        return None
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2]


async def _share(services: Services, token: str, *, new_download: bool) -> ShareInfo | Response:
    """The live share of `token`, or the page that says why there is none.
    An exhausted share is refused only where a new download would start."""
    share = await services.shares.find(token) if token.isascii() else None
    if share is None:
        return refusal(
            404,
            "No share here",
            "This link does not lead to a share: check that it was copied whole.",
        )
    state = share.state()
    if state is ShareState.REVOKED:
        return refusal(
            404, "This share was revoked", "Its owner took it back: the link no longer works."
        )
    if state is ShareState.EXPIRED:
        assert share.expires_at is not None
        when = share.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        return refusal(410, "This share has expired", f"It was available until {when}.")
    if state is ShareState.EXHAUSTED and new_download:
        return _exhausted()
    return share


def _exhausted() -> Response:
    return refusal(
        410,
        "This share has been used up",
        "Every download it allowed has been made: ask its owner for a new link.",
    )


async def _authorized(request: Request, services: Services, share: ShareInfo) -> Response | None:
    """None if the request may have the share's content, else the answer."""
    checked = await services.shares.check_password(
        share, _address(request), _basic_password(request), request.cookies.get(UNLOCK_COOKIE)
    )
    if checked in (PasswordCheck.NOT_NEEDED, PasswordCheck.RIGHT):
        return None
    if isinstance(checked, Limited):
        return _limited(checked)
    return refusal(
        401,
        "This share needs a password",
        "Open its page to give it, or send it as HTTP Basic (curl -u :PASSWORD).",
        {"WWW-Authenticate": 'Basic realm="share", charset="UTF-8"'},
    )


def _limited(limited: Limited) -> Response:
    return refusal(
        429,
        "Too many wrong passwords",
        f"Too many wrong passwords were tried for this share or from your address: "
        f"try again in {limited.retry_after} s.",
        {"Retry-After": str(limited.retry_after)},
    )


def _unavailable() -> Response:
    return refusal(
        404,
        "The shared file is not available",
        "It was deleted or moved to the trash; if its owner restores it, the link works again.",
    )


def _folder_path(path: str, *, folder: bool) -> str | None:
    """A path inside a folder share, or None if it cannot be one."""
    if "\x00" in path or len(path) > MAX_KEY_LENGTH:
        return None
    if folder:
        return path if path == "" or path.endswith("/") else None
    return path if path and not path.endswith("/") else None


# --- the page -----------------------------------------------------------------


@router.get("/s/{token}", include_in_schema=False)
async def share_page(
    token: str,
    request: Request,
    services: ServicesDep,
    path: Annotated[str, Query(max_length=MAX_KEY_LENGTH)] = "",
    after: Annotated[str | None, Query(max_length=MAX_KEY_LENGTH)] = None,
) -> Response:
    """The share's page: what is shared, its limits, a download button and a
    preview on demand (never loaded by the page itself: a view never counts)."""
    share = await _share(services, token, new_download=True)
    if isinstance(share, Response):
        return share
    if share.has_password:
        checked = await services.shares.check_password(
            share, _address(request), None, request.cookies.get(UNLOCK_COOKIE)
        )
        if checked is not PasswordCheck.RIGHT:
            return password_page(token)
    left = None if share.max_downloads is None else share.max_downloads - share.downloads
    base = f"/s/{token}"
    if share.target.prefix is None:
        info = await services.shares.file_of(share)
        if info is None:
            return _unavailable()
        response = file_page(
            name=info.name,
            size=info.size,
            content_type=info.content_type,
            download_url=f"{base}/download",
            view_url=f"{base}/view",
            expires_at=share.expires_at,
            left=left,
        )
    else:
        inner = _folder_path(path, folder=True)
        if inner is None:
            return refusal(404, "No such folder", "This share holds no folder of that name.")
        listing = await services.shares.list_folder(share, inner, after=after, limit=FOLDER_PAGE)
        strip = len(share.target.prefix) + len(inner)
        response = folder_page(
            token=token,
            folder_name=_folder_name(share),
            path=inner,
            folders=[prefix[strip:].rstrip("/") for prefix in listing.prefixes],
            files=[(o.key[strip:], o.size, o.content_type) for o in listing.objects],
            more_after=listing.last if listing.truncated else None,
            expires_at=share.expires_at,
            left=left,
        )
    if not request.cookies.get(SESSION_COOKIE):
        response.set_cookie(
            SESSION_COOKIE,
            secrets.token_urlsafe(24),
            max_age=SESSION_COOKIE_SECONDS,
            path=base,
            secure=_secure(request, services),
            httponly=True,
            samesite="lax",
        )
    return response


def _folder_name(share: ShareInfo) -> str:
    prefix = (share.target.prefix or "").removeprefix(NAMED_PREFIX)
    return prefix.rstrip("/").rsplit("/", 1)[-1] or "shared"


def _same_origin(request: Request, services: Services) -> bool:
    """Whether a form post comes from this service's own pages: the
    browser's Sec-Fetch-Site, else its Origin. A client that sends neither
    is not a browser, so no other site can have made it post."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    ours = {
        f"{request.url.scheme}://{request.url.netloc}",
        public_base(request, services.settings),
    }
    return origin in {f"{urlsplit(url).scheme}://{urlsplit(url).netloc}" for url in ours}


@router.post("/s/{token}/unlock", include_in_schema=False)
async def unlock(token: str, request: Request, services: ServicesDep) -> Response:
    """The page's password form: the right password sets a cookie for this
    share alone (its path), then goes back to the page."""
    share = await _share(services, token, new_download=False)
    if isinstance(share, Response):
        return share
    if not _same_origin(request, services):
        return refusal(403, "Refused", "The password form must be sent from the share's page.")
    body = await read_small_body(request, JSON_BODY_LIMIT)
    password = parse_qs(body.decode("utf-8", "replace")).get("password", [""])[0]
    if not share.has_password:
        return RedirectResponse(f"/s/{token}", status_code=303)
    checked = await services.shares.check_password(share, _address(request), password, None)
    if isinstance(checked, Limited):
        return _limited(checked)
    if checked is not PasswordCheck.RIGHT:
        return password_page(token, problem="That is not the password.", status=403)
    value, lifetime = services.shares.unlock_cookie(share)
    response = RedirectResponse(f"/s/{token}", status_code=303)
    response.set_cookie(
        UNLOCK_COOKIE,
        value,
        max_age=lifetime,
        path=f"/s/{token}",
        secure=_secure(request, services),
        httponly=True,
        samesite="lax",
    )
    return response


# --- the bytes --------------------------------------------------------------------


async def _counted(
    body: AsyncIterator[bytes], services: Services, key: str
) -> AsyncIterator[bytes]:
    """The body, with the bytes it sent added to its download session when
    it ends (finished, failed or cut off)."""
    sent = 0
    try:
        async for block in body:
            sent += len(block)
            yield block
    finally:
        # Not awaited here: the generator may be closing under cancellation.
        task = asyncio.get_running_loop().create_task(services.shares.sent(key, sent))
        _pending_updates.add(task)
        task.add_done_callback(_pending_updates.discard)


async def _close(body: AsyncIterator[bytes]) -> None:
    close = getattr(body, "aclose", None)
    if close is not None:
        await close()


async def _refused_now(services: Services, share: ShareInfo) -> Response:
    """Why a new download was refused: the share changed since it was read."""
    again = await _share(services, share.token, new_download=True)
    return again if isinstance(again, Response) else _exhausted()


async def _serve_file(
    request: Request,
    services: Services,
    share: ShareInfo,
    info: ObjectInfo,
    item: str,
    inline: bool,
) -> Response:
    disposition = "inline" if inline or share.disposition == "inline" else "attachment"
    plan = plan_download(request, info, disposition=disposition, cache_control=_CACHE)
    if plan.bodiless is not None:
        return plan.bodiless
    # The first bytes are fetched (and checked) first: a file that cannot be
    # served is an error, not a download counted.
    body = await services.store.open_range(info, plan.start, plan.end)
    key = services.shares.session_key(share, item, _client(request))
    if await services.shares.open_download(share, key, info.size) is Opened.REFUSED:
        await _close(body)
        return await _refused_now(services, share)
    return StreamingResponse(
        _counted(body, services, key),
        status_code=plan.status,
        headers=plan.headers,
        media_type=info.content_type,
    )


async def _file_of_share(
    request: Request, services: Services, token: str, path: str | None, *, inline: bool
) -> Response:
    share = await _share(services, token, new_download=False)
    if isinstance(share, Response):
        return share
    refused = await _authorized(request, services, share)
    if refused is not None:
        return refused
    if path is None:
        if share.target.prefix is not None:
            if inline:
                return refusal(404, "Nothing to show", "A folder is downloaded, not shown.")
            return await _zip(request, services, share)
        info = await services.shares.file_of(share)
        if info is None:
            return _unavailable()
        return await _serve_file(request, services, share, info, "", inline)
    inner = _folder_path(path, folder=False) if share.target.prefix is not None else None
    info = None if inner is None else await services.shares.file_in_folder(share, inner)
    if info is None:
        return refusal(404, "No such file", "This share holds no file of that name.")
    return await _serve_file(request, services, share, info, inner or "", inline)


@router.get("/s/{token}/download", include_in_schema=False)
@router.head("/s/{token}/download", include_in_schema=False)
async def share_download(token: str, request: Request, services: ServicesDep) -> Response:
    """The shared file (Range, conditional requests), or the shared folder as
    one streamed zip. `curl -OJ` saves it under its name."""
    return await _file_of_share(request, services, token, None, inline=False)


@router.get("/s/{token}/download/{path:path}", include_in_schema=False)
@router.head("/s/{token}/download/{path:path}", include_in_schema=False)
async def share_folder_file(
    token: str, path: str, request: Request, services: ServicesDep
) -> Response:
    return await _file_of_share(request, services, token, path, inline=False)


@router.get("/s/{token}/view", include_in_schema=False)
@router.head("/s/{token}/view", include_in_schema=False)
async def share_view(token: str, request: Request, services: ServicesDep) -> Response:
    """The shared file for the page's preview: inline, sandboxed, over Range."""
    return await _file_of_share(request, services, token, None, inline=True)


@router.get("/s/{token}/view/{path:path}", include_in_schema=False)
@router.head("/s/{token}/view/{path:path}", include_in_schema=False)
async def share_folder_view(
    token: str, path: str, request: Request, services: ServicesDep
) -> Response:
    return await _file_of_share(request, services, token, path, inline=True)


async def _zip(request: Request, services: Services, share: ShareInfo) -> Response:
    """The whole folder, as one stored ZIP (app/kit/zip_stream.py) whose
    length is known before the first byte; its files are read one after
    another through the store, as any download."""
    prefix = share.target.prefix
    assert prefix is not None
    files = await services.shares.every_file(share)
    if files is None:
        return refusal(
            413,
            "Too many files for one zip",
            "This folder holds more files than one zip may: download them one by one.",
        )
    root = member_path(_folder_name(share))[:MAX_FILE_NAME_LENGTH]
    members = [
        ZipMember(f"{root}/{member_path(found.key[len(prefix) :])}", found.size, found.modified)
        for found in files
    ]
    length = zip_length(members)
    headers = {
        "Content-Length": str(length),
        "Content-Disposition": content_disposition(f"{root}.zip"),
        "Accept-Ranges": "none",
        **NATIVE_FILE_HEADERS,
        "Cache-Control": _CACHE,
    }
    if request.method == "HEAD":
        return Response(headers=headers, media_type="application/zip")
    key = services.shares.session_key(share, _ZIP_ITEM, _client(request))
    if await services.shares.open_download(share, key, length) is Opened.REFUSED:
        return await _refused_now(services, share)

    async def open_member(index: int) -> AsyncIterator[bytes]:
        found = files[index]
        info = await services.shares.file_in_folder(share, found.key[len(prefix) :])
        if info is None or info.size != found.size:
            raise MemberChanged(f"a file of the folder changed while it was zipped (#{index})")
        return await services.store.open_range(info, 0, info.size)

    return StreamingResponse(
        _counted(zip_stream(members, open_member), services, key),
        headers=headers,
        media_type="application/zip",
    )
