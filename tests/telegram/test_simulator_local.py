"""The simulator as the official Bot API server (tdlib/telegram-bot-api)
behaves where the storage layer depends on it: its `--local` mode, getFile
as a download, and the answer it gives for every failed download.

Each test names the source it follows; docs/telegram.md lists them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from app.telegram.simulator.rules import FILE_UNAVAILABLE

CHAT_ID = -1001234567890
DATA = random.Random(3).randbytes(5000)


async def call(http: httpx.AsyncClient, token: str, method: str, **fields: Any) -> Any:
    answer = await http.post(f"/bot{token}/{method}", data=fields)
    return answer.json()


async def send(http: httpx.AsyncClient, token: str, data: bytes = DATA) -> dict[str, Any]:
    answer = await http.post(
        f"/bot{token}/sendDocument",
        data={"chat_id": str(CHAT_ID)},
        files={"document": ("a.bin", data, "application/octet-stream")},
    )
    result: dict[str, Any] = answer.json()["result"]
    return result


def contents(path: Path) -> bytes | None:
    """The bytes of a file on the simulated server's disk; None: not there."""
    return path.read_bytes() if path.is_file() else None


def simulator(**knobs: Any) -> TelegramSimulator:
    return TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID], **knobs))


@pytest.mark.parametrize("colon", [True, False])
async def test_a_local_server_answers_getfile_with_the_absolute_path_of_the_file_it_wrote(
    tmp_path: Path, colon: bool
) -> None:
    """Client.cpp: json_store_file answers `file->local_->path_` in local
    mode, under `dir_` = --dir + the token, ':' kept where the file system
    takes it, else '~' (Client::start_up; telegram-bot-api.cpp probes it)."""
    sim = simulator(local_dir=str(tmp_path), allow_colon_in_filenames=colon)
    token = sim.tokens[0]
    async with run_simulator(sim) as url, httpx.AsyncClient(base_url=url) as http:
        document = (await send(http, token))["document"]
        answer = await call(http, token, "getFile", file_id=document["file_id"])

    path = Path(answer["result"]["file_path"])
    bot_dir = token if colon else token.replace(":", "~")
    assert path.is_absolute()
    assert path.parent == tmp_path / bot_dir / "documents"
    assert contents(path) == DATA
    assert sim.local_files() == [path]


async def test_a_local_server_serves_no_files_and_answers_every_other_path_with_a_json_404(
    tmp_path: Path,
) -> None:
    """HttpConnection.cpp, handle: only paths under /bot are served; any
    other, /file/... included, is `send_http_error(404, "Not Found")`."""
    sim = simulator(local_dir=str(tmp_path))
    token = sim.tokens[0]
    async with run_simulator(sim) as url, httpx.AsyncClient(base_url=url) as http:
        document = (await send(http, token))["document"]
        path = (await call(http, token, "getFile", file_id=document["file_id"]))["result"]
        by_file_route = await http.get(f"/file/bot{token}/{path['file_path']}")
        elsewhere = await http.get("/anything")

    for answer in (by_file_route, elsewhere):
        assert answer.status_code == 404
        assert answer.json() == {"ok": False, "error_code": 404, "description": "Not Found"}


async def test_the_cloud_caps_getfile_and_a_local_server_does_not(tmp_path: Path) -> None:
    """Client.cpp, do_get_file: "file is too big" only `!local_mode_`."""
    answers = {}
    for name, knobs in (("cloud", {}), ("local", {"local_dir": str(tmp_path)})):
        sim = simulator(max_getfile_bytes=len(DATA) - 1, **knobs)
        token = sim.tokens[0]
        async with run_simulator(sim) as url, httpx.AsyncClient(base_url=url) as http:
            document = (await send(http, token))["document"]
            answers[name] = await call(http, token, "getFile", file_id=document["file_id"])

    assert answers["cloud"]["description"] == "Bad Request: file is too big"
    assert contents(Path(answers["local"]["result"]["file_path"])) == DATA


async def test_a_local_server_in_a_container_answers_its_own_paths_and_writes_to_the_volume(
    tmp_path: Path,
) -> None:
    """The path is the server's (its --dir); a volume shows the same file
    elsewhere on the host: what TELEGRAM_LOCAL_PATH_MAP is for."""
    sim = simulator(local_dir="/var/lib/telegram-bot-api", local_volume=str(tmp_path))
    token = sim.tokens[0]
    async with run_simulator(sim) as url, httpx.AsyncClient(base_url=url) as http:
        document = (await send(http, token))["document"]
        answer = await call(http, token, "getFile", file_id=document["file_id"])

    path = answer["result"]["file_path"]
    assert path.startswith(f"/var/lib/telegram-bot-api/{token}/documents/")
    on_volume = tmp_path / path.removeprefix("/var/lib/telegram-bot-api/")
    assert contents(on_volume) == DATA


