"""`teleuploader trash list` and `teleuploader trash restore ID [--as NAME]`
against a running service with the trash on."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_main import run_cli
from tests.cli.test_main import service_logs_elsewhere as service_logs_elsewhere
from tests.running_service import ServiceFactory


async def test_list_then_restore_under_the_old_name_and_a_new_one(
    start_service: ServiceFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    service = await start_service(trash_retention_seconds=3600)
    async with service.client() as http:
        await http.put("/api/files/a.txt", content=b"one", headers=service.auth)
        await http.put("/api/files/a.txt", content=b"two", headers=service.auth)
    client = ("--url", service.url, "--key", service.key)

    assert await run_cli("trash", "list", "--json", *client) == 0
    [line] = capsys.readouterr().out.splitlines()
    item = json.loads(line)
    assert (item["name"], item["reason"], item["size_bytes"]) == ("a.txt", "replaced", 3)

    # The live a.txt holds the name: one line on stderr, exit 2.
    assert await run_cli("trash", "restore", item["public_id"], *client) == 2
    assert "409" in capsys.readouterr().err
    assert await run_cli("trash", "restore", item["public_id"], "--as", "a-1.txt", *client) == 0
    link = capsys.readouterr().out.strip()
    assert link.endswith(f"/f/{item['public_id']}")
    async with service.client() as http:
        assert (await http.get(link)).content == b"one"
    assert await run_cli("trash", "list", *client) == 0
    assert capsys.readouterr().out == ""
