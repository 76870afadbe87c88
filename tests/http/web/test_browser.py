"""The page at / in Debian's chromium, against a served service and the
Telegram simulator: sign in, upload through tus with progress, resume after a
reload, download byte-exact, delete, the status screen, a wrong key.

These run on SQLite only: the database behind the page's endpoints is
covered on both backends by tests/http/web/test_session.py and
test_page_endpoints.py; here the browser is what is under test.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import pytest_asyncio
from playwright.async_api import (
    Browser,
    BrowserContext,
    CDPSession,
    ConsoleMessage,
    Page,
    Request,
    expect,
)

from tests.db.helpers import Database
from tests.http.web.conftest import record_screenshot
from tests.running_service import CHAT_ID, Service, ServiceFactory, ServiceLauncher, payload

ACCESS_KEY = "AKIDBROWSER"
SECRET = "browser-test-secret-0123456789"
MiB = 1024 * 1024
FILE_SIZE = 40 * MiB
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 360, "height": 760}
# Long enough for 40 MiB through the simulator on a busy machine.
UPLOAD_TIMEOUT_MS = 180_000
# The emulated uplink: 40 MiB take 5 s, several of the page's 16 MiB requests.
UPLINK = 8 * MiB

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def database(sqlite_template: Path, tmp_path: Path) -> Database:
    path = tmp_path / "test.db"
    shutil.copyfile(sqlite_template, path)
    url = f"sqlite+aiosqlite:///{path}"
    return Database(backend="sqlite", url=url, migration_url=url)


@pytest_asyncio.fixture(loop_scope="module")
async def launcher(database: Database) -> AsyncIterator[ServiceLauncher]:
    """The services of one test (on the module's loop, with the browser; a
    fresh SQLite database each, so no test sees another's files)."""
    launcher = ServiceLauncher(database)
    yield launcher
    await launcher.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def service(start_service: ServiceFactory) -> Service:
    # 1 MiB chunks: 40 chunks for the 40 MiB file, spread over the bots.
    return await start_service(bots=3, chunk_size=MiB, max_upload_size=64 * MiB)


@dataclass(frozen=True)
class LocalFile:
    path: Path
    data: bytes


@pytest.fixture
def big_file(tmp_path: Path) -> LocalFile:
    data = payload(FILE_SIZE, seed=40)
    path = tmp_path / "forty.bin"
    path.write_bytes(data)
    return LocalFile(path, data)


class PageWatch:
    """Script errors and console errors (a CSP violation is one) of a page."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def console(self, message: ConsoleMessage) -> None:
        # A refused request (the 401 of "am I signed in?") is logged too: not a fault.
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.problems.append(message.text)

    def page_error(self, error: Any) -> None:
        self.problems.append(str(error))


@pytest_asyncio.fixture(loop_scope="module")
async def open_page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A page on `url`, or on the `service` fixture's service, in a browser
    context of its own (closed after the test: the browser is the module's).
    The service is started only when asked for: a test with a service of its
    own must not have another one holding the bots it waits for."""
    watches: list[PageWatch] = []
    contexts: list[BrowserContext] = []

    async def open_page(viewport: dict[str, int] = DESKTOP, url: str | None = None) -> Page:
        if url is None:
            service: Service = request.getfixturevalue("service")
            url = service.url
        context = await browser.new_context(viewport=viewport, base_url=url, accept_downloads=True)
        contexts.append(context)
        page = await context.new_page()
        watch = PageWatch()
        page.on("console", watch.console)
        page.on("pageerror", watch.page_error)
        watches.append(watch)
        await page.goto("/")
        return page

    yield open_page
    for context in contexts:
        await context.close()
    problems = [problem for watch in watches for problem in watch.problems]
    assert not problems, f"the page logged errors: {problems}"


async def sign_in(page: Page, key: str) -> None:
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_text("Signed in as")).to_be_visible()


async def shoot(page: Page, directory: Path, name: str) -> None:
    path = directory / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    record_screenshot(path)


async def slow_uplink(page: Page) -> CDPSession:
    """UPLINK up, so that a reload or a lost connection lands mid-upload;
    the session returned can take the connection away (`set_online`)."""
    cdp = await page.context.new_cdp_session(page)
    await set_online(cdp, True)
    return cdp


async def set_online(cdp: CDPSession, online: bool) -> None:
    await cdp.send(
        "Network.emulateNetworkConditions",
        {
            "offline": not online,
            "latency": 0,
            "downloadThroughput": -1,
            "uploadThroughput": UPLINK,
        },
    )


