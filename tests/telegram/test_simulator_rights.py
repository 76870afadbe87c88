"""The simulator's rules that follow the official Bot API server on rights,
time windows and upload spacing (app/telegram/simulator/rules.py), over real
HTTP through the project's BotClient:

- pinning in a channel takes can_edit_messages (td DialogManager.cpp);
- a caption edit without can_edit_messages: the bot's own post only, for
  two days (td MessagesManager.cpp, can_edit_message);
- a deletion within 48 hours of each message's own posting, whatever
  happened since (td MessagesManager.cpp, can_delete_channel_message);
- uploads of one bot with the same total size are spaced, and refused with
  429 "retry after 60" once their schedule runs 5 s ahead
  (telegram-bot-api Client.cpp, on_cmd).
"""

from __future__ import annotations

import pytest

from app.telegram.client import BotClient
from app.telegram.errors import PermanentError, RateLimited
from app.telegram.simulator import TelegramSimulator
from tests.telegram.conftest import CHAT_ID

HOUR = 3600.0


async def test_pinning_takes_can_edit_messages_and_getchatmember_reports_it(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.restrict(sim.bot_ids[0], CHAT_ID, can_edit_messages=False)
    manifest = await bots[0].send_document(CHAT_ID, b"manifest", "m.json")  # posting stays

    with pytest.raises(PermanentError, match="not enough rights to manage pinned messages"):
        await bots[0].pin_chat_message(CHAT_ID, manifest.message_id)
    member = await bots[0].get_chat_member(CHAT_ID, sim.bot_ids[0])
    assert member.is_admin and member.can_post_messages and not member.can_edit_messages
    assert await bots[1].pinned_document(CHAT_ID) is None

    # Another administrator with the right pins any post, the first bot's too.
    await bots[1].pin_chat_message(CHAT_ID, manifest.message_id)
    pinned = await bots[0].pinned_document(CHAT_ID)
    assert pinned is not None and pinned.message_id == manifest.message_id
    assert (await bots[1].get_chat_member(CHAT_ID, sim.bot_ids[1])).can_edit_messages

    sim.unkick(sim.bot_ids[0], CHAT_ID)  # every right back
    await bots[0].unpin_chat_message(CHAT_ID, manifest.message_id)


async def test_without_can_edit_messages_a_bot_edits_its_own_captions_for_two_days(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    own = await bots[0].send_document(CHAT_ID, b"own", "o.json")
    others = await bots[1].send_document(CHAT_ID, b"other", "x.json")
    sim.restrict(sim.bot_ids[0], CHAT_ID, can_edit_messages=False)

    await bots[0].edit_message_caption(CHAT_ID, own.message_id, "one")
    with pytest.raises(PermanentError, match="message can't be edited"):
        await bots[0].edit_message_caption(CHAT_ID, others.message_id, "one")
    sim.advance_clock(48 * HOUR + 301)
    with pytest.raises(PermanentError, match="message can't be edited"):
        await bots[0].edit_message_caption(CHAT_ID, own.message_id, "two")
    # With the right, age does not matter.
    await bots[1].edit_message_caption(CHAT_ID, own.message_id, "two")


async def test_the_delete_window_counts_from_each_messages_own_posting(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    first = await bots[0].send_document(CHAT_ID, b"first", "a.bin")
    sim.advance_clock(47 * HOUR)
    second = await bots[0].send_document(CHAT_ID, b"second", "b.bin")
    sim.advance_clock(1 * HOUR)  # the first is 48 h old now, the second 1 h

    with pytest.raises(PermanentError, match="message can't be deleted"):
        await bots[0].delete_message(CHAT_ID, first.message_id)
    await bots[0].delete_message(CHAT_ID, second.message_id)
    assert sim.live_messages(CHAT_ID) == [first.message_id]


async def test_without_can_delete_messages_a_bot_deletes_only_its_own_posts(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    own = await bots[0].send_document(CHAT_ID, b"own", "a.bin")
    others = await bots[1].send_document(CHAT_ID, b"other", "b.bin")
    sim.restrict(sim.bot_ids[0], CHAT_ID, can_delete_messages=False)

    with pytest.raises(PermanentError, match="message can't be deleted"):
        await bots[0].delete_message(CHAT_ID, others.message_id)
    await bots[0].delete_message(CHAT_ID, own.message_id)
    assert not (await bots[0].get_chat_member(CHAT_ID, sim.bot_ids[0])).can_delete_messages


def test_restricting_an_unknown_right_is_refused(sim: TelegramSimulator) -> None:
    with pytest.raises(ValueError, match="can_fly"):
        sim.restrict(sim.bot_ids[0], CHAT_ID, can_fly=False)


# --- the spacing of equal uploads ------------------------------------------------------

SIZE = 200_000  # spaced by clamp(200,000 * 1e-7, 0.2, 0.9) = 0.2 s


def test_equal_uploads_of_one_bot_are_spaced_and_refused_once_5_s_ahead(
    sim: TelegramSimulator,
) -> None:
    sim.configure(upload_spacing=True)
    bot, other = sim.bot_ids[:2]
    # All arriving at once, as uploads on one token in parallel would: a
    # second of burst, then 0.2 s apart, until the schedule is past 5 s.
    waits = []
    while True:
        try:
            waits.append(sim._space_upload(bot, SIZE))
        except Exception as refused:
            assert getattr(refused, "status", None) == 429
            assert getattr(refused, "retry_after", None) == 60
            break
    assert waits[:6] == [0.0] * 6  # a second's worth of them
    assert waits[6] == pytest.approx(0.2, abs=0.05)
    assert waits[-1] == pytest.approx(5.2, abs=0.05) and len(waits) == 32
    # Other sizes, other bots and small files have schedules of their own (none).
    assert sim._space_upload(bot, SIZE + 1) == 0.0
    assert sim._space_upload(other, SIZE) == 0.0
    assert sim._space_upload(bot, 100_000) == 0.0
    # The largest spacing is 0.9 s (a 19 MiB chunk's).
    big = 19 * 1024 * 1024
    assert [sim._space_upload(other, big) for _ in range(3)][2] == pytest.approx(0.8, abs=0.05)


def test_one_upload_at_a_time_is_spaced_but_never_refused(sim: TelegramSimulator) -> None:
    sim.configure(upload_spacing=True)
    bot = sim.bot_ids[0]
    for _ in range(100):
        # Each arrives once the one before was answered, after its wait.
        wait = sim._space_upload(bot, SIZE)
        sim.advance_clock(wait + 0.01)
        assert wait <= 0.2 + 1e-6


async def test_a_refused_equal_upload_answers_429_retry_after_60_and_stores_nothing(
    sim: TelegramSimulator, bots: list[BotClient]
) -> None:
    sim.configure(upload_spacing=True)
    bot = sim.bot_ids[0]
    for _ in range(32):  # 32 uploads of that size in flight on the token
        sim._space_upload(bot, SIZE)

    with pytest.raises(RateLimited) as refused:
        await bots[0].send_document(CHAT_ID, b"x" * SIZE, "a.bin")

    assert refused.value.retry_after == 60
    assert sim.live_messages(CHAT_ID) == [] and sim.stats()[bot].rate_limited == 1
    # Another size goes through at once; so does the same size on another bot.
    await bots[0].send_document(CHAT_ID, b"x" * (SIZE - 1), "b.bin")
    await bots[1].send_document(CHAT_ID, b"x" * SIZE, "c.bin")
    assert len(sim.live_messages(CHAT_ID)) == 2