async def test_a_local_file_the_storage_clean_up_took_is_downloaded_again_at_a_new_path(
    tmp_path: Path,
) -> None:
    """td's storage manager removes downloaded files (after an hour at the
    least: td StorageManager.h, FileGcParameters.cpp); the next getFile
    downloads the file again."""
    sim = simulator(local_dir=str(tmp_path))
    token = sim.tokens[0]
    async with run_simulator(sim) as url, httpx.AsyncClient(base_url=url) as http:
        file_id = (await send(http, token))["document"]["file_id"]
        first = (await call(http, token, "getFile", file_id=file_id))["result"]["file_path"]
        again = (await call(http, token, "getFile", file_id=file_id))["result"]["file_path"]
        assert sim.clean_local_storage() == 1
        later = (await call(http, token, "getFile", file_id=file_id))["result"]["file_path"]

    assert again == first
    assert later != first
    assert contents(Path(first)) is None
    assert contents(Path(later)) == DATA


@pytest.mark.parametrize("local", [False, True])
async def test_getfile_downloads_the_file_before_it_answers_unless_the_server_has_it(
    tmp_path: Path, local: bool
) -> None:
    """Client.cpp, do_get_file: getFile is td's downloadFile, answered once
    the whole file is on the server's disk; a file it has already is
    answered at once. The simulator counts the time it spent."""
    bandwidth = 1_000_000.0
    sim = simulator(getfile_bandwidth=bandwidth, **({"local_dir": str(tmp_path)} if local else {}))
    token = sim.tokens[0]
    async with run_simulator(sim) as url, httpx.AsyncClient(base_url=url) as http:
        file_id = (await send(http, token))["document"]["file_id"]
        await call(http, token, "getFile", file_id=file_id)
        after_first = sim.stats()[sim.bot_ids[0]].getfile_download_seconds
        await call(http, token, "getFile", file_id=file_id)
        after_second = sim.stats()[sim.bot_ids[0]].getfile_download_seconds

    assert after_first == pytest.approx(len(DATA) / bandwidth)
    assert after_second == after_first


async def test_a_failed_server_side_download_is_the_wrong_file_id_answer_and_the_file_stays(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    """Client.cpp, on_update_file: any download that did not complete is
    answered "wrong file_id or the file is temporarily unavailable" ("also
    includes all 5xx and 429 errors"); the file is still Telegram's."""
    token = sim.tokens[0]
    file_id = (await send(http, token))["document"]["file_id"]
    sim.configure(fault_file_unavailable_rate=1.0)
    failed = await http.post(f"/bot{token}/getFile", data={"file_id": file_id})
    sim.configure(fault_file_unavailable_rate=0.0)
    answered = await call(http, token, "getFile", file_id=file_id)

    assert failed.status_code == 400
    assert failed.json()["description"] == FILE_UNAVAILABLE
    assert answered["ok"] is True


async def test_a_bot_out_of_the_chat_its_file_id_came_from_cannot_have_the_file_downloaded(
    sim: TelegramSimulator, http: httpx.AsyncClient
) -> None:
    """The server downloads through the file's message, which a kicked bot
    cannot read (td's file reference repair; not in the Bot API server's
    source: unverified); a file it still has is answered."""
    first, second = sim.tokens[:2]
    kept = (await send(http, first))["document"]["file_id"]
    await call(http, first, "getFile", file_id=kept)
    never_fetched = (await send(http, first))["document"]["file_id"]
    sim.kick(sim.bot_ids[0], CHAT_ID)

    refused = await call(http, first, "getFile", file_id=never_fetched)
    still_kept = await call(http, first, "getFile", file_id=kept)

    assert refused["description"] == FILE_UNAVAILABLE
    assert still_kept["ok"] is True
    forwarded = await call(
        http,
        second,
        "forwardMessage",
        chat_id=str(CHAT_ID),
        from_chat_id=str(CHAT_ID),
        message_id="2",
    )
    through_another = await call(
        http, second, "getFile", file_id=forwarded["result"]["document"]["file_id"]
    )
    assert through_another["ok"] is True


def test_local_mode_is_refused_with_a_relative_dir_or_without_the_files() -> None:
    with pytest.raises(ValueError, match="absolute"):
        simulator(local_dir="relative/dir")
    with pytest.raises(ValueError, match="keep_file_bytes"):
        simulator(local_dir="/srv/tba", keep_file_bytes=False)
    with pytest.raises(ValueError, match="needs local_dir"):
        simulator(local_volume="/srv/tba")


def test_a_local_server_takes_uploads_up_to_2000_mb() -> None:
    """telegram-bot-api README, local mode: "Upload files up to 2000 MB"."""
    assert simulator(local_dir="/srv/tba").config.max_upload_bytes == 2000 * 1000 * 1000
    assert simulator().config.max_upload_bytes == 50 * 1024 * 1024
