"""Finding where a copy of a chunk can be downloaded from, and opening it.

A `file_id` works only with the bot that received it, so a copy is read through
its uploading bot: `getFile` (lazily, cached for less than the hour Telegram
keeps a file_path valid) and then the file URL (or, from a local Bot API
server, the file on its disk). With several instances, a bot held by another
one is asked for through it (app.store.shared_paths). If that bot is gone
(removed from the config, token revoked, kicked, or out of the copy's chat)
or nobody answers, another bot forwards the stored message and reads the
chunk through the file_id it gets; that file_id is cached too.

What Telegram's answers mean (app/store/copy_failures.py) decides the rest
(`open_copy`, `confirm`):

* getFile's "wrong file_id or the file is temporarily unavailable" is what
  the server says of any server-side download that failed: getFile is asked
  again, `UNAVAILABLE_RETRIES` times with backoff; then the message is
  forwarded through another bot, whose answer is certain (the message is
  there, or "message to forward not found"), and the copy read through its
  file_id, retried the same way. What still fails is the caller's to count.
* A 404 on a path (or a local file not there) is an old path: it is
  forgotten (here and in the database the instances share) and getFile asked
  once more. A 404 on that one too is no lost copy, the file server is not
  what the settings say (a self-hosted server serves no files): FilesUnreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import structlog

from app.db.copies import ChunkRow, CopyRow
from app.store.blocks import SHA256, digest_of
from app.store.copy_failures import is_gone, is_stale_path, is_unavailable
from app.store.encryption import Encryption
from app.store.gc import GarbageCollector
from app.store.shared_paths import FILE_PATH_TTL, SharedPaths
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import (
    BotUnusable,
    FilesUnreachable,
    NoUsableBot,
    PermanentError,
    TelegramError,
)

log = structlog.get_logger("app.store.locator")

CACHE_ENTRIES = 10_000
# getFile asked again after the failed-download answer, before and after
# the forward, each after a pause twice the last (from `retry_pause`): 0.5,
# 1 and 2 s, so both rounds end well within a download's stall timeout.
UNAVAILABLE_RETRIES = 3
RETRY_PAUSE = 0.5
# The pause between getFiles. Tests replace it to see what is waited for
# rather than time it.
_pause = asyncio.sleep

# Opened copies: (where the stream starts, the stream).
Opened = tuple[int, AsyncIterator[bytes]]


@dataclass(frozen=True, slots=True)
class CopyRef:
    """Where one copy of a chunk lives: a document some bot uploaded."""

    copy_id: int
    bot_id: int
    file_id: str
    chat_id: int
    message_id: int
    # A sealed chunk's copy: the salt of its copy key.
    salt: bytes | None = None


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """What the database knows about a stored chunk: what its bytes must hash
    to (app.store.blocks), and its copies, intact ones first."""

    chunk_id: int
    size: int
    sha256: str
    block_hashes: bytes | None
    copies: tuple[CopyRef, ...]
    # No intact copy was left when it was read from the database.
    lost: bool = False
    # A sealed chunk: its data key, unwrapped (docs/encryption.md); None:
    # plaintext, checked against its block hashes instead.
    data_key: bytes | None = field(default=None, repr=False)
    # Which digest `block_hashes` are: app.store.blocks.SHA256 or BLAKE3.
    block_digest: str = SHA256


class ChunkLocator:
    def __init__(
        self,
        dispatcher: Dispatcher,
        gc: GarbageCollector,
        shared: SharedPaths | None = None,
        *,
        retry_pause: float = RETRY_PAUSE,
    ) -> None:
        self._dispatcher = dispatcher
        self._gc = gc
        self._shared = shared
        self._retry_pause = retry_pause
        # copy_id -> (bot_id, file_id) of another bot, when the uploader is gone.
        self._rehomed: OrderedDict[int, tuple[int, str]] = OrderedDict()
        # (bot_id, file_id) -> (file_path, expires_at)
        self._paths: OrderedDict[tuple[int, str], tuple[str, float]] = OrderedDict()
        # Chats every bot found gone ("chat not found"), with that answer,
        # while no bot of the pool is back in them.
        self._gone_chats: dict[int, TelegramError] = {}

    @contextlib.asynccontextmanager
    async def open_copy(
        self, copy: CopyRef, size: int, offset: int, end: int | None = None
    ) -> AsyncIterator[Opened]:
        """The copy's bytes from `offset` (to `end`, if given): (where the
        stream starts, the stream). `size`: the chunk's, for getFile's time."""
        async with contextlib.AsyncExitStack() as stack:
            opened: Opened | None = None
            for asked_again in (False, True):
                client, path = await self.confirm(copy, size, cached=not asked_again)
                try:
                    opened = await stack.enter_async_context(client.open_file_at(path, offset, end))
                    break
                except PermanentError as exc:
                    if not is_stale_path(exc):
                        raise
                await self._forget_everywhere(copy)
            if opened is None:
                raise FilesUnreachable(
                    "the file server found no file at a path getFile had just given: a Bot "
                    "API server of your own serves no files unless it runs with --local (set "
                    "TELEGRAM_LOCAL_SERVER=true; deploy/README.md, A local Bot API server)",
                    bot_id=copy.bot_id,
                )
            yield opened

    async def confirm(
        self, copy: CopyRef, size: int, *, cached: bool = True
    ) -> tuple[BotClient, str]:
        """`locate`, through Telegram's failed-download answer (retried,
        then asked through a forward: see the module); `cached=False`: a
        getFile now, whatever is cached. Raises what still fails."""
        if not cached:
            self.forget(copy)
        probed = False
        retries = 0
        while True:
            try:
                return await self.locate(copy, size)
            except PermanentError as exc:
                if not is_unavailable(exc):
                    raise
                if retries < UNAVAILABLE_RETRIES:
                    retries += 1
                    await _pause(self._retry_pause * 2 ** (retries - 1))
                    continue
                if probed:
                    raise
                probed, retries = True, 0
                log.info("copy_unavailable_forwarded", copy_id=copy.copy_id, bot_id=copy.bot_id)
                try:
                    await self._rehome(copy, size, asking=True)
                except NoUsableBot:
                    raise exc from None  # no other bot to ask: the answer stands
                except PermanentError as forwarded:
                    # The forward found the message; the getFile of its new
                    # file_id is retried as the first one was.
                    if not is_unavailable(forwarded):
                        raise

    async def locate(self, copy: CopyRef, size: int | None = None) -> tuple[BotClient, str]:
        """A client and a file_path from which the copy can be downloaded now."""
        bot_id, file_id = self._rehomed.get(copy.copy_id, (copy.bot_id, copy.file_id))
        client = self._dispatcher.client_for(bot_id)
        if client is not None and self._dispatcher.serves(bot_id) and self._in_chat(bot_id, copy):
            try:
                return client, await self._file_path(bot_id, file_id, size)
            except BotUnusable:
                pass  # the bot cannot read it: another forwards it (below)
        located = await self._ask_holder(bot_id, file_id)
        return located if located is not None else await self._rehome(copy, size)

    def forget(self, copy: CopyRef) -> None:
        """Drop cached paths for a copy whose read failed (the path may be stale)."""
        bot_id, file_id = self._rehomed.get(copy.copy_id, (copy.bot_id, copy.file_id))
        self._paths.pop((bot_id, file_id), None)

    async def _forget_everywhere(self, copy: CopyRef) -> None:
        """A path found stale: forgotten here and in what the instances share."""
        self.forget(copy)
        if self._shared is not None and self._shared.in_use:
            bot_id, file_id = self._rehomed.get(copy.copy_id, (copy.bot_id, copy.file_id))
            await self._shared.forget(bot_id, file_id)

    def _in_chat(self, bot_id: int, copy: CopyRef) -> bool:
        """Whether the bot may still read the copy's chat: one that left a
        storage chat (kicked, its rights taken) cannot have Telegram fetch
        the file through that chat's message, and reads it through another
        bot's forward instead."""
        worker = self._dispatcher.workers.get(bot_id)
        if worker is None or copy.chat_id not in self._dispatcher.chat_ids:
            return True  # not a storage chat (any more): only a getFile tells
        return copy.chat_id in worker.chats

    async def _file_path(self, bot_id: int, file_id: str, size: int | None) -> str:
        cached = self._cached_path(bot_id, file_id)
        if cached is not None:
            return cached
        path = await self._dispatcher.file_path(bot_id, file_id, size)
        self._keep_path(bot_id, file_id, path)
        if self._shared is not None and self._shared.in_use:
            await self._shared.share(bot_id, file_id, path)
        return path

    async def _ask_holder(self, bot_id: int, file_id: str) -> tuple[BotClient, str] | None:
        """The path from the instance holding the bot, when another does."""
        if self._shared is None or not self._shared.in_use:
            return None
        # A bot between two holders (handed over, not yet taken) is asked
        # for too: its next holder answers within a round.
        if bot_id not in self._dispatcher.held_elsewhere and not self._dispatcher.in_service(
            bot_id
        ):
            return None
        client = self._dispatcher.download_client(bot_id)
        if client is None:
            return None
        path = self._cached_path(bot_id, file_id)
        if path is None:
            path = await self._shared.ask(bot_id, file_id)
            if path is None:
                return None
            self._keep_path(bot_id, file_id, path)
        return client, path

    def _cached_path(self, bot_id: int, file_id: str) -> str | None:
        key = (bot_id, file_id)
        cached = self._paths.get(key)
        if cached is None or cached[1] <= time.monotonic():
            return None
        self._paths.move_to_end(key)
        return cached[0]

    def _keep_path(self, bot_id: int, file_id: str, path: str) -> None:
        self._paths[(bot_id, file_id)] = (path, time.monotonic() + FILE_PATH_TTL)
        while len(self._paths) > CACHE_ENTRIES:
            self._paths.popitem(last=False)

    async def _rehome(
        self, copy: CopyRef, size: int | None, *, asking: bool = False
    ) -> tuple[BotClient, str]:
        """Read the copy through another bot: forward its message, use the
        new file_id. `asking`: to learn whether the message is there (the
        forward's answer is certain), through the uploader itself when no
        other bot is in the chat."""
        others = any(
            worker.usable and copy.chat_id in worker.chats and worker.bot_id != copy.bot_id
            for worker in self._dispatcher.workers.values()
        )
        exclude = {copy.bot_id} if others or not asking else set()
        try:
            document = await self._dispatcher.forward_message(
                copy.chat_id, copy.message_id, exclude=exclude
            )
        except NoUsableBot as refused:
            gone = self._chat_gone(copy.chat_id, refused)
            if gone is not None:
                raise gone from None
            log.warning("copy_unreachable", copy_id=copy.copy_id, bot_id=copy.bot_id)
            raise
        except TelegramError:
            log.warning("copy_unreachable", copy_id=copy.copy_id, bot_id=copy.bot_id)
            raise
        # The forwarded message is only a way to get a file_id; its post can go.
        self._gc.enqueue_document(document, reason="orphaned")
        self._rehomed[copy.copy_id] = (document.bot_id, document.file_id)
        while len(self._rehomed) > CACHE_ENTRIES:
            self._rehomed.popitem(last=False)
        log.info("copy_rehomed", copy_id=copy.copy_id, from_bot=copy.bot_id, to_bot=document.bot_id)
        client = self._dispatcher.client_for(document.bot_id)
        if client is None:
            raise BotUnusable(
                f"bot {document.bot_id} left the pool", status=0, bot_id=document.bot_id
            )
        return client, await self._file_path(document.bot_id, document.file_id, size)

    def _chat_gone(self, chat_id: int, refused: NoUsableBot) -> TelegramError | None:
        """Telegram's answer that the chat is gone, if that is why no bot
        may forward from it: the refusal that took the last bot out of it
        ("chat not found"), kept while no bot of the pool is back there
        (a bot is asked again about its chats every few minutes:
        app/telegram/probe.py)."""
        cause = refused.__cause__
        if isinstance(cause, TelegramError) and is_gone(cause):
            self._gone_chats[chat_id] = cause
            return cause
        workers = self._dispatcher.workers.values()
        if any(worker.usable and chat_id in worker.chats for worker in workers):
            self._gone_chats.pop(chat_id, None)
            return None
        return self._gone_chats.get(chat_id)


def chunk_ref(chunk: ChunkRow, encryption: Encryption) -> ChunkRef:
    """The reader's view of a chunk the database handed over (a sealed
    chunk's data key unwrapped: EncryptionKeyUnavailable if it cannot be)."""
    data_key = None
    if chunk.seal_key_id is not None and chunk.sealed_data_key is not None:
        data_key = encryption.data_key(chunk.id, chunk.seal_key_id, chunk.sealed_data_key)
    return ChunkRef(
        chunk_id=chunk.id,
        size=chunk.size,
        sha256=chunk.sha256,
        block_hashes=chunk.block_hashes,
        block_digest=digest_of(chunk.block_digest),
        copies=tuple(copy_ref(copy) for copy in chunk.copies),
        lost=chunk.lost,
        data_key=data_key,
    )


def copy_ref(copy: CopyRow) -> CopyRef:
    """Where a copy the database handed over can be read."""
    return CopyRef(
        copy_id=copy.id,
        bot_id=copy.bot_id,
        file_id=copy.file_id,
        chat_id=copy.chat_id,
        message_id=copy.message_id,
        salt=copy.salt,
    )