def upload_item(page: Page, name: str) -> Any:
    return page.locator("li.upload", has_text=name)


async def test_a_wrong_key_shows_an_error_and_a_right_one_signs_in(
    open_page: Any, service: Service, screenshot_dir: Path
) -> None:
    page = await open_page()
    # By keyboard only: the key field, then Enter.
    await page.get_by_label("API key").focus()
    await page.keyboard.type("tu_not-a-key")
    await page.keyboard.press("Enter")

    error = page.get_by_role("alert")
    await expect(error).to_have_text("Sign-in failed: the API key is unknown or revoked")
    await expect(page.get_by_text("Signed in as")).to_be_hidden()
    await shoot(page, screenshot_dir, "signin-wrong-key-desktop")

    await sign_in(page, service.key)
    await expect(page.get_by_role("heading", name="Upload", exact=True)).to_be_visible()
    # The key is nowhere the page's scripts can read.
    storage = await page.evaluate("() => JSON.stringify(localStorage) + document.cookie")
    assert service.key not in storage
    phone = await open_page(PHONE)
    await expect(phone.get_by_label("API key")).to_be_visible()
    await shoot(phone, screenshot_dir, "signin-phone")


async def test_upload_through_the_page_then_download_and_delete(
    open_page: Any, service: Service, big_file: LocalFile, screenshot_dir: Path
) -> None:
    page = await open_page()
    await sign_in(page, service.key)
    # About 5 s for 40 MiB: long enough to see the progress with its speed,
    # however fast the machine.
    await slow_uplink(page)

    await page.locator("#file-input").set_input_files(big_file.path)

    item = upload_item(page, "forty.bin")
    await expect(item.locator(".detail")).to_contain_text("/s", timeout=UPLOAD_TIMEOUT_MS)
    await expect(item.locator(".percent")).to_have_text("100 %", timeout=UPLOAD_TIMEOUT_MS)
    assert await item.locator("progress").evaluate("p => p.value") == 100
    download = item.get_by_role("link", name="Download")
    await expect(download).to_be_visible()
    await shoot(page, screenshot_dir, "upload-done-desktop")
    link = await download.get_attribute("href")
    assert link is not None

    async with httpx.AsyncClient(timeout=60) as http:
        fetched = await http.get(link)
    assert fetched.status_code == 200
    assert fetched.content == big_file.data

    await page.get_by_role("button", name="Files", exact=True).click()
    row = page.locator("#files-body tr", has_text="forty.bin")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("40 MiB")
    await shoot(page, screenshot_dir, "files-desktop")
    phone = await open_page(PHONE)
    await sign_in(phone, service.key)
    await phone.get_by_role("button", name="Files", exact=True).click()
    await expect(phone.locator("#files-body tr", has_text="forty.bin")).to_be_visible()
    await shoot(phone, screenshot_dir, "files-phone")

    # Delete asks first; dismissing keeps the file.
    page.once("dialog", lambda dialog: dialog.dismiss())
    await row.get_by_role("button", name="Delete forty.bin").click()
    await expect(row).to_have_count(1)
    page.once("dialog", lambda dialog: dialog.accept())
    await row.get_by_role("button", name="Delete forty.bin").click()
    await expect(row).to_have_count(0)
    await expect(page.get_by_text("No files yet.")).to_be_visible()
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(link)).status_code == 404


async def test_a_reload_mid_upload_resumes_from_where_it_was(
    open_page: Any, service: Service, big_file: LocalFile, screenshot_dir: Path
) -> None:
    page = await open_page()
    await sign_in(page, service.key)
    await slow_uplink(page)
    await page.locator("#file-input").set_input_files(big_file.path)
    # Past the first 16 MiB request: its bytes are durable on the service.
    await page.wait_for_function(
        "() => (document.querySelector('li.upload progress') || {}).value >= 45",
        timeout=UPLOAD_TIMEOUT_MS,
    )
    await shoot(page, screenshot_dir, "upload-progress-desktop")
    await page.reload()
    await expect(page.get_by_text("Signed in as")).to_be_visible()
    await expect(page.get_by_text("Unfinished uploads")).to_be_visible()

    patches: list[int] = []

    def note(request: Request) -> None:
        if request.method == "PATCH":
            patches.append(int(request.headers["upload-offset"]))

    page.on("request", note)
    await page.locator("#file-input").set_input_files(big_file.path)

    item = upload_item(page, "forty.bin")
    await expect(item.locator(".percent")).to_have_text("100 %", timeout=UPLOAD_TIMEOUT_MS)
    resumed_at = int(await item.get_attribute("data-resumed-at") or 0)
    assert resumed_at >= 16 * MiB
    # Nothing before the stored offset is sent again. The first PATCH may
    # start short of where the upload resumes: the request the reload cut off
    # keeps what it received, and if that lands after the new page's HEAD,
    # its PATCH is refused (409) and tus asks again (HEAD, then PATCH there).
    assert patches and min(patches) >= 16 * MiB, patches
    assert resumed_at in patches, patches
    await expect(item.locator(".detail")).to_contain_text("Done")
    await expect(page.get_by_text("Unfinished uploads")).to_be_hidden()

    link = await item.get_by_role("link", name="Download").get_attribute("href")
    assert link is not None
    async with httpx.AsyncClient(timeout=60) as http:
        fetched = await http.get(link)
    assert fetched.content == big_file.data
    async with service.client() as http:
        listing = await http.get("/api/files", headers=service.auth)
    assert [item["file_name"] for item in listing.json()["items"]] == ["forty.bin"]


