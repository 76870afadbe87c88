"""Typed Bot API errors.

The dispatcher decides what to do from the type alone: wait out a rate limit on
another bot, retry a transient failure, fail a job on a permanent error, or take
a bot out of the pool when it can no longer work. No message here ever holds a
token: they are built from Telegram's description and the bot id.
"""

from __future__ import annotations


class TelegramError(Exception):
    """Base of every error a Bot API call can raise."""

    def __init__(self, description: str, *, bot_id: int | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.bot_id = bot_id
        # Set by the dispatcher when it gives a job up: seconds until the pool
        # is likely to take the job again (the first bot's cooldown ending), the
        # Retry-After a client should hear. None: no estimate.
        self.pool_wait: float | None = None

    def __str__(self) -> str:
        prefix = f"bot {self.bot_id}: " if self.bot_id is not None else ""
        return prefix + self.description


class RateLimited(TelegramError):
    """HTTP 429. The bot must not be used again for `retry_after` seconds."""

    def __init__(self, description: str, *, retry_after: float, bot_id: int | None = None) -> None:
        super().__init__(description, bot_id=bot_id)
        self.retry_after = retry_after


class TransientError(TelegramError):
    """Timeouts, connection errors, 5xx: the same call may well succeed later."""


class CallAbandoned(TransientError):
    """A call given up while Telegram may still be working on it (a timeout).

    The request may have reached Telegram whole, so Telegram can still be
    storing a document on this token: the token must count as busy for a while
    (the one-call-per-token rule), and a send may leave an orphan message.
    """


class PermanentError(TelegramError):
    """A 4xx other than 429/401/403: retrying the same request will not help."""

    def __init__(self, description: str, *, status: int, bot_id: int | None = None) -> None:
        super().__init__(description, bot_id=bot_id)
        self.status = status


class BotUnusable(TelegramError):
    """401 (token revoked or wrong) or 403 (not a member of / kicked from the chat).

    These do not heal by retrying: the bot leaves the pool.
    """

    def __init__(self, description: str, *, status: int, bot_id: int | None = None) -> None:
        super().__init__(description, bot_id=bot_id)
        self.status = status


class NoUsableBot(TelegramError):
    """Every bot in the pool is unusable: jobs fail fast instead of hanging."""


class DispatcherClosed(TelegramError):
    """The dispatcher is shutting down and takes no new jobs."""
