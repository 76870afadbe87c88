"""`teleuploader check --deep` (app/cli/deep_check.py, app/cli/deep_advice.py)
against the simulator: one that honours Range, one that ignores it, one
that rate-limits, a local server; and the command's JSON, which holds no
token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.deep_check import measure
from app.cli.deep_report import DeepReport
from app.cli.main import main
from app.config.settings import BotToken, Settings
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens, run_simulator
from tests.db.helpers import Database

CHATS = [-1001000000501, -1001000000502]
CHUNK = 256 * 1024


def settings_for(sim: TelegramSimulator, url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "bot_tokens": [BotToken.parse(token) for token in sim.tokens],
        "storage_chat_ids": sim.chat_ids,
        "telegram_api_base": url,
        "chunk_size": CHUNK,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
def sim() -> TelegramSimulator:
    return TelegramSimulator(SimulatorConfig(tokens=make_tokens(2), chat_ids=CHATS))


@pytest.fixture
async def url(sim: TelegramSimulator) -> AsyncIterator[str]:
    async with run_simulator(sim) as base:
        yield base


def trials(report: DeepReport) -> list[Any]:
    return [
        trial
        for bot in report.bots
        for chat in bot.chats
        for trial in (chat.small, chat.large)
        if trial is not None
    ]


def suggested(report: DeepReport) -> dict[str, str]:
    return {suggestion.setting: suggestion.value for suggestion in report.suggestions}


async def test_every_bot_posts_reads_and_deletes_two_documents_in_every_chat(
    sim: TelegramSimulator, url: str
) -> None:
    report = await measure(settings_for(sim, url))

    assert report.ok, [bot.problems for bot in report.bots]
    assert [bot.bot_id for bot in report.bots] == sim.bot_ids
    for bot in report.bots:
        assert bot.latency_seconds is not None and bot.upload_bandwidth and bot.download_bandwidth
        assert [chat.chat_id for chat in bot.chats] == CHATS
        for chat in bot.chats:
            assert chat.rights["status"] == "administrator"
            assert chat.rights["can_post_messages"] is True
    assert {trial.size for trial in trials(report)} == {64 * 1024, CHUNK}
    for trial in trials(report):
        assert (trial.intact, trial.range, trial.deleted) == (True, "honoured", True)
    assert all(not sim.live_messages(chat) for chat in CHATS)  # nothing left behind
    # Two chats and two working bots: two copies.
    assert suggested(report)["REPLICAS"] == "2"
    assert suggested(report)["SENDS_PER_MINUTE"] == "20"
    assert int(suggested(report)["CHUNK_SIZE"]) <= 19 * 1024 * 1024
    assert "DOWNLOAD_BUFFER_BYTES" not in suggested(report)


async def test_a_file_server_that_ignores_range_is_reported_with_what_to_set(
    sim: TelegramSimulator, url: str
) -> None:
    sim.configure(honour_range=False)

    report = await measure(settings_for(sim, url))

    assert {trial.range for trial in trials(report)} == {"ignored"}
    assert all(trial.intact for trial in trials(report))
    assert int(suggested(report)["DOWNLOAD_BUFFER_BYTES"]) >= 4 * CHUNK


async def test_every_429_is_reported_with_its_retry_after_and_waited_out(
    sim: TelegramSimulator, url: str
) -> None:
    """One upload a minute per bot and chat: each second document meets a
    429, which the check waits out (here the simulator's clock moves by
    what was asked) and reports."""
    sim.configure(sends_per_minute=1)
    waited: list[float] = []

    async def pause(seconds: float) -> None:
        waited.append(seconds)
        sim.advance_clock(seconds)

    report = await measure(settings_for(sim, url), pause=pause)

    assert report.ok
    limits = [(limit.method, limit.chat_id) for bot in report.bots for limit in bot.rate_limits]
    assert sorted(limits) == sorted(("sendDocument", chat) for _ in sim.bot_ids for chat in CHATS)
    reported = [limit.retry_after for bot in report.bots for limit in bot.rate_limits]
    assert waited == reported and all(0 < wait <= 60 for wait in waited)
    assert suggested(report)["SENDS_PER_MINUTE"] == "10"
    assert all(trial.intact and trial.deleted for trial in trials(report))


async def test_a_local_server_is_read_from_its_disk(tmp_path: Path) -> None:
    sim = TelegramSimulator(
        SimulatorConfig(tokens=make_tokens(1), chat_ids=CHATS[:1], local_dir=str(tmp_path))
    )
    async with run_simulator(sim) as url:
        report = await measure(settings_for(sim, url, telegram_local_server=True))

    assert report.ok and report.local_server
    assert all((trial.intact, trial.range) == (True, "honoured") for trial in trials(report))
    # One chat, one bot: one copy, and what to add for two.
    assert suggested(report)["REPLICAS"] == "1"


async def test_check_deep_json_is_the_report_without_any_token(
    sim: TelegramSimulator,
    url: str,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("BOT_TOKENS", ",".join(sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_IDS", ",".join(str(chat) for chat in CHATS))
    monkeypatch.setenv("TELEGRAM_API_BASE", url)
    monkeypatch.setenv("DATABASE_URL", database.url)
    monkeypatch.setenv("CHUNK_SIZE", str(CHUNK))
    monkeypatch.setenv("SPOOL_MAX_BYTES", "0")

    status = await asyncio.to_thread(main, ["check", "--deep", "--json"])

    out, err = capsys.readouterr()
    report = json.loads(out)
    assert status == 0, err
    assert report["ok"] is True
    assert [bot["bot_id"] for bot in report["bots"]] == sim.bot_ids
    assert all(bot["upload_bytes_per_second"] > 0 for bot in report["bots"])
    assert "Suggested settings" in err
    for token in sim.tokens:
        secret = BotToken.parse(token).secret
        assert secret not in out and secret not in err
    assert await asyncio.to_thread(main, ["check", "--json"]) == 2  # --json goes with --deep