async def test_a_lost_connection_resumes_once_back_online(
    open_page: Any, service: Service, big_file: LocalFile
) -> None:
    page = await open_page()
    await sign_in(page, service.key)
    network = await slow_uplink(page)
    await page.locator("#file-input").set_input_files(big_file.path)
    await page.wait_for_function(
        "() => (document.querySelector('li.upload progress') || {}).value >= 45",
        timeout=UPLOAD_TIMEOUT_MS,
    )

    await set_online(network, False)

    item = upload_item(page, "forty.bin")
    await expect(item.get_by_role("alert")).to_contain_text("the connection was lost")
    await expect(item.get_by_role("button", name="Resume forty.bin")).to_be_visible()
    patches: list[int] = []
    page.on(
        "request",
        lambda request: (
            patches.append(int(request.headers["upload-offset"]))
            if request.method == "PATCH"
            else None
        ),
    )
    await set_online(network, True)  # the page carries on by itself

    await expect(item.locator(".percent")).to_have_text("100 %", timeout=UPLOAD_TIMEOUT_MS)
    assert patches and patches[0] >= 16 * MiB, patches
    link = await item.get_by_role("link", name="Download").get_attribute("href")
    assert link is not None
    async with httpx.AsyncClient(timeout=60) as http:
        fetched = await http.get(link)
    assert fetched.content == big_file.data


async def test_the_status_screen_shows_every_bot(
    open_page: Any, service: Service, screenshot_dir: Path
) -> None:
    async with service.client() as http:
        stored = await http.put("/api/files/x.bin", content=payload(3 * MiB), headers=service.auth)
        assert stored.status_code == 201
    for viewport, name in ((DESKTOP, "status-desktop"), (PHONE, "status-phone")):
        page = await open_page(viewport)
        await sign_in(page, service.key)
        await page.get_by_role("button", name="Status", exact=True).click()

        rows = page.locator("#bots-body tr")
        await expect(rows).to_have_count(len(service.sim.tokens))
        for token in service.sim.tokens:
            bot_id = token.split(":")[0]
            row = page.locator(f'#bots-body tr[data-bot-id="{bot_id}"]')
            await expect(row).to_contain_text("usable")
        await expect(page.locator("#facts")).to_contain_text("Upload buffers in use")
        await expect(page.locator("#facts")).to_contain_text("GC")
        # How full the storage chat is, against CHAT_MESSAGE_LIMIT.
        await expect(page.locator("#facts")).to_contain_text(f"Storage chat {CHAT_ID}")
        await expect(page.locator("#facts")).to_contain_text("of 500000 messages")
        await expect(page.locator("#chart-peak")).to_contain_text("up")
        await shoot(page, screenshot_dir, name)


async def test_a_file_over_the_limit_is_refused_in_words(
    open_page: Any, start_service: ServiceFactory, tmp_path: Path, screenshot_dir: Path
) -> None:
    small = await start_service(bots=1, max_upload_size=MiB)
    path = tmp_path / "two.bin"
    path.write_bytes(payload(2 * MiB))
    page = await open_page(PHONE, url=small.url)
    await sign_in(page, small.key)

    await page.locator("#file-input").set_input_files(path)

    item = upload_item(page, "two.bin")
    await expect(item.get_by_role("alert")).to_have_text(
        "Failed: file larger than 1.0 MiB, the service's limit (MAX_UPLOAD_SIZE)"
    )
    await shoot(page, screenshot_dir, "upload-refused-phone")
    async with small.client() as http:
        listing = await http.get("/api/files", headers=small.auth)
    assert listing.json()["items"] == []


