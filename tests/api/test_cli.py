"""The `teleuploader` command: client commands against a running service,
`check` against the simulator, and one-line errors."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from app.cli import main
from tests.running_service import CHAT_ID, CHUNK, Service, eventually


async def run_cli(*args: str) -> int:
    # The CLI is synchronous; the service runs on this test's event loop.
    return await asyncio.to_thread(main, list(args))


async def test_upload_then_download_round_trip(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "photo.jpg"
    source.write_bytes(bytes(range(256)) * (3 * CHUNK // 256 + 7))

    status = await run_cli("upload", str(source), "--url", service.url, "--key", service.key)

    assert status == 0
    printed = capsys.readouterr().err
    link = next(word for word in printed.split() if "/f/" in word)
    assert link.startswith(service.url)
    target = tmp_path / "copy.jpg"
    status = await run_cli("download", link, "-o", str(target), "--url", service.url)
    assert status == 0
    assert (
        hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )
    assert "SHA-256 verified" in capsys.readouterr().err


async def test_upload_without_a_key_is_one_line(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "a.txt"
    source.write_text("hello")

    status = await run_cli("upload", str(source), "--url", service.url, "--key", "tu_wrong")

    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "teleuploader: error: upload of "
        f"{source}: the server answered 401 (unauthorized: the API key is unknown or revoked)"
    )


async def test_download_of_an_unknown_id_is_one_line(
    service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    status = await run_cli("download", "no-such-id", "--url", service.url)

    assert status == 2
    assert "404" in capsys.readouterr().err.strip().splitlines()[-1]


async def test_check_lists_bots_and_fails_on_a_kicked_one(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_ID", str(CHAT_ID))
    monkeypatch.setenv("TELEGRAM_API_BASE", service.settings.telegram_api_base)

    assert await run_cli("check") == 0
    healthy = capsys.readouterr().out
    assert all(str(bot_id) in healthy for bot_id in service.sim.bot_ids)

    service.sim.kick(service.sim.bot_ids[1], CHAT_ID)
    assert await run_cli("check") == 1
    table = capsys.readouterr().out
    assert "kicked" in table
    assert not any(token.split(":")[1] in table for token in service.sim.tokens)


async def test_check_reports_the_upload_budget_and_the_spool(
    service: Service,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_ID", str(CHAT_ID))
    monkeypatch.setenv("TELEGRAM_API_BASE", service.settings.telegram_api_base)
    monkeypatch.setenv("CHUNK_SIZE", str(2 * 1024 * 1024))
    monkeypatch.setenv("SPOOL_DIR", str(tmp_path / "spool"))

    assert await run_cli("check") == 0
    out = " ".join(capsys.readouterr().out.split())
    # 3 bots: 2 x 3 + 2 buffers of 2 MiB.
    assert "Upload budget: 8 buffers x CHUNK_SIZE 2 MiB = 16 MiB" in out
    assert f"Spool: {tmp_path / 'spool'}, up to 8.0 GiB" in out

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("SPOOL_DIR", str(blocked / "spool"))
    assert await run_cli("check") == 1
    assert "cannot be created or written" in capsys.readouterr().out


async def test_check_warns_of_posts_the_service_did_not_make(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_ID", str(CHAT_ID))
    monkeypatch.setenv("TELEGRAM_API_BASE", service.settings.telegram_api_base)
    monkeypatch.setenv("DATABASE_URL", service.settings.database_url)
    body = bytes(range(256)) * (2 * CHUNK // 256 + 3)  # three chunks

    assert await run_cli("check") == 0
    assert "none to judge yet" in capsys.readouterr().out

    async with service.client(headers=service.auth) as client:
        assert (await client.put("/api/files/a.bin", content=body)).status_code == 201
        assert await run_cli("check") == 0
        assert f"Foreign posts in chat {CHAT_ID}: none (" in capsys.readouterr().out

        service.sim.post_foreign(CHAT_ID)
        # The service's own messages after it, deleted since: their rows are
        # gone, yet they are not foreign.
        stored = await client.put("/api/files/b.bin", content=body)
        assert stored.status_code == 201
        live_with_b = len(service.live_messages())
        deleted = await client.delete(f"/api/files/{stored.json()['public_id']}")
        assert deleted.status_code == 204

        async def b_is_gone() -> bool:
            return len(service.live_messages()) == live_with_b - 3

        await eventually(b_is_gone)
        service.sim.post_foreign(CHAT_ID)

    for _ in range(2):  # the check's own probes are not counted the next time
        live_before = service.live_messages()
        assert await run_cli("check") == 0  # a warning, not a failure
        out = " ".join(capsys.readouterr().out.split())
        assert f"storage chat {CHAT_ID} holds 2 post(s) the service did not make" in out
        assert service.live_messages() == live_before  # its probe is deleted


def test_serve_without_tokens_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("BOT_TOKENS", "BOT_TOKEN", "STORAGE_CHAT_ID"):
        monkeypatch.delenv(name, raising=False)

    assert main(["serve"]) == 2
    assert capsys.readouterr().err == (
        "teleuploader: error: BOT_TOKENS is not set: give at least one bot token\n"
    )


def test_keys_on_an_unmigrated_database_say_to_migrate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'new.db'}")

    assert main(["keys", "create", "ci"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "run `teleuploader migrate`" in err


def test_keys_create_list_revoke(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'k.db'}")
    assert main(["migrate"]) == 0
    assert main(["keys", "create", "laptop"]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    assert key.startswith("tu_") and len(key) > 30

    assert main(["keys", "create", "backup-reader", "--scope", "read"]) == 0
    capsys.readouterr()

    assert main(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert key not in listing
    rows = {line.split()[0]: line.split() for line in listing.splitlines()}
    # A new key writes (its own files) unless asked for another scope.
    assert rows["laptop"][2] == "write" and rows["laptop"][-1] == "active"
    assert rows["backup-reader"][2] == "read"

    assert main(["keys", "revoke", "laptop"]) == 0
    assert main(["keys", "revoke", "laptop"]) == 2
    assert main(["keys", "create", "laptop"]) == 2


def test_keys_create_refuses_an_unknown_scope(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'k.db'}")
    with pytest.raises(SystemExit) as exited:
        main(["keys", "create", "x", "--scope", "root"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'root' (choose from 'read', 'write', 'admin')" in err


@pytest.mark.parametrize(
    "command", [[], ["serve"], ["upload"], ["download"], ["check"], ["keys"], ["telegram-sim"]]
)
def test_help_works_for_every_command(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    assert "usage: teleuploader" in capsys.readouterr().out
