"""Checking the bots (getMe, then getChatMember in every storage chat)
without holding up the service.

At startup every bot is checked before it joins the pool, each in its own
task, and a bot whose check fails for a passing reason (timeouts, 5xx, 429) is
checked again with backoff for as long as the service runs. So the service
answers `/health` at once, `/ready` as soon as one bot passed, and a bot that
Telegram lets through only later joins the pool then. A token Telegram
rejects (401/403, or another 4xx) is reported once and left out for good.

A bot is admitted for the storage chats where it is an administrator that
may post (getChatMember); new chunks go to those chats only. A chat that
refuses it (kicked, not an admin, no such chat) is reported once and left out
for that bot; a bot that no chat takes is checked again later, as an admin
may still add it. The reads and deletes of chunks it already stored are
pinned to it whatever the chat (they need its file_id), and fall back as
usual if Telegram refuses them.

The check's calls go through the bot's lanes like every other call
(`Dispatcher.check`), also before the bot is admitted: so they never overlap
its other calls, honour its cooldown, and with several instances run only
while this one holds the bot's lease (a lease is handed on only once they
have ended). Until it holds the lease, a check waits for it.

Chats refuse bots later too (an admin kicks one or takes its rights: the
dispatcher then takes it out of that chat, or out of the pool if it was its
last). Every `RECHECK_INTERVAL` each bot that is out of some chat is asked
again (getChatMember) about those chats and goes back into the ones that
take it now (`Dispatcher.rejoin`), asked through its lanes as at its first
check, by the instance that holds its lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from app.kit import jitter
from app.kit.periodic import Periodic
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import (
    BotUnusable,
    NotHeldHere,
    PermanentError,
    RateLimited,
    TelegramError,
)
from app.telegram.types import BotInfo, ChatMemberInfo

log = structlog.get_logger("app.telegram.probe")

#: Seconds before a failed getMe is tried again; doubled after each failure.
PROBE_FIRST_PAUSE = 1.0
#: The longest pause between two getMe checks of one bot.
PROBE_MAX_PAUSE = 60.0
#: Seconds between two re-checks of a bot's standing in the chats that
#: refused it: often enough that a restored bot is back within minutes, rare
#: enough to cost nothing (one getChatMember per missing chat and bot).
RECHECK_INTERVAL = 300.0

AdmittedHandler = Callable[[BotInfo], None]


class BotProber:
    """Checks every bot the dispatcher holds back and admits those that pass."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        on_admitted: AdmittedHandler | None = None,
        first_pause: float = PROBE_FIRST_PAUSE,
        max_pause: float = PROBE_MAX_PAUSE,
        recheck_interval: float = RECHECK_INTERVAL,
    ) -> None:
        self._dispatcher = dispatcher
        self._on_admitted = on_admitted
        self._first_pause = first_pause
        self._max_pause = max_pause
        self._tasks: set[asyncio.Task[None]] = set()
        self.rechecks = Periodic("bot_recheck", self._recheck_round, interval=recheck_interval)
        self.bots: dict[int, BotInfo] = {}
        #: Set once a bot has passed (the service can store files).
        self.one_admitted = asyncio.Event()

    def start(self) -> None:
        for bot_id in self._dispatcher.probing_bots():
            task = asyncio.create_task(self._probe(bot_id), name=f"bot-probe-{bot_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self.rechecks.start()

    async def stop(self) -> None:
        await self.rechecks.stop()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def probing(self) -> int:
        """Bots still being checked."""
        return len(self._tasks)

    async def _probe(self, bot_id: int) -> None:
        worker = self._dispatcher.workers[bot_id]
        pause = self._first_pause
        attempt = 0
        while True:
            while not self._dispatcher.lease_left(bot_id):
                worker.changed.clear()
                await worker.changed.wait()
            attempt += 1
            try:
                info, chats, refusals = await self._check(bot_id)
            except NotHeldHere:
                continue  # the lease moved on meanwhile: wait for it again
            except (BotUnusable, PermanentError) as exc:
                # A wrong or revoked token: checking again cannot help.
                log.error("bot_check_failed", bot_id=bot_id, error=str(exc))
                self._dispatcher.reject(bot_id)
                return
            except TelegramError as exc:
                wait = exc.retry_after if isinstance(exc, RateLimited) else pause
                log.warning(
                    "bot_check_retrying",
                    bot_id=bot_id,
                    attempt=attempt,
                    retry_in=round(wait, 1),
                    error=str(exc),
                )
                await asyncio.sleep(wait * jitter.uniform(1.0, 1.2))
                pause = min(pause * 2, self._max_pause)
                continue
            if not chats:
                log.error("bot_check_failed", bot_id=bot_id, error="no storage chat lets it post")
                self._dispatcher.note_check_problem(
                    bot_id, "no storage chat lets it post: " + "; ".join(refusals)
                )
                await asyncio.sleep(pause * jitter.uniform(1.0, 1.2))
                pause = min(pause * 2, self._max_pause)
                continue
            self.bots[bot_id] = info
            self._dispatcher.admit(bot_id, chats)
            log.info(
                "bot_admitted",
                bot_id=bot_id,
                username=info.username,
                attempts=attempt,
                chats=len(chats),
                usable=len(self._dispatcher.usable_bots()),
            )
            self.one_admitted.set()
            if self._on_admitted is not None:
                self._on_admitted(info)
            return

    async def _check(self, bot_id: int) -> tuple[BotInfo, list[int], list[str]]:
        """getMe, then the bot's rights in every storage chat (`_chats_of`).
        A refused getMe (wrong or revoked token) raises BotUnusable or
        PermanentError; a passing failure raises: check again later."""
        info = await self._dispatcher.check(bot_id, "getMe", _get_me)
        chats, refusals = await self._chats_of(bot_id)
        return info, chats, refusals

    async def _chats_of(self, bot_id: int) -> tuple[list[int], list[str]]:
        """The storage chats where the bot is an admin that may post, and why
        each other chat refused it. A passing failure (5xx, 429, timeout) is
        raised: check again later."""
        unpinning: list[int] = []

        async def member_of(chat_id: int) -> ChatMemberInfo:
            member = await self._member_of(bot_id, chat_id)
            if member.is_admin and member.can_post_messages and not member.can_edit_messages:
                unpinning.append(chat_id)
            return member

        chats, refused = await self._standing(bot_id, self._dispatcher.chat_ids, member_of)
        for chat_id, refusal in refused.items():
            log.error("bot_refused_in_chat", bot_id=bot_id, chat_id=chat_id, error=refusal)
        for chat_id in unpinning:
            # Admitted all the same: a snapshot needs one bot per chat that
            # may pin its manifest (app/store/snapshot.py), not every bot.
            log.warning(
                "bot_may_not_pin",
                bot_id=bot_id,
                chat_id=chat_id,
                detail="the bot lacks the administrator right can_edit_messages, which "
                "pinning a snapshot's manifest in a channel takes; with no bot holding it "
                "in a chat, no snapshot is written",
            )
        return chats, [f"chat {chat_id}: {refusal}" for chat_id, refusal in refused.items()]

    @staticmethod
    async def _standing(
        bot_id: int, chat_ids: list[int], member_of: Callable[[int], Awaitable[ChatMemberInfo]]
    ) -> tuple[list[int], dict[int, str]]:
        """Of `chat_ids`, those where the bot may post (`member_of` asks
        Telegram), and why each other one refused it."""
        chats: list[int] = []
        refused: dict[int, str] = {}
        for chat_id in chat_ids:
            try:
                member = await member_of(chat_id)
            except NotHeldHere:
                raise  # not the chat's answer: the check waits for the lease
            except (BotUnusable, PermanentError) as exc:
                refusal = exc.description
            else:
                if member.is_admin and member.can_post_messages:
                    chats.append(chat_id)
                    continue
                refusal = f"not an admin that may post (status {member.status})"
            refused[chat_id] = refusal
        return chats, refused

    # --- re-checks of chats that refused a bot ------------------------------------

    async def _recheck_round(self) -> None:
        missing = self._dispatcher.chats_to_recheck()
        await asyncio.gather(*(self._recheck(bot_id, chats) for bot_id, chats in missing.items()))

    async def _recheck(self, bot_id: int, chat_ids: list[int]) -> None:
        """Ask again about the chats that refused the bot; back into those
        that take it now."""
        worker = self._dispatcher.workers[bot_id]
        if not self._dispatcher.lease_left(bot_id):
            return  # its lease is elsewhere: the holder re-checks it
        try:
            chats, refused = await self._standing(
                bot_id, chat_ids, lambda chat: self._member_of(bot_id, chat)
            )
        except NotHeldHere:
            return  # its lease moved on: the next holder re-checks it
        except TelegramError as exc:
            log.warning("bot_recheck_failed", bot_id=bot_id, error=str(exc))
            return
        if chats:
            self._dispatcher.rejoin(bot_id, chats)
        log.info(
            "bot_chats_rechecked",
            bot_id=bot_id,
            chats_back=chats,
            still_refused=refused,
            chats=len(worker.chats),
            in_pool=worker.usable,
        )

    async def _member_of(self, bot_id: int, chat_id: int) -> ChatMemberInfo:
        return await self._dispatcher.check(
            bot_id, "getChatMember", lambda client: client.get_chat_member(chat_id, bot_id)
        )


def _get_me(client: BotClient) -> Awaitable[BotInfo]:
    return client.get_me()
