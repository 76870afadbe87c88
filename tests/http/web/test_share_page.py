"""Share links in Debian's chromium: the share's page with its players over
Range (a seek is a Range request; all of one player's count once; a page
view never counts), the password form and its cookie, the pages of a
revoked, expired or used-up link, a folder with breadcrumbs and previews;
on the main page, Share on a file, the Shares view with extend and revoke,
and a click on a file previewing it in place.

One service and one browser for the module (tests/http/shares_service.py):
each test opens its own contexts (cookies of its own).
"""

from __future__ import annotations

import asyncio
import io
import math
import re
import struct
import wave
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, Request, expect

from tests.http.shares_service import (
    client,
    expire,
    put,
    share,
    share_of,
    shares_service,
    token_of,
)
from tests.http.web.conftest import record_screenshot
from tests.http.web.test_browser import DESKTOP, PHONE, PageWatch, sign_in
from tests.running_service import Service, eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")
__all__ = ["shares_service"]


@pytest_asyncio.fixture(loop_scope="module")
async def open_page(browser: Browser, shares_service: Service) -> AsyncIterator[Any]:
    """Pages in contexts of their own (a browser each: its own cookies);
    none may log a script or CSP error."""
    watches: list[PageWatch] = []
    contexts = []

    async def open_page(url: str, viewport: dict[str, int] = DESKTOP) -> Page:
        context = await browser.new_context(
            viewport=viewport, base_url=shares_service.url, accept_downloads=True
        )
        contexts.append(context)
        page = await context.new_page()
        watch = PageWatch()
        page.on("console", watch.console)
        page.on("pageerror", watch.page_error)
        watches.append(watch)
        await page.goto(url)
        return page

    yield open_page
    for context in contexts:
        await context.close()
    problems = [problem for watch in watches for problem in watch.problems]
    assert not problems, f"the pages logged errors: {problems}"


async def shoot(page: Page, screenshot_dir: Path, name: str) -> None:
    path = screenshot_dir / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    record_screenshot(path)


def wav(seconds: int, rate: int = 8000) -> bytes:
    """A tone, as 16-bit mono PCM: a sound chromium plays and seeks in."""
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(rate)
        frames = (
            struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * n / rate)))
            for n in range(seconds * rate)
        )
        sound.writeframes(b"".join(frames))
    return out.getvalue()