async def test_buckets_are_browsed_read_only(
    open_page: Any, start_service: ServiceFactory, screenshot_dir: Path
) -> None:
    s3_service = await start_service(bots=1, s3_credentials={ACCESS_KEY: SECRET})
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    await asyncio.to_thread(s3.create_bucket, Bucket="photos")
    for key in ("2024/beach.jpg", "2024/hills.jpg", "2025/city.jpg", "readme.txt"):
        await asyncio.to_thread(s3.put_object, Bucket="photos", Key=key, Body=key.encode())

    for viewport, name in ((DESKTOP, "buckets-desktop"), (PHONE, "buckets-phone")):
        page = await open_page(viewport, url=s3_service.url)
        await sign_in(page, s3_service.key)
        await page.get_by_role("button", name="Buckets", exact=True).click()
        await page.get_by_role("button", name="photos", exact=True).click()
        await expect(page.get_by_role("button", name="2024/", exact=True)).to_be_visible()
        await expect(page.locator("#objects-body tr")).to_have_count(1)
        await expect(page.locator("#objects-body")).to_contain_text("readme.txt")
        # Its Download is a short-lived signed S3 link, never a permanent /f/ one.
        link = page.locator("#objects-body a", has_text="Download")
        href = await link.get_attribute("href")
        assert href is not None and "X-Amz-Signature=" in href and "/f/" not in href
        async with page.expect_download() as downloading:
            await link.click()
        saved = await (await downloading.value).path()
        assert saved.read_bytes() == b"readme.txt"

        await page.get_by_role("button", name="2024/", exact=True).click()
        await expect(page.locator("#objects-body tr")).to_have_count(2)
        await expect(page.locator("#objects-body")).to_contain_text("beach.jpg")
        await expect(page.locator("#crumbs")).to_contain_text("photos / 2024")
        # Read-only: nothing here deletes or uploads.
        await expect(
            page.locator("#view-buckets").get_by_role("button", name="Delete")
        ).to_have_count(0)
        await shoot(page, screenshot_dir, name)


async def test_a_key_with_bidi_controls_is_shown_as_it_is(
    open_page: Any, start_service: ServiceFactory
) -> None:
    # "invoice\u202egnp.exe" would read "invoiceexe.png"; the page spells the control out.
    s3_service = await start_service(bots=1, s3_credentials={ACCESS_KEY: SECRET})
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_service.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    await asyncio.to_thread(s3.create_bucket, Bucket="mail")
    await asyncio.to_thread(s3.put_object, Bucket="mail", Key="invoice\u202egnp.exe", Body=b"x")

    page = await open_page(DESKTOP, url=s3_service.url)
    await sign_in(page, s3_service.key)
    await page.get_by_role("button", name="Buckets", exact=True).click()
    await page.get_by_role("button", name="mail", exact=True).click()
    name = page.locator("#objects-body td.name")
    await expect(name).to_have_text("invoice[U+202E]gnp.exe")


# ReDoc shows Redocly's logo from its CDN, unconditionally; the docs' CSP refuses
# it (and ReDoc hides the image when it fails to load). The one refusal expected.
REDOC_LOGO_REFUSED = "Loading the image 'https://cdn.redoc.ly/redoc/logo-mini.svg' violates"


async def test_the_api_docs_work_offline_under_their_csp(
    browser: Browser, service: Service, screenshot_dir: Path
) -> None:
    # Every request that leaves the service fails, as it would offline, and a
    # script the CSP refused would be a console error.
    context = await browser.new_context(viewport=DESKTOP, base_url=service.url)
    page = await context.new_page()
    watch = PageWatch()
    page.on("console", watch.console)
    page.on("pageerror", watch.page_error)
    left: list[str] = []

    async def offline(route: Any) -> None:
        left.append(route.request.url)
        await route.abort()

    await context.route(lambda url: not url.startswith(service.url), offline)
    await page.goto("/docs")
    await expect(page.locator(".swagger-ui .opblock-summary-path").first).to_be_visible()
    await expect(page.get_by_text("/api/upload", exact=True).first).to_be_visible()
    await shoot(page, screenshot_dir, "api-docs")
    await page.goto("/redoc")
    await expect(page.get_by_role("heading", name="TeleUploader").first).to_be_visible()
    await expect(page.get_by_text("/api/upload").first).to_be_visible()
    await shoot(page, screenshot_dir, "api-redoc")
    await context.close()
    assert left == []
    assert [p for p in watch.problems if not p.startswith(REDOC_LOGO_REFUSED)] == []


