"""Typed Bot API errors.

The dispatcher decides what to do from the type alone: wait out a rate limit on
another bot, retry a transient failure, fail a job on a permanent error, take a
bot out of one chat when that chat refuses it, or out of the pool when it can
no longer work. `error_from_reply` is the one place where Telegram's replies
become these types. No message here ever holds a token: they are built from
Telegram's description and the bot id.
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


class NotHeldHere(BotUnusable):
    """A call of the bot's check, while this instance does not hold its
    lease: another instance may be calling with it. Nothing is wrong with
    the bot; its check waits for the lease to come back."""


class ChatForbidden(BotUnusable):
    """The bot may not act in one chat: a 403 on a call into it (kicked, not a
    member), or a 400 that says so (`CHAT_REFUSALS`).

    The bot is out of that chat only; it still works in the others. Retrying
    in that chat will not help until an admin restores its rights.
    """

    def __init__(
        self, description: str, *, status: int, chat_id: int, bot_id: int | None = None
    ) -> None:
        super().__init__(description, status=status, bot_id=bot_id)
        self.chat_id = chat_id


class FilesUnreachable(TelegramError):
    """The Bot API server's files cannot be read as this service is set up:
    a server that serves no files (a `--local` one) taken for the cloud, a
    local server's directory not shared or not readable. No fault of any
    copy, and retrying does not help: the description says what to set."""


class NoUsableBot(TelegramError):
    """Every bot in the pool is unusable: jobs fail fast instead of hanging."""


class DispatcherClosed(TelegramError):
    """The dispatcher is shutting down and takes no new jobs."""


class ChatsFull(TelegramError):
    """Every storage chat a write could go to holds CHAT_MESSAGE_LIMIT
    messages (app/telegram/chat_fill.py): nothing new can be stored until
    an operator adds a chat. Retrying does not help."""


# Telegram answers some calls into a chat the bot may not post in with a 400,
# not a 403. These descriptions (matched without case) say the refusal is the
# bot's standing in that chat, not a fault of our request; any other 400 is.
# "message can't be deleted" is not here: Telegram says it both when the bot
# lacks the right and when the message is past the 48 hours (app/store/gc.py
# tells them apart by the message's age).
CHAT_REFUSALS = (
    "chat not found",
    "not enough rights to send",
    "have no rights to send a message",
    "chat_write_forbidden",
    "need administrator rights in the channel chat",
    "bot is not a member",
)


def error_from_reply(
    status: int,
    *,
    code: int,
    description: str,
    retry_after: float | None,
    chat_id: int | None,
    bot_id: int | None,
) -> TelegramError:
    """The typed error of a Bot API reply that is not ok: HTTP `status`,
    Telegram's `error_code` (`code`) and description, the flood wait it asked
    for, and the chat the call went into (None: a call that names no chat)."""
    if code == 429 or status == 429:
        wait = retry_after if retry_after is not None else 5.0
        return RateLimited(description, retry_after=wait, bot_id=bot_id)
    if code == 401 or status == 401:
        return BotUnusable(description, status=code, bot_id=bot_id)
    if code == 403 or status == 403:
        if chat_id is None:
            # A call that names no chat (getMe, getFile) was refused for the
            # bot itself, not for one chat: nothing narrower to take it out
            # of, so it leaves the pool.
            return BotUnusable(description, status=code, bot_id=bot_id)
        return ChatForbidden(description, status=code, chat_id=chat_id, bot_id=bot_id)
    if status >= 500 or code >= 500:
        return TransientError(description, bot_id=bot_id)
    if chat_id is not None and is_chat_refusal(description):
        return ChatForbidden(description, status=code, chat_id=chat_id, bot_id=bot_id)
    return PermanentError(description, status=code, bot_id=bot_id)


def is_chat_refusal(description: str) -> bool:
    """Whether a 400's description says the bot may not post in the chat."""
    text = description.lower()
    return any(phrase in text for phrase in CHAT_REFUSALS)
