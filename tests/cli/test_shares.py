"""`teleuploader share`, `shares list` and `shares revoke` against a running
service (one for the module: tests/http/shares_service.py)."""

from __future__ import annotations

import argparse
import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from app.cli.shares import duration
from app.kit.logging import configure_logging
from tests.cli.test_main import run_cli
from tests.http.shares_service import client, put, shares_service
from tests.running_service import Service

__all__ = ["shares_service"]


@pytest.fixture(scope="module", autouse=True)
def quiet_service() -> Iterator[None]:
    """Before the module's service starts: its log lines (some loggers are
    bound when the app is made) must not mix with what the CLI prints."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    configure_logging("WARNING", "json", stream=io.StringIO())
    yield
    root.handlers[:], level = saved
    root.setLevel(level)
    structlog.reset_defaults()


def test_durations_read_as_people_write_them() -> None:
    assert [duration(text) for text in ("90", "90s", "30m", "12h", "7d", "2w")] == [
        90,
        90,
        1800,
        43200,
        604800,
        1209600,
    ]
    for wrong in ("", "0d", "7 days", "-1h", "1y"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(wrong)


@pytest.mark.asyncio(loop_scope="module")
async def test_share_prints_the_link_then_list_and_revoke(
    shares_service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    service = shares_service
    file = await put(service, "cli/report.txt", b"the report")
    options = ("--url", service.url, "--key", service.key)

    code = await run_cli(
        "share", file["download_url"], "--expires", "7d", "--max-downloads", "3", *options
    )
    assert code == 0
    link = capsys.readouterr().out.strip()
    assert "/s/" in link
    async with client(service) as http:
        assert (await http.get(link + "/download")).content == b"the report"

    assert await run_cli("share", "cli/", "--password", "pw", "--json", *options) == 0
    folder = json.loads(capsys.readouterr().out)
    assert (folder["kind"], folder["folder"], folder["has_password"]) == ("folder", "cli/", True)

    assert await run_cli("shares", "list", "--json", *options) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    mine = {item["url"]: item for item in listed}
    assert mine[link]["downloads"] == 1 and mine[link]["max_downloads"] == 3
    assert mine[link]["expires_at"] is not None

    assert await run_cli("shares", "revoke", str(mine[link]["id"]), *options) == 0
    assert capsys.readouterr().out == ""
    async with client(service) as http:
        assert (await http.get(link)).status_code == 404
    # Refused in one line (exit 2): a share that is no more, a file that never was.
    assert await run_cli("shares", "revoke", str(mine[link]["id"]), *options) == 2
    assert "404" in capsys.readouterr().err
    assert await run_cli("share", "no-such-id", *options) == 2
    assert "no file has the id" in capsys.readouterr().err