async def test_every_control_has_a_name(open_page: Any, service: Service) -> None:
    page = await open_page()
    await sign_in(page, service.key)
    for view in ("Upload", "Files", "Status"):
        await page.get_by_role("button", name=view, exact=True).click()
        unnamed = await page.evaluate(
            """() => [...document.querySelectorAll('button, a, input, progress')]
                .filter(el => el.offsetParent !== null || el.type === 'file')
                .filter(el => {
                  const label = el.getAttribute('aria-label') || el.textContent.trim()
                    || (el.labels && [...el.labels].map(l => l.textContent).join('').trim());
                  return !label;
                })
                .map(el => el.outerHTML.slice(0, 80))"""
        )
        assert unnamed == [], f"controls without a name on {view}: {unnamed}"


async def test_files_are_listed_newest_first_and_the_order_can_be_changed(
    open_page: Any, service: Service
) -> None:
    # Uploaded in an order that is neither the names' nor the keys'.
    async with service.client() as http:
        for name in ("m.txt", "b.txt", "z.txt"):
            stored = await http.put(f"/api/files/{name}", content=b"x", headers=service.auth)
            assert stored.status_code == 201
    page = await open_page()
    await sign_in(page, service.key)
    await page.get_by_role("button", name="Files", exact=True).click()

    names = page.locator("#files-body td.name")
    await expect(names).to_have_text(["z.txt", "b.txt", "m.txt"])
    await page.get_by_label("Order").select_option(label="Oldest first")
    await expect(names).to_have_text(["m.txt", "b.txt", "z.txt"])


async def test_signing_out_is_a_note_not_an_error(open_page: Any, service: Service) -> None:
    page = await open_page()
    await sign_in(page, service.key)

    await page.get_by_role("button", name="Sign out").click()

    await expect(page.get_by_role("status").filter(has_text="Signed out.")).to_be_visible()
    await expect(page.get_by_role("alert").filter(has_text="Signed out.")).to_have_count(0)
    note = page.get_by_text("Signed out.")
    danger = await page.evaluate(
        "() => getComputedStyle(document.documentElement).getPropertyValue('--danger')"
    )
    color = await note.evaluate("node => getComputedStyle(node).color")
    probe = await page.evaluate(
        "(c) => { const p = document.createElement('p'); p.style.color = c; "
        "document.body.append(p); const v = getComputedStyle(p).color; p.remove(); return v; }",
        danger.strip(),
    )
    assert color != probe


async def test_a_deleted_files_link_note_goes_with_it(open_page: Any, service: Service) -> None:
    async with service.client() as http:
        stored = await http.put("/api/files/gone.txt", content=b"x", headers=service.auth)
        assert stored.status_code == 201
    page = await open_page()
    await sign_in(page, service.key)
    await page.get_by_role("button", name="Files", exact=True).click()
    row = page.locator("#files-body tr", has_text="gone.txt")

    await row.get_by_role("button", name="Copy the link to gone.txt").click()
    toast = page.locator("#toast")
    await expect(toast).to_contain_text("Link")
    page.once("dialog", lambda dialog: dialog.accept())
    await row.get_by_role("button", name="Delete gone.txt").click()

    await expect(row).to_have_count(0)
    await expect(toast).not_to_contain_text("Link")


async def test_a_deleted_file_is_restored_from_the_trash_view(
    open_page: Any, start_service: ServiceFactory
) -> None:
    trashing = await start_service(bots=2, trash_retention_seconds=3600)
    async with trashing.client() as http:
        stored = await http.put("/api/files/oops.txt", content=b"kept", headers=trashing.auth)
        public_id = stored.json()["public_id"]
        deleted = await http.delete(f"/api/files/{public_id}", headers=trashing.auth)
        assert deleted.status_code == 204
    page = await open_page(url=trashing.url)
    await sign_in(page, trashing.key)
    await page.get_by_role("button", name="Trash", exact=True).click()
    row = page.locator("#trash-body tr", has_text="oops.txt")

    # A write from the page: the session cookie and its CSRF token.
    await row.get_by_role("button", name="Restore oops.txt").click()

    await expect(page.locator("#toast")).to_contain_text("Restored “oops.txt”")
    await expect(row).to_have_count(0)
    async with trashing.client() as http:
        assert (await http.get(f"/f/{public_id}")).content == b"kept"
