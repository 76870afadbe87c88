"""`teleuploader trash list` and `teleuploader trash restore ID [--as NAME]`
against a running service with the trash on."""

from __future__ import annotations

import json

import pytest

from app.cli.main import main
from tests.cli.test_main import run_cli
from tests.cli.test_main import service_logs_elsewhere as service_logs_elsewhere
from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET
from tests.running_service import Service, ServiceFactory


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


async def test_list_spells_out_what_an_s3_key_would_do_to_the_terminal(
    start_service: ServiceFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    service = await start_service(trash_retention_seconds=3600, s3_credentials={ACCESS_KEY: SECRET})
    s3 = S3(service)
    await s3("create_bucket", Bucket="box")
    hostile = "a\x1b]0;owned\x07\x1b[2J\x9b1m\u202eb\rc"
    await s3("put_object", Bucket="box", Key=hostile, Body=b"x")
    await s3("delete_object", Bucket="box", Key=hostile)
    client = ("--url", service.url, "--key", service.key)

    assert await run_cli("trash", "list", *client) == 0
    shown = capsys.readouterr().out

    assert not any(ch in shown for ch in "\x1b\x07\x9b\u202e\r")
    assert "s3://box/a\\x1b]0;owned\\x07\\x1b[2J\\x9b1m[U+202E]b\\x0dc" in shown
    # --json gives the key exactly, as JSON escapes it.
    assert await run_cli("trash", "list", "--json", *client) == 0
    assert json.loads(capsys.readouterr().out)["key"] == hostile


async def test_an_error_quoting_a_name_cannot_act_on_the_terminal(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    client = ("--url", service.url, "--key", service.key)

    assert await run_cli("upload", "no\x1b[2Jsuch\x9b.txt", *client) == 2

    error = capsys.readouterr().err
    assert "no\\x1b[2Jsuch\\x9b.txt: no such file" in error
    assert "\x1b" not in error and "\x9b" not in error


def test_an_id_that_starts_with_a_dash_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    # Ids made before new_public_id stopped drawing a leading "-" exist: argparse
    # takes one for an option, and the user is told how to give it.
    with pytest.raises(SystemExit) as exited:
        main(["trash", "restore", "-abcdefghijklmnopqrstuvw"])
    assert exited.value.code == 2
    assert "teleuploader trash restore -- -abcdefghijklmnopqrstuvw" in capsys.readouterr().err
