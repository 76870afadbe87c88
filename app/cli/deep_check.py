"""`teleuploader check --deep`: the user's own Telegram, measured with the
real tokens (we cannot reach Telegram from where this is built; they can).

For each bot, its getMe round trip (the best of three); then for each
storage chat: its rights there (getChatMember), and two test documents, a
small one and one of CHUNK_SIZE, each posted (sendDocument), asked for
(getFile: the Bot API server downloads the file before it answers,
telegram-bot-api Client.cpp, do_get_file), downloaded whole and by a Range
(does the file server honour it?), checked byte for byte, and deleted.
Every call is timed, and every 429 is recorded with its retry_after and
waited out (up to `MAX_WAIT`). What was found becomes suggestions for
CHUNK_SIZE, SENDS_PER_MINUTE, REPLICAS and the download settings
(app/cli/deep_advice.py).

The bots go one after another and each makes one call at a time (one call
per token), so each bot's figures are its own. The service should be
stopped meanwhile: its calls and these would meet on the same tokens (429).
The report names bots by id only, never by token (`--json`, for a bug
report): the client scrubs every description it passes on.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

from app.cli.deep_advice import advise
from app.cli.deep_report import BotTrial, ChatTrial, DeepReport, DocumentTrial, RateLimit
from app.config.settings import Settings
from app.kit.seekable_body import SeekableBody
from app.telegram.client import BotClient
from app.telegram.errors import RateLimited, TelegramError
from app.telegram.local_files import local_files_for

T = TypeVar("T")

#: The small test document: under the 100,000 bytes above which the server
#: spaces uploads of one size (Client.cpp, on_cmd).
SMALL = 64 * 1024
#: The longest retry_after waited out; a longer one ends that step (reported).
MAX_WAIT = 120.0
#: Tries of one call while Telegram answers 429.
RATE_LIMIT_TRIES = 4
#: What a Range read asks for.
RANGE_BYTES = 64 * 1024
MiB = 1024 * 1024
CAPTION = "teleuploader check --deep: a test document, deleted at once"

Clock = Callable[[], float]
Pause = Callable[[float], Awaitable[None]]


class TestPattern(SeekableBody):
    """A test document's bytes, made as they are read (a local server's
    CHUNK_SIZE may be 2000 MB): a random MiB, each MiB of the document that
    one changed by its index, so that no two MiB are alike."""

    def __init__(self, length: int, seed: int) -> None:
        super().__init__(length)
        self._block = random.Random(seed).randbytes(MiB)

    def slice(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the document."""
        end = min(end, len(self))
        out = bytearray()
        while start < end:
            index, offset = divmod(start, MiB)
            piece = self._block[offset : min(MiB, offset + end - start)]
            out += piece.translate(_xor_table(index % 256))
            start += len(piece)
        return bytes(out)

    def read(self, size: int = -1) -> bytes:
        end = len(self) if size < 0 else min(len(self), self._position + size)
        data = self.slice(self._position, end)
        self._position = max(self._position, end)
        return data


def _xor_table(key: int) -> bytes:
    return bytes(value ^ key for value in range(256))


async def measure(
    settings: Settings, *, clock: Clock = time.monotonic, pause: Pause = asyncio.sleep
) -> DeepReport:
    """Measure every bot in every storage chat, one bot after another."""

    local_files = local_files_for(settings)
    bots = []
    for token in settings.bot_tokens:
        client = BotClient(
            token,
            api_base=settings.telegram_api_base,
            floor_bandwidth=settings.telegram_floor_bandwidth,
            local_files=local_files,
            expected_file_size=settings.chunk_size,
        )
        try:
            bots.append(await _BotMeasure(client, settings, clock, pause).run())
        finally:
            await client.aclose()
    base = urlsplit(settings.telegram_api_base)
    report = DeepReport(
        server=f"{base.scheme}://{base.netloc.rpartition('@')[2]}",
        local_server=settings.telegram_local_server,
        chunk_size=settings.chunk_size,
        bots=bots,
    )
    report.suggestions = advise(report, settings)
    return report


