"""The `teleuploader` command: client commands against a running service,
`check` against the simulator, and one-line errors."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from rich.console import Console

from app.cli.durability import check_durability
from app.cli.main import main
from app.kit.logging import configure_logging
from tests.running_service import CHAT_ID, CHUNK, Service, eventually


@pytest.fixture(autouse=True)
def service_logs_elsewhere() -> Iterator[io.StringIO]:
    """The service runs in this process: its log lines must not mix with what
    the CLI prints on stdout, which these tests read."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    output = io.StringIO()
    configure_logging("WARNING", "json", stream=output)
    yield output
    root.handlers[:], level = saved
    root.setLevel(level)
    structlog.reset_defaults()


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
    # The link alone on stdout, as `URL=$(teleuploader upload f)` takes it.
    link = capsys.readouterr().out.strip()
    assert link.startswith(f"{service.url}/f/")
    target = tmp_path / "copy.jpg"
    status = await run_cli("download", link, "-o", str(target), "--url", service.url)
    assert status == 0
    assert (
        hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )
    printed = capsys.readouterr()
    assert printed.out.strip() == str(target)
    assert "SHA-256 verified" in printed.err


async def test_upload_json_gives_each_file_on_a_line_of_stdout(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.bin", tmp_path / "b.txt"
    first.write_bytes(bytes(2 * CHUNK))
    second.write_text("small")

    status = await run_cli(
        "upload", str(first), str(second), "--json", "--url", service.url, "--key", service.key
    )

    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    files = [json.loads(line) for line in lines]
    assert [f["file_name"] for f in files] == ["a.bin", "b.txt"]
    assert [f["path"] for f in files] == [str(first), str(second)]
    assert [f["size_bytes"] for f in files] == [2 * CHUNK, 5]
    assert all(f["download_url"] == f"{service.url}/f/{f['public_id']}" for f in files)


async def test_download_refuses_to_overwrite_without_force(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "new.bin"
    source.write_bytes(bytes(range(256)) * (CHUNK // 128))
    assert await run_cli("upload", str(source), "--url", service.url, "--key", service.key) == 0
    link = capsys.readouterr().out.strip()
    existing = tmp_path / "mine.bin"
    existing.write_text("my own work")

    status = await run_cli("download", link, "-o", str(existing), "--url", service.url)

    assert status == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"teleuploader: error: {existing} exists: pass --force to overwrite it, "
        "or -o to save elsewhere"
    )
    assert existing.read_text() == "my own work"

    status = await run_cli("download", link, "-o", str(existing), "--force", "--url", service.url)
    assert status == 0
    assert existing.read_bytes() == source.read_bytes()


async def test_upload_of_a_directory_refuses_in_one_line_or_uploads_it_with_recursive(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "photos"
    (folder / "2026").mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"a" * 100)
    (folder / "2026" / "b.jpg").write_bytes(b"b" * 200)

    status = await run_cli("upload", str(folder), "--url", service.url, "--key", service.key)

    assert status == 2
    assert capsys.readouterr().err == (
        f"teleuploader: error: {folder} is a directory: pass --recursive to upload "
        "every file under it\n"
    )

    status = await run_cli(
        "upload", str(folder), "-r", "--json", "--url", service.url, "--key", service.key
    )
    assert status == 0
    files = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((f["path"], f["size_bytes"]) for f in files) == [
        (str(folder / "2026" / "b.jpg"), 200),
        (str(folder / "a.jpg"), 100),
    ]


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


async def test_check_prints_whole_values_when_its_output_is_not_a_terminal(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # capsys is not a terminal: the way deploy/README.md runs it (systemd-run --pipe).
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_ID", str(CHAT_ID))
    monkeypatch.setenv("TELEGRAM_API_BASE", service.settings.telegram_api_base)
    monkeypatch.setenv("COLUMNS", "60")
    service.sim.kick(service.sim.bot_ids[0], CHAT_ID)

    assert await run_cli("check") == 1

    out = capsys.readouterr().out
    kicked = next(line for line in out.splitlines() if str(service.sim.bot_ids[0]) in line)
    assert str(CHAT_ID) in kicked
    assert "Forbidden: bot was kicked from the channel chat" in kicked
    assert "…" not in out


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


async def test_check_prints_the_bytes_waiting_for_telegram_and_the_oldest_age(
    service: Service,
) -> None:
    tus = {**service.auth, "Tus-Resumable": "1.0.0"}
    segment = CHUNK // 2  # one spooled segment of an unfinished tus upload
    printed = io.StringIO()

    with service.sim.holding("sendDocument"):
        async with service.client() as http:
            created = await http.post("/api/tus/", headers={**tus, "Upload-Length": str(CHUNK)})
            patched = await http.patch(
                created.headers["location"],
                content=bytes(segment),
                headers={
                    **tus,
                    "Upload-Offset": "0",
                    "Content-Type": "application/offset+octet-stream",
                },
            )
        assert patched.status_code == 204
        await asyncio.sleep(1.1)
        # What `teleuploader check` prints after the bots' tables (which would
        # call the bots while their sends are held here).
        assert await check_durability(service.settings, Console(file=printed, width=200))

    lag = next(line for line in printed.getvalue().splitlines() if line.startswith("spool:"))
    waiting = lag.split("the oldest waiting ")[1].split(" s")[0]
    assert f"spool: {segment} bytes not yet in Telegram" in lag
    assert int(waiting) >= 1


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


@pytest.mark.parametrize("given", [["--tls-cert", "cert.pem"], ["--tls-key", "key.pem"]])
def test_the_simulators_tls_flags_come_in_pairs(
    given: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["telegram-sim", *given]) == 2
    assert capsys.readouterr().err == (
        "teleuploader: error: --tls-cert and --tls-key go together: give both to serve HTTPS\n"
    )


@pytest.mark.parametrize(("given", "kept"), [([], True), (["--discard-file-bytes"], False)])
def test_the_simulator_discards_file_bytes_only_when_told(
    given: list[str], kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[dict[str, object]] = []
    monkeypatch.setattr(
        "app.telegram.simulator.main_simulator", lambda **options: started.append(options)
    )

    assert main(["telegram-sim", *given]) == 0
    assert [options["keep_file_bytes"] for options in started] == [kept]


def test_the_simulator_acts_as_a_local_server_in_the_directory_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[dict[str, object]] = []
    monkeypatch.setattr(
        "app.telegram.simulator.main_simulator", lambda **options: started.append(options)
    )
    monkeypatch.chdir(tmp_path)

    assert main(["telegram-sim", "--local-dir", "tba", "--getfile-bandwidth", "1e6"]) == 0
    assert main(["telegram-sim"]) == 0

    local, cloud = started
    assert (local["local_dir"], local["getfile_bandwidth"]) == (str(tmp_path / "tba"), 1e6)
    assert cloud["local_dir"] is None


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
