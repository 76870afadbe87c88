"""Finding where a copy of a chunk can be downloaded from.

A `file_id` works only with the bot that received it, so a copy is read through
its uploading bot: `getFile` (lazily, cached for less than the hour Telegram
keeps a file_path valid) and then the file URL. With several instances, a
bot held by another one is asked for through it (app.store.shared_paths). If
that bot is gone (removed from the config, token revoked, kicked) or nobody
answers, another bot forwards the stored message and reads the chunk through
the file_id it gets; that file_id is cached too.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

import structlog

from app.db.copies import ChunkRow, CopyRow
from app.store.blocks import SHA256, digest_of
from app.store.encryption import Encryption
from app.store.gc import GarbageCollector
from app.store.shared_paths import FILE_PATH_TTL, SharedPaths
from app.telegram.client import BotClient
from app.telegram.dispatcher import Dispatcher
from app.telegram.errors import BotUnusable, PermanentError, TelegramError

log = structlog.get_logger("app.store.locator")

CACHE_ENTRIES = 10_000

# Telegram's words for a file, message or chat that is gone (a takedown, a
# deleted channel): no retry brings the copy back.
_GONE = (
    "wrong file_id",
    "file is temporarily unavailable",
    "message to forward not found",
    "message not found",
    "chat not found",
)


def is_gone(error: TelegramError) -> bool:
    """Whether Telegram said a copy's file, message or chat is gone (or a
    file path that getFile just gave answers 404)."""
    if isinstance(error, PermanentError) and error.status == 404:
        return True
    text = error.description.lower()
    return isinstance(error, PermanentError | BotUnusable) and any(word in text for word in _GONE)


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
        self, dispatcher: Dispatcher, gc: GarbageCollector, shared: SharedPaths | None = None
    ) -> None:
        self._dispatcher = dispatcher
        self._gc = gc
        self._shared = shared
        # copy_id -> (bot_id, file_id) of another bot, when the uploader is gone.
        self._rehomed: OrderedDict[int, tuple[int, str]] = OrderedDict()
        # (bot_id, file_id) -> (file_path, expires_at)
        self._paths: OrderedDict[tuple[int, str], tuple[str, float]] = OrderedDict()

    async def locate(self, copy: CopyRef) -> tuple[BotClient, str]:
        """A client and a file_path from which the copy can be downloaded now."""
        bot_id, file_id = self._rehomed.get(copy.copy_id, (copy.bot_id, copy.file_id))
        client = self._dispatcher.client_for(bot_id)
        if client is not None and self._dispatcher.serves(bot_id):
            try:
                return client, await self._file_path(bot_id, file_id)
            except BotUnusable:
                pass  # the bot cannot read it: another forwards it (below)
        located = await self._ask_holder(bot_id, file_id)
        return located if located is not None else await self._rehome(copy)

    def forget(self, copy: CopyRef) -> None:
        """Drop cached paths for a copy whose read failed (the path may be stale)."""
        bot_id, file_id = self._rehomed.get(copy.copy_id, (copy.bot_id, copy.file_id))
        self._paths.pop((bot_id, file_id), None)

    async def _file_path(self, bot_id: int, file_id: str) -> str:
        cached = self._cached_path(bot_id, file_id)
        if cached is not None:
            return cached
        path = await self._dispatcher.file_path(bot_id, file_id)
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

    async def _rehome(self, copy: CopyRef) -> tuple[BotClient, str]:
        """Read the copy through another bot: forward its message, use the new file_id."""
        try:
            document = await self._dispatcher.forward_message(
                copy.chat_id, copy.message_id, exclude={copy.bot_id}
            )
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
        return client, await self._file_path(document.bot_id, document.file_id)


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