class _BotMeasure:
    """One bot's trials, its calls one at a time."""

    def __init__(self, client: BotClient, settings: Settings, clock: Clock, pause: Pause) -> None:
        self._client = client
        self._settings = settings
        self._clock = clock
        self._pause = pause
        self.trial = BotTrial(bot_id=client.bot_id)

    async def run(self) -> BotTrial:
        try:
            rounds = []
            for _ in range(3):
                started = self._clock()
                info = await self._call("getMe", None, self._client.get_me)
                rounds.append(self._clock() - started)
            self.trial.username = info.username
            self.trial.latency_seconds = min(rounds)
        except TelegramError as exc:
            self.trial.problem = exc.description
            return self.trial
        for number, chat_id in enumerate(self._settings.chat_ids):
            self.trial.chats.append(await self._chat(chat_id, seed=number))
        return self.trial

    async def _chat(self, chat_id: int, seed: int) -> ChatTrial:
        chat = ChatTrial(chat_id)
        bot_id = self._client.bot_id
        try:
            chat.rights = await self._call(
                "getChatMember",
                chat_id,
                lambda: self._client.chat_member_rights(chat_id, bot_id),
            )
        except TelegramError as exc:
            chat.problem = exc.description
            return chat
        chat.small = await self._document(chat_id, TestPattern(SMALL, seed=2 * seed))
        chat.large = await self._document(
            chat_id, TestPattern(self._settings.chunk_size, seed=2 * seed + 1)
        )
        return chat

    async def _document(self, chat_id: int, body: TestPattern) -> DocumentTrial:
        trial = DocumentTrial(size=len(body))
        client = self._client
        try:
            stored, trial.upload_seconds = await self._timed(
                "sendDocument",
                chat_id,
                lambda: client.send_document(chat_id, body, "check.bin", caption=CAPTION),
            )
        except TelegramError as exc:
            trial.problem = f"sendDocument: {exc.description}"
            return trial
        try:
            location, trial.getfile_seconds = await self._timed(
                "getFile", None, lambda: client.get_file(stored.file_id, len(body))
            )
            started = self._clock()
            trial.intact = await _read(client, location.file_path, body, 0, len(body))
            trial.download_seconds = self._clock() - started
            first = len(body) // 2
            trial.range = await _range(client, location.file_path, body, first)
        except TelegramError as exc:
            trial.problem = exc.description
        try:
            await self._call(
                "deleteMessage", chat_id, lambda: client.delete_message(chat_id, stored.message_id)
            )
            trial.deleted = True
        except TelegramError as exc:
            trial.deleted = False
            trial.problem = trial.problem or f"deleteMessage: {exc.description}"
        return trial

    async def _timed(
        self, method: str, chat_id: int | None, run: Callable[[], Awaitable[T]]
    ) -> tuple[T, float]:
        """The call's result, and the seconds its last try took (a 429's
        wait is not the call's time)."""
        tries: list[float] = []

        async def one() -> T:
            started = self._clock()
            try:
                return await run()
            finally:
                tries.append(self._clock() - started)

        result = await self._call(method, chat_id, one)
        return result, tries[-1]

    async def _call(self, method: str, chat_id: int | None, run: Callable[[], Awaitable[T]]) -> T:
        """`run()`, with Telegram's 429s recorded and waited out."""
        for attempt in range(1, RATE_LIMIT_TRIES + 1):
            try:
                return await run()
            except RateLimited as exc:
                self.trial.rate_limits.append(RateLimit(method, chat_id, exc.retry_after))
                if exc.retry_after > MAX_WAIT or attempt == RATE_LIMIT_TRIES:
                    raise
                await self._pause(exc.retry_after)
        raise AssertionError("unreachable")


async def _read(client: BotClient, path: str, body: TestPattern, start: int, end: int) -> bool:
    """Whether bytes [start, end) of the file are the document's."""
    position = start
    async with client.open_file_at(path, start, end if end < len(body) else None) as (at, data):
        position = at
        async for piece in data:
            if piece != body.slice(position, position + len(piece)):
                return False
            position += len(piece)
    return position >= end


async def _range(client: BotClient, path: str, body: TestPattern, first: int) -> str:
    """Whether the file server answers a Range with the bytes asked for
    ("honoured") or the whole file ("ignored"); TelegramError if neither."""
    end = min(len(body), first + RANGE_BYTES)
    async with client.open_file_at(path, first, end) as (at, data):
        if at != first:
            return "ignored"  # not read on: it may be the whole CHUNK_SIZE
        received = b"".join([piece async for piece in data])
    if received[: end - first] != body.slice(first, end):
        raise TelegramError(f"a Range read of bytes {first}-{end - 1} gave other bytes")
    return "honoured"
