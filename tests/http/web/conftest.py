"""The web page in a real browser: Debian's chromium driven by Playwright.

No browser is downloaded (`playwright install` is never run): the tests use
/usr/bin/chromium, which scripts/test installs with apt. Screenshots of the
main screens go to SCREENSHOT_DIR (default artifacts/screenshots); the run
prints where.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT_DIR = Path(
    os.environ.get(
        "SCREENSHOT_DIR", Path(__file__).resolve().parents[3] / "artifacts" / "screenshots"
    )
)

_shots: list[Path] = []


@pytest.fixture(scope="module")
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/test does)")
    return CHROMIUM


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(chromium: str) -> AsyncIterator[Browser]:
    """One chromium per test module (each test opens contexts of its own, as
    a new browser profile would be): launching Playwright's driver and
    chromium costs about 1.5 s of CPU, more than most of these tests. Its
    tests run on the module's event loop (`pytest.mark.asyncio(loop_scope=
    "module")`), as must every async fixture they use."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
def screenshot_dir() -> Path:
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    return SCREENSHOT_DIR


def record_screenshot(path: Path) -> None:
    _shots.append(path)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _shots:
        terminalreporter.write_line(
            f"web page screenshots ({len(_shots)}): {SCREENSHOT_DIR}", bold=True
        )
