"""`keep_file_bytes=False` (`telegram-sim --discard-file-bytes`): the ingest
benches' simulator answers uploads as usual and keeps no bytes, and any read
of a file says so instead of serving something else."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from app.telegram.client import BotClient
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens
from app.telegram.simulator.persistent import PersistentSimulator
from tests.telegram.conftest import CHAT_ID

DATA = random.Random(3).randbytes(200_000)


@pytest.fixture
def sim() -> TelegramSimulator:
    config = SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID], keep_file_bytes=False)
    return TelegramSimulator(config)


async def test_an_upload_is_answered_with_its_size_and_its_download_says_why_it_is_gone(
    bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_ID, DATA, "chunk.bin")
    location = await bots[0].get_file(stored.file_id)

    answer = await http.get(f"/file/bot{bots[0].token.value}/{location.file_path}")

    assert (stored.size, location.file_size) == (len(DATA), len(DATA))
    assert answer.status_code == 404
    assert "--discard-file-bytes" in answer.json()["description"]
    assert DATA[:64] not in answer.content


async def test_the_control_api_says_why_it_has_no_bytes(
    bots: list[BotClient], http: httpx.AsyncClient
) -> None:
    stored = await bots[0].send_document(CHAT_ID, DATA, "chunk.bin")

    one = await http.get(f"/_sim/files/{CHAT_ID}/{stored.message_id}")
    listing = await http.get("/_sim/files")

    for answer in (one, listing):
        assert answer.status_code == 404
        assert "--discard-file-bytes" in answer.json()["description"]


def test_a_simulator_that_keeps_its_chats_refuses_to_drop_their_bytes(tmp_path: Path) -> None:
    config = SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID], keep_file_bytes=False)

    with pytest.raises(ValueError, match="keep their files' bytes"):
        PersistentSimulator(config, tmp_path)


def test_the_knob_is_a_boolean() -> None:
    with pytest.raises(ValueError, match="keep_file_bytes"):
        SimulatorConfig(tokens=make_tokens(1), chat_ids=[CHAT_ID], keep_file_bytes="no")  # type: ignore[arg-type]
