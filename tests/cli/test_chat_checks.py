"""`teleuploader check` on the storage chats themselves (app/cli/chat_checks.py),
against the simulator: the right to pin snapshots (can_edit_messages), the
administrator cap, each chat's fill and the messages left in them for good."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from app.cli.chat_checks import CHANNEL_ADMIN_LIMIT, check_admin_count
from app.config.settings import BotToken
from app.db.chat_fill import ChatFillRepository
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import LeftMessage
from app.db.session import session_scope
from app.db.types import utcnow
from app.telegram.simulator import make_tokens
from tests.cli.test_main import run_cli, service_logs_elsewhere
from tests.running_service import CHAT_ID, Service

__all__ = ["service_logs_elsewhere"]  # the CLI's stdout stays the CLI's


@pytest.fixture
def check_env(service: Service, monkeypatch: pytest.MonkeyPatch) -> Service:
    monkeypatch.setenv("BOT_TOKENS", ",".join(service.sim.tokens))
    monkeypatch.setenv("STORAGE_CHAT_ID", str(CHAT_ID))
    monkeypatch.setenv("TELEGRAM_API_BASE", service.settings.telegram_api_base)
    monkeypatch.setenv("DATABASE_URL", service.settings.database_url)
    monkeypatch.setenv("CHAT_MESSAGE_LIMIT", "1000")
    return service


def words(text: str) -> str:
    return " ".join(text.split())


async def test_check_fails_while_snapshots_are_on_and_no_bot_may_pin(
    check_env: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = check_env.sim
    for bot_id in sim.bot_ids[1:]:
        sim.restrict(bot_id, CHAT_ID, can_edit_messages=False)
    assert await run_cli("check") == 0  # one bot may pin: enough
    out = words(capsys.readouterr().out)
    assert f"bots {sim.bot_ids[0]} may pin (can_edit_messages)" in out
    assert f"lacking can_edit_messages: {sim.bot_ids[1]}, {sim.bot_ids[2]}" in out

    sim.restrict(sim.bot_ids[0], CHAT_ID, can_edit_messages=False)
    assert await run_cli("check") == 1
    out = words(capsys.readouterr().out)
    assert f"No bot may pin in chat {CHAT_ID}" in out and "can_edit_messages" in out

    monkeypatch.setenv("SNAPSHOT_INTERVAL_SECONDS", "0")
    assert await run_cli("check") == 0
    assert "Snapshot pins: not needed" in capsys.readouterr().out


async def test_check_warns_of_a_chat_past_80_percent_and_fails_when_every_chat_is_full(
    check_env: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = create_engine(check_env.settings.database_url)
    sessionmaker = create_sessionmaker(engine)
    try:
        async with session_scope(sessionmaker) as session:
            await ChatFillRepository(session).raise_to({CHAT_ID: 850})
            # Two messages the GC could no longer delete.
            for message_id in (3, 4):
                session.add(
                    LeftMessage(
                        bot_id=7,
                        chat_id=CHAT_ID,
                        message_id=message_id,
                        file_unique_id="u",
                        reason="deleted",
                        why="past_window",
                        left_at=utcnow(),
                    )
                )

        assert await run_cli("check") == 0  # a warning, not a failure
        out = words(capsys.readouterr().out)
        assert f"Warning: Storage chat {CHAT_ID}: 850 of 1,000 messages (85 %)" in out
        assert "Messages left in the storage chats for good: 2" in out

        async with session_scope(sessionmaker) as session:
            await ChatFillRepository(session).raise_to({CHAT_ID: 1000})
        assert await run_cli("check") == 1
        out = words(capsys.readouterr().out)
        assert f"Storage chat {CHAT_ID}: 1,000 of 1,000 messages (100 %): full" in out
        assert "Every storage chat is full: uploads are refused (507)" in out
    finally:
        await engine.dispose()


def test_check_warns_when_bot_tokens_holds_more_bots_than_a_channel_takes_admins() -> None:
    printed = io.StringIO()
    console = Console(file=printed, width=10_000)
    tokens = [BotToken.parse(token) for token in make_tokens(CHANNEL_ADMIN_LIMIT + 1)]

    check_admin_count(SimpleNamespace(bot_tokens=tokens[:CHANNEL_ADMIN_LIMIT]), console)
    assert printed.getvalue() == ""
    check_admin_count(SimpleNamespace(bot_tokens=tokens), console)
    out = words(printed.getvalue())
    assert "BOT_TOKENS holds 51 bots, but a channel takes at most 50 administrators" in out
    assert "TOO_MANY_ADMIN" in out and "teldrive #258" in out
