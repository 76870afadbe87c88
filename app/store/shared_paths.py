"""File paths across instances, for chunks whose bot another instance holds.

getFile is a Bot API call, so only the instance holding the bot's lease may
make it (one call per token across the fleet). Downloading the bytes from
the path it returns is no method call: any instance may, with the bot's
token. So an instance that needs a path for a bot held elsewhere asks
through the database (`ask`), and every instance answers the questions
about the bots it holds (`start`: every `ANSWER_INTERVAL` while questions
come, every `IDLE_ANSWER_INTERVAL` otherwise). A path an instance got for
itself is shared too (`share`): the next instance to read that chunk finds
it at once. Answers stay valid as long as Telegram keeps a path
(`FILE_PATH_TTL`).

Unanswered within `ASK_WAIT` (the holder is busy or just died), the reader
falls back to a forward through a bot held here (app.store.locator): that
posts a message, which is why asking comes first.

Alone (no other live instance) none of this runs: every bot is held here.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.session import session_scope
from app.db.shared_paths import SharedPathRepository
from app.db.types import utcnow
from app.kit.periodic import Periodic
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import TelegramError

log = structlog.get_logger("app.store.shared_paths")

FILE_PATH_TTL = 50 * 60  # Telegram keeps a file_path valid for at least an hour.
# How long a reader waits for the holder's answer before it forwards instead.
ASK_WAIT = 5.0
# How often a waiting reader looks for the answer (a primary-key read).
ASK_POLL = 0.05
# How often an instance in a fleet looks for questions about its bots: often
# while readers are asking, seldom when nobody has for a while.
ANSWER_INTERVAL = 0.1
IDLE_ANSWER_INTERVAL = 0.5
BUSY_FOR = 10.0
ANSWERS_PER_ROUND = 50
PRUNE_INTERVAL = 300.0


class SharedPaths:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        ask_wait: float = ASK_WAIT,
        answer_interval: float = ANSWER_INTERVAL,
    ) -> None:
        self._dispatcher = dispatcher
        self._sessionmaker = sessionmaker
        self._ask_wait = ask_wait
        self._answer_interval = answer_interval
        self._asked_at = self._pruned_at = time.monotonic()
        self.loop = Periodic("shared_paths", self._round, interval=self._answer_wait)

    @property
    def in_use(self) -> bool:
        """Whether other instances share the bots (else every bot is here)."""
        return self._dispatcher.in_fleet

    # --- a reader's side ----------------------------------------------------------

    async def ask(self, bot_id: int, file_id: str) -> str | None:
        """The path of `file_id`, from the instance holding `bot_id`; None
        when no answer came within `ask_wait`."""
        async with session_scope(self._sessionmaker) as session:
            path = await SharedPathRepository(session).ask(bot_id, file_id, utcnow())
        deadline = time.monotonic() + self._ask_wait
        while path is None and time.monotonic() < deadline:
            await asyncio.sleep(ASK_POLL)
            async with session_scope(self._sessionmaker) as session:
                path = await SharedPathRepository(session).answer_of(bot_id, file_id, utcnow())
        if path is None:
            log.warning("shared_path_unanswered", bot_id=bot_id, waited=self._ask_wait)
        return path

    async def share(self, bot_id: int, file_id: str, file_path: str) -> None:
        """Offer a path this instance got to the others (best effort)."""
        now = utcnow()
        try:
            async with session_scope(self._sessionmaker) as session:
                await SharedPathRepository(session).answer(
                    bot_id, file_id, file_path, now + timedelta(seconds=FILE_PATH_TTL), now
                )
        except Exception as exc:  # a read must not fail for the others' sake
            log.warning("shared_path_not_shared", bot_id=bot_id, error=str(exc))

    async def forget(self, bot_id: int, file_id: str) -> None:
        """A shared path the file server no longer has: dropped, so that the
        next question is answered with a getFile (best effort)."""
        try:
            async with session_scope(self._sessionmaker) as session:
                await SharedPathRepository(session).forget(bot_id, file_id)
        except Exception as exc:  # a read must not fail for the others' sake
            log.warning("shared_path_not_forgotten", bot_id=bot_id, error=str(exc))

    # --- a holder's side ----------------------------------------------------------

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        """Before the dispatcher stops (answers go through it)."""
        await self.loop.stop()

    def _answer_wait(self) -> float:
        busy = time.monotonic() - self._asked_at < BUSY_FOR
        return self._answer_interval if busy else IDLE_ANSWER_INTERVAL

    async def _round(self) -> None:
        if not self.in_use:
            return
        if await self.answer_round():
            self._asked_at = time.monotonic()
        if time.monotonic() - self._pruned_at >= PRUNE_INTERVAL:
            self._pruned_at = time.monotonic()
            await self._prune()

    async def answer_round(self) -> int:
        """Answer the questions about the bots this instance holds now."""
        now = utcnow()
        async with session_scope(self._sessionmaker) as session:
            questions = await SharedPathRepository(session).questions(
                self._dispatcher.serving_bots(),
                now,
                asked_since=now - timedelta(seconds=self._ask_wait),
                limit=ANSWERS_PER_ROUND,
            )
        if not questions:
            return 0
        answers = await asyncio.gather(*(self._get_path(b, f) for b, f in questions))
        answered = 0
        async with session_scope(self._sessionmaker) as session:
            repo = SharedPathRepository(session)
            for (bot_id, file_id), path in zip(questions, answers, strict=True):
                if path is None:
                    continue
                expires = utcnow() + timedelta(seconds=FILE_PATH_TTL)
                await repo.answer(bot_id, file_id, path, expires, now)
                answered += 1
        return answered

    async def _get_path(self, bot_id: int, file_id: str) -> str | None:
        try:
            # The size is not asked with the path: the client gives the
            # server's download the time the largest chunk takes.
            return await self._dispatcher.file_path(bot_id, file_id)
        except TelegramError as exc:
            # The reader, unanswered, forwards instead.
            log.info("shared_path_failed", bot_id=bot_id, error=str(exc))
            return None

    async def _prune(self) -> None:
        async with session_scope(self._sessionmaker) as session:
            await SharedPathRepository(session).prune(
                utcnow(), unanswered_after=timedelta(seconds=self._ask_wait * 2)
            )
