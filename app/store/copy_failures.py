"""What Telegram's answers about a copy mean, and when a copy it could not
serve counts as missing.

Telegram's words for a message or a chat that is gone ("message to forward
not found", "chat not found") are certain: no retry brings the copy back
(`is_gone`). getFile's "wrong file_id or the file is temporarily
unavailable" is not: the Bot API server sends it for ANY server-side
download that failed, "also includes all 5xx and 429 errors" of Telegram's
data centres (telegram-bot-api Client.cpp, on_update_file). So that answer
(`is_unavailable`) is retried with backoff and a fresh getFile, then asked
through another bot's forward, whose answer is certain
(app/store/locator.py); what still fails is one failure of the copy,
counted here.

The rule (`MissingRule`, docs/durability.md): a copy counts as missing once
`failures` failures (3) were counted, each at least `spacing` (10 min) after
the one before (one outage met by many reads is one failure), the first and
the last at least `span` (1 h) apart, with no read or check served in
between (a success forgets them). Only then is `CopyRepository.mark_bad`
called, as for a copy found gone. The count is in the database
(`copy_failures`), so restarts and every instance add to the same one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.copy_failures import CopyFailureRepository, FailureRecord
from app.db.session import session_scope
from app.db.types import utcnow
from app.telegram.errors import BotUnusable, PermanentError, TelegramError

# Telegram's words for a message or chat that is gone (a takedown, a
# deleted channel): no retry brings the copy back.
_GONE = (
    "message to forward not found",
    "message not found",
    "chat not found",
)
# What the server says of any failed server-side download (Client.cpp,
# on_update_file): maybe gone, most often not.
_UNAVAILABLE = ("wrong file_id", "file is temporarily unavailable")


def is_gone(error: TelegramError) -> bool:
    """Whether Telegram said a copy's message or chat is gone."""
    text = error.description.lower()
    return isinstance(error, PermanentError | BotUnusable) and any(word in text for word in _GONE)


def is_unavailable(error: TelegramError) -> bool:
    """Whether it is getFile's answer for a download the server could not
    make now: retry it, and count it (`CopyFailures`) if it persists."""
    text = error.description.lower()
    return isinstance(error, PermanentError) and any(word in text for word in _UNAVAILABLE)


def is_stale_path(error: TelegramError) -> bool:
    """Whether a download found no file at its path (a 404, or a local
    server's file not there): the path is old, ask getFile again."""
    return isinstance(error, PermanentError) and error.status == 404


@dataclass(frozen=True, slots=True)
class MissingRule:
    """When a copy's counted failures make it missing (see the module)."""

    failures: int = 3
    span: timedelta = timedelta(hours=1)
    spacing: timedelta = timedelta(minutes=10)

    def __post_init__(self) -> None:
        if self.failures < 1:
            raise ValueError("a copy is missing after one failure at the least")

    def missing(self, record: FailureRecord) -> bool:
        return record.failures >= self.failures and record.last_at - record.first_at >= self.span


class CopyFailures:
    """Counts the failures of copies, and says when one is missing."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        rule: MissingRule | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._sessionmaker = sessionmaker
        self.rule = rule if rule is not None else MissingRule()
        self._clock = clock
        # The copies this process counted a failure of: a read of one that
        # is served forgets them (reads of the others cost no query).
        self._failing: set[int] = set()

    async def failed(self, copy_id: int) -> bool:
        """Count a failure of the copy; True when it now counts as missing."""
        async with session_scope(self._sessionmaker) as session:
            record = await CopyFailureRepository(session).record(
                copy_id, self._clock(), self.rule.spacing
            )
        if record is None:
            return False  # the copy is gone from the database meanwhile
        self._failing.add(copy_id)
        return self.rule.missing(record)

    def may_be_failing(self, copy_id: int) -> bool:
        """Whether this process counted a failure of the copy (a served read
        of it must then forget them)."""
        return copy_id in self._failing

    async def served(self, copy_id: int, session: AsyncSession | None = None) -> None:
        """The copy was served: its failures are forgotten (in `session`'s
        transaction if given)."""
        self._failing.discard(copy_id)
        if session is not None:
            await CopyFailureRepository(session).clear(copy_id)
            return
        async with session_scope(self._sessionmaker) as own:
            await CopyFailureRepository(own).clear(copy_id)