def png(width: int, height: int) -> bytes:
    """A plain blue picture, as a PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x2a\x7a\xb8" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def pdf(text: str) -> bytes:
    """A one-page PDF saying `text`."""
    stream = f"BT /F1 24 Tf 50 700 Td ({text}) Tj ET".encode()
    objects = [
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R"
        b"/Resources<</Font<</F1 5 0 R>>>>>>",
        b"<</Length %d>>stream\n" % len(stream) + stream + b"\nendstream",
        b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj" % number + body + b"endobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer<</Size %d/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return out


async def test_the_page_plays_and_seeks_over_range_and_counts_once(
    open_page: Any, shares_service: Service, screenshot_dir: Path
) -> None:
    service = shares_service
    # 480 kB, eight chunks in Telegram: more than chromium reads ahead of a
    # seek (a short sound is read whole in its first request).
    sound = wav(30)
    file = await put(service, "concert.wav", sound, **{"Content-Type": "audio/wav"})
    made = await share(service, file=file["public_id"], max_downloads=1, expires_in=7 * 86400)
    page = await open_page(made["url"])
    ranges: list[str] = []

    def note(request: Request) -> None:
        if "/view" in request.url:
            ranges.append(request.headers.get("range", ""))

    page.on("request", note)
    await expect(page.get_by_role("heading", name="concert.wav")).to_be_visible()
    await expect(page.get_by_text("Downloads left")).to_be_visible()
    await page.reload()
    assert (await share_of(service, made["id"]))["downloads"] == 0  # page views
    await shoot(page, screenshot_dir, "share-page-desktop")

    await page.get_by_role("button", name="Preview concert.wav").click()
    player = page.get_by_label("Preview of concert.wav")
    await expect(player).to_be_visible()
    await player.evaluate("a => new Promise(r => a.readyState >= 1 ? r() : a.onloadedmetadata = r)")
    assert await player.evaluate("a => Math.round(a.duration)") == 30
    for second in (25, 5, 17, 29, 2):
        await player.evaluate(
            "(a, t) => new Promise(r => { a.onseeked = () => r(); a.currentTime = t; })", second
        )
    assert len(ranges) >= 2 and all(r.startswith("bytes=") for r in ranges), ranges
    await shoot(page, screenshot_dir, "share-page-playing-desktop")
    # Every request of this player was one download; the one allowed.
    found = await share_of(service, made["id"])
    assert found["downloads"] == 1 and found["state"] == "exhausted"
    other = await open_page(made["url"], PHONE)
    await expect(other.get_by_role("heading", name="This share has been used up")).to_be_visible()
    phone = await open_page(
        (await share(service, file=file["public_id"], expires_in=86400))["url"], PHONE
    )
    await expect(phone.get_by_role("link", name="Download")).to_be_visible()
    await shoot(phone, screenshot_dir, "share-page-phone")


async def test_the_password_form_unlocks_this_share_alone(
    open_page: Any, shares_service: Service
) -> None:
    service = shares_service
    file = await put(service, "diary.txt", b"dear diary", **{"Content-Type": "text/plain"})
    made = await share(service, file=file["public_id"], password="open sesame")
    token = token_of(made)
    page = await open_page(made["url"])
    await expect(page.get_by_role("heading", name="This share needs a password")).to_be_visible()
    await page.get_by_label("Password", exact=True).fill("wrong")
    await page.get_by_role("button", name="Open").click()
    await expect(page.get_by_role("alert")).to_have_text("That is not the password.")
    await page.get_by_label("Password", exact=True).fill("open sesame")
    await page.get_by_role("button", name="Open").click()
    await expect(page.get_by_role("heading", name="diary.txt")).to_be_visible()
    await page.wait_for_load_state()  # its script too, before a click
    await page.get_by_role("button", name="Preview diary.txt").click()
    await expect(page.get_by_label("Preview of diary.txt")).to_have_text("dear diary")
    cookies = {c["name"]: c for c in await page.context.cookies()}
    unlock = cookies["tu_share_unlock"]
    assert unlock["path"] == f"/s/{token}" and unlock["httpOnly"] and unlock["sameSite"] == "Lax"
    assert "open sesame" not in unlock["value"]
    # Another share of the same file asks again.
    other = await share(service, file=file["public_id"], password="open sesame")
    await page.goto(other["url"])
    await expect(page.get_by_role("heading", name="This share needs a password")).to_be_visible()


async def test_revoked_and_expired_links_say_so(open_page: Any, shares_service: Service) -> None:
    service = shares_service
    file = await put(service, "gone.txt", b"gone")
    revoked = await share(service, file=file["public_id"])
    expired = await share(service, file=file["public_id"], expires_in=60)
    async with service.client() as http:
        await http.delete(f"/api/shares/{revoked['id']}", headers=service.auth)
    await expire(service, expired["id"])
    page = await open_page(revoked["url"])
    await expect(page.get_by_role("heading", name="This share was revoked")).to_be_visible()
    answer = await page.goto(expired["url"])
    assert answer is not None and answer.status == 410
    await expect(page.get_by_role("heading", name="This share has expired")).to_be_visible()


async def test_a_folder_page_walks_its_folders_and_previews_pictures_pdfs_and_text(
    open_page: Any, shares_service: Service, screenshot_dir: Path
) -> None:
    service = shares_service
    await put(service, "album/cover.png", png(64, 48), **{"Content-Type": "image/png"})
    await put(service, "album/notes.pdf", pdf("Hello from a share"))
    await put(service, "album/extra/lyrics.txt", b"la la la", **{"Content-Type": "text/plain"})
    made = await share(service, folder="album/")
    page = await open_page(made["url"])
    await page.get_by_role("button", name="Preview cover.png").click()
    picture = page.get_by_role("img", name="Preview of cover.png")
    await expect(picture).to_be_visible()
    assert await picture.evaluate("i => i.complete && i.naturalWidth") == 64
    await shoot(page, screenshot_dir, "share-folder-desktop")
    await page.get_by_role("button", name="Preview notes.pdf").click()
    await expect(page.get_by_title("Preview of notes.pdf")).to_be_visible()
    # The browser's own PDF viewer opens in the frame, the sandbox policy
    # of the bytes notwithstanding.
    await eventually(lambda: any(f.url.startswith("chrome-extension://") for f in page.frames))
    await page.get_by_role("link", name="extra/").click()
    await page.wait_for_load_state()
    crumbs = page.get_by_role("navigation", name="Folder path")
    await expect(crumbs.get_by_role("link", name="extra")).to_have_attribute("aria-current", "page")
    await page.get_by_role("button", name="Preview lyrics.txt").click()
    await expect(page.get_by_label("Preview of lyrics.txt")).to_have_text("la la la")
    async with page.expect_download() as downloading:
        await page.get_by_role("link", name="Download lyrics.txt").click()
    download = await downloading.value
    assert download.suggested_filename == "lyrics.txt"
    saved = await download.path()
    assert await asyncio.to_thread(saved.read_bytes) == b"la la la"
    await crumbs.get_by_role("link", name="album").click()
    await expect(page.get_by_role("link", name="extra/")).to_be_visible()
    async with page.expect_download() as zipping:
        await page.get_by_role("link", name="Download all (zip)").click()
    assert (await zipping.value).suggested_filename == "album.zip"


async def test_the_main_page_shares_previews_and_lists_shares_to_extend_and_revoke(
    open_page: Any, shares_service: Service, screenshot_dir: Path
) -> None:
    service = shares_service
    await put(service, "holiday/beach.png", png(80, 60), **{"Content-Type": "image/png"})
    page = await open_page("/")
    await sign_in(page, service.key)
    await page.get_by_role("button", name="Files", exact=True).click()
    await page.get_by_role("button", name="Preview beach.png").click()
    picture = page.get_by_role("img", name="Preview of beach.png")
    await expect(picture).to_be_visible()
    assert await picture.evaluate("i => i.complete && i.naturalWidth") == 80

    await page.get_by_role("button", name="Share beach.png").click()
    dialog = page.get_by_role("dialog")
    await dialog.get_by_label("The folder holiday/").check()
    await dialog.get_by_label("Downloads at most").fill("5")
    await dialog.get_by_role("button", name="Create link").click()
    await expect(dialog.get_by_label("Link")).to_have_value(re.compile(r"/s/[\w-]{43}$"))
    link = await dialog.get_by_label("Link").input_value()
    await dialog.get_by_role("button", name="Close").click()
    async with client(service) as http:
        assert "beach.png" in (await http.get(link)).text

    await page.get_by_role("button", name="Shares", exact=True).click()
    row = page.locator("#shares-body tr", has_text="holiday/")
    await expect(row.first).to_contain_text("0 of 5")
    await expect(row.first).to_contain_text("active")
    await shoot(page, screenshot_dir, "shares-view-desktop")
    page.once("dialog", lambda prompt: prompt.accept("30"))
    await row.first.get_by_role("button", name="Extend the share of holiday/ (folder)").click()
    await expect(page.get_by_role("status")).to_have_text("Extended by 30 days")
    phone = await open_page("/", PHONE)
    await sign_in(phone, service.key)
    await phone.get_by_role("button", name="Shares", exact=True).click()
    await expect(phone.locator("#shares-body tr").first).to_be_visible()
    await shoot(phone, screenshot_dir, "shares-view-phone")
    page.once("dialog", lambda confirm: confirm.accept())
    await row.first.get_by_role("button", name="Revoke the share of holiday/ (folder)").click()
    await expect(page.get_by_role("status")).to_have_text("Revoked")
    async with client(service) as http:
        assert (await http.get(link)).status_code == 404
