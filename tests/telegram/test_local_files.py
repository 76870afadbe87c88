"""Reading a local Bot API server's files (app/telegram/local_files.py):
through the client, against the simulator in `--local` mode (it writes the
files getFile answers for, under a directory named after the token), and
the path rules alone."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from app.config.settings import BotToken
from app.telegram.client import BotClient
from app.telegram.errors import FilesUnreachable, PermanentError, TransientError
from app.telegram.local_files import READ_PIECE, LocalFiles
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from tests.running_service import CHAT_ID as CHAT
from tests.running_service import Service, ServiceFactory

CHAT_ID = -1001234567890
DATA = random.Random(11).randbytes(3 * READ_PIECE + 123)
TOKEN = BotToken.parse(make_tokens(1)[0])


async def read(client: BotClient, path: str, offset: int = 0, end: int | None = None) -> bytes:
    async with client.open_file_at(path, offset, end) as (start, body):
        assert start == offset
        return b"".join([piece async for piece in body])


@pytest.mark.parametrize("colon", [True, False])
async def test_a_local_file_is_read_from_the_disk_whole_and_by_a_seek(
    tmp_path: Path, colon: bool
) -> None:
    sim = TelegramSimulator(
        SimulatorConfig(
            tokens=[TOKEN.value],
            chat_ids=[CHAT_ID],
            local_dir=str(tmp_path),
            allow_colon_in_filenames=colon,
        )
    )
    async with run_simulator(sim) as url:
        client = BotClient(TOKEN, api_base=url, local_files=LocalFiles())
        try:
            stored = await client.send_document(CHAT_ID, DATA, "a.bin")
            location = await client.get_file(stored.file_id)
            whole = await read(client, location.file_path)
            middle = await read(client, location.file_path, READ_PIECE + 5, 2 * READ_PIECE + 9)
            tail = await read(client, location.file_path, len(DATA) - 10)
        finally:
            await client.aclose()

    # What the rest of the service sees: the path after the bot's directory.
    assert location.file_path.startswith("documents/")
    assert TOKEN.secret not in location.file_path
    assert whole == DATA
    assert middle == DATA[READ_PIECE + 5 : 2 * READ_PIECE + 9]
    assert tail == DATA[-10:]


async def test_the_path_map_reads_a_containers_files_where_this_machine_sees_them(
    tmp_path: Path,
) -> None:
    sim = TelegramSimulator(
        SimulatorConfig(
            tokens=[TOKEN.value],
            chat_ids=[CHAT_ID],
            local_dir="/var/lib/telegram-bot-api",
            local_volume=str(tmp_path),
        )
    )
    async with run_simulator(sim) as url:
        unmapped = BotClient(TOKEN, api_base=url, local_files=LocalFiles())
        mapped = BotClient(
            TOKEN,
            api_base=url,
            local_files=LocalFiles(("/var/lib/telegram-bot-api", str(tmp_path))),
        )
        try:
            stored = await mapped.send_document(CHAT_ID, DATA, "a.bin")
            location = await mapped.get_file(stored.file_id)
            assert await read(mapped, location.file_path) == DATA
            await unmapped.get_file(stored.file_id)
            # Without the map the server's path is looked for here, in vain.
            with pytest.raises(PermanentError) as caught:
                await read(unmapped, location.file_path)
        finally:
            await mapped.aclose()
            await unmapped.aclose()
    assert caught.value.status == 404


def test_a_path_outside_the_bots_directory_is_refused_without_quoting_it() -> None:
    files = LocalFiles()
    other = make_tokens(2)[1]
    for path in (
        f"/srv/tba/{other}/documents/file_1.bin",
        f"/srv/tba/{TOKEN.value}/../{other}/documents/file_1.bin",
        f"/srv/tba/{TOKEN.value}/",
    ):
        with pytest.raises(FilesUnreachable) as caught:
            files.relative(TOKEN, path)
        assert "outside the bot's directory" in str(caught.value)
        assert TOKEN.secret not in str(caught.value) and "srv" not in str(caught.value)
    with pytest.raises(FilesUnreachable, match="TELEGRAM_LOCAL_SERVER=false"):
        files.relative(TOKEN, "documents/file_1.bin")


def test_a_mapped_path_outside_the_servers_dir_is_a_configuration_error() -> None:
    files = LocalFiles(("/var/lib/telegram-bot-api", "/srv/tba"))
    relative = files.relative(TOKEN, f"/data/{TOKEN.value}/documents/file_1.bin")
    with pytest.raises(FilesUnreachable, match="TELEGRAM_LOCAL_PATH_MAP's SERVER_DIR"):
        files.local_path(TOKEN, relative)


def test_the_map_alone_tells_where_files_are_before_any_getfile_here() -> None:
    """Another instance's getFile may find a path (shared through the
    database) before this one made any: with the map it needs none."""
    relative = "documents/file_1.bin"
    with pytest.raises(TransientError, match="TELEGRAM_LOCAL_PATH_MAP"):
        LocalFiles().local_path(TOKEN, relative)
    mapped = LocalFiles(("/var/lib/telegram-bot-api", "/srv/tba"))
    assert mapped.local_path(TOKEN, relative) == f"/srv/tba/{TOKEN.value}/{relative}"


async def test_a_file_this_user_may_not_read_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = LocalFiles((str(tmp_path), str(tmp_path)))

    def refused(path: str, flags: int) -> int:
        # As the kernel answers a user outside the server's group (these
        # tests run as root, who may read anything).
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(FilesUnreachable, match="permission denied") as caught:
        async with files.open_at(TOKEN, "documents/file_1.bin", 0):
            pass
    assert TOKEN.secret not in str(caught.value)


# --- a service on a local server ---------------------------------------------------------

MiB = 1024 * 1024
BIG_CHUNK = 21 * MiB  # above the cloud's getFile cap, 20 MiB (Client.h)


@pytest.mark.parametrize("mapped", [False, True])
async def test_a_service_on_a_local_server_serves_chunks_above_20_mib_byte_exact(
    start_service: ServiceFactory, tmp_path: Path, mapped: bool
) -> None:
    """The whole stack in local mode: uploads of 21 MiB chunks, then
    downloads and Range reads (across the chunks' boundary, deep in the
    first) read from the server's directory on disk, with and without
    TELEGRAM_LOCAL_PATH_MAP. No path the service keeps holds a token."""
    volume = tmp_path / "telegram-bot-api"
    server_dir = "/var/lib/telegram-bot-api" if mapped else str(volume)
    sim = TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(2),
            chat_ids=[CHAT],
            local_dir=server_dir,
            local_volume=str(volume) if mapped else None,
        )
    )
    path_map = (server_dir, str(volume)) if mapped else None
    service = await start_service(
        sim=sim,
        telegram_local_server=True,
        telegram_local_path_map=path_map,
        chunk_size=BIG_CHUNK,
        max_upload_size=64 * MiB,
        upload_buffer_chunks=2,
    )
    data = random.Random(5).randbytes(BIG_CHUNK + 300_000)
    async with service.client() as http:
        stored = await http.put("/api/files/big.bin", content=data, headers=service.auth)
        assert stored.status_code == 201, stored.text
        public_id = stored.json()["public_id"]
        whole = await http.get(f"/f/{public_id}")
        ranges = [(BIG_CHUNK - 1000, BIG_CHUNK + 999), (7 * MiB + 3, 7 * MiB + 70_000)]
        parts = [
            await http.get(f"/f/{public_id}", headers={"Range": f"bytes={first}-{last}"})
            for first, last in ranges
        ]

    assert whole.status_code == 200
    assert hashlib.sha256(whole.content).digest() == hashlib.sha256(data).digest()
    for (first, last), part in zip(ranges, parts, strict=True):
        assert part.status_code == 206
        assert part.content == data[first : last + 1]
    # The files read are the server's own, in the directory of each token.
    assert len(sim.local_files()) == 2
    secrets = [BotToken.parse(token).secret for token in sim.tokens]
    assert not any(secret.encode() in database_bytes(service) for secret in secrets)


def database_bytes(service: Service) -> bytes:
    """Every byte of the service's SQLite database (its write-ahead log
    too); Postgres keeps its own elsewhere: nothing to read here."""
    url = make_url(service.settings.database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        return b""
    database = Path(url.database)
    return b"".join(path.read_bytes() for path in database.parent.glob(database.name + "*"))
