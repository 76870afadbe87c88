"""The upload pipeline: cut a byte stream into chunks and store them in Telegram.

Several chunks of one stream are in flight at once (up to one per usable bot),
while MD5 and SHA-256 are computed incrementally. Every chunk in memory, being
filled or being sent, holds a buffer of the process-wide `UploadBuffers`
budget, taken *before* its bytes are read from the client: an upload that has
to wait for a buffer is not read meanwhile, so memory stays near that budget
however many clients upload, and nothing is written to disk.

Every chunk is recorded in the database as *pending* the moment Telegram has it.
If the stream fails (client gone, size limit, Telegram error), the chunks already
stored are released to the GC ledger, so no Telegram message is left behind. If
the process dies instead, the pending rows are swept into the ledger at the next
start.

Before every send a *send intent* row is written, and it goes in the same
transaction as the chunk row (or once the send has failed): a message Telegram
posted for a process that died before recording it is found later by
reconciliation (app/store/reconcile.py), which must not mistake a live
upload's message, posted but not yet recorded, for such an orphan. The
writer also tells the periodic sweep since when its oldest running upload
has been storing chunks (`oldest_running`): pending chunks of this instance
older than that belong to no running upload.

With master keys configured (`Encryption`), every chunk gets a data key of
its own and every copy is sealed under a key of its own, as it is sent
(docs/encryption.md); the document's name and caption then say nothing of
the object.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.chunks import ChunkRepository, InstanceGone, SealRecord
from app.db.intents import IntentRepository, WatermarkRepository
from app.db.object_rows import PieceSpec
from app.db.session import session_scope
from app.db.types import utcnow
from app.store.blocks import SHA256, ChunkDigests, block_hashes_off_loop, hashes_root
from app.store.chunk_size import plan_chunks
from app.store.encryption import ChunkKeys, Encryption, customer_key_given
from app.store.errors import InstanceFenced
from app.store.gc import GarbageCollector
from app.store.hashing_reader import HashingReader
from app.store.send_intents import SendIntents
from app.store.upload_buffers import UploadBuffers
from app.store.write_cleanup import WriteCleanup
from app.telegram.chunk_pieces import ChunkPieces, contiguous
from app.telegram.dispatcher import Dispatcher
from app.telegram.types import StoredDocument
from app.telegram.worker import ReplicaGroup

log = structlog.get_logger("app.store.writer")

# Retry-After of an upload refused while fenced: registering anew takes a
# beat of the heartbeat (a few seconds).
FENCED_RETRY_AFTER = 5


@dataclass(frozen=True, slots=True)
class WrittenContent:
    """What a finished stream became: hashes plus either pieces or inline bytes."""

    size: int
    md5_hex: str
    sha256_hex: str
    pieces: list[PieceSpec]
    inline_data: bytes | None

    @property
    def chunk_ids(self) -> list[int]:
        return [piece.chunk_id for piece in self.pieces]


class ChunkWriter:
    def __init__(
        self,
        dispatcher: Dispatcher,
        sessionmaker: async_sessionmaker[AsyncSession],
        gc: GarbageCollector,
        buffers: UploadBuffers,
        *,
        chunk_size: int,
        inline_threshold: int,
        replicas: int = 1,
        owner: str | None = None,
        owner_registered: bool = False,
        on_bytes: Callable[[int], None] | None = None,
        encryption: Encryption | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self.encryption = encryption if encryption is not None else Encryption(None)
        # Copies of every chunk, each an upload of its own (REPLICAS).
        self.replicas = replicas
        self._owner = owner
        self._intents = SendIntents(sessionmaker, owner)
        # Whether `owner` has an instance row the chunk's record must find
        # (a running service's writer; tests of the writer alone have none).
        self._owner_registered = owner_registered
        # Fenced: this instance was taken for dead (`fence`). `_epoch` counts
        # fences: a chunk whose sends began before one is not recorded.
        self.fenced = False
        self._epoch = 0
        self._on_bytes = on_bytes
        self._sessionmaker = sessionmaker
        self.buffers = buffers
        self.chunk_size = chunk_size
        self.inline_threshold = inline_threshold
        self._running: dict[int, datetime] = {}  # uploads storing chunks now: since when
        self._running_ids = itertools.count()
        self._watermarks_known: set[int] = set()  # chats whose watermark exists (reconcile.py)
        # The block digest new chunks get: BLAKE3 once every live instance
        # reads it (`use_block_digest`, from the heartbeat), SHA-256 until then.
        self.block_digest = SHA256
        # Clean-up that goes on after its caller was cancelled (shielded):
        # shutdown waits for it before the engine goes (`settle`).
        self._cleanup = WriteCleanup(gc, self._intents)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark an upload as running while the block runs: the pending chunks
        it stores meanwhile (until it commits them) are not swept."""
        key = next(self._running_ids)
        self._running[key] = utcnow()
        try:
            yield
        finally:
            del self._running[key]

    def fence(self) -> None:
        """Another instance took this one for dead and claimed its work (its
        send intents are gone: their messages may be ledgered): refuse new
        chunks, and record none whose sends began before now."""
        self.fenced = True
        self._epoch += 1

    def unfence(self) -> None:
        """Registered anew: chunks may be stored again."""
        self.fenced = False

    def _refuse_if_fenced(self, epoch: int) -> None:
        if self.fenced or epoch != self._epoch:
            raise InstanceFenced(retry_after=FENCED_RETRY_AFTER)

    def use_block_digest(self, kind: str) -> None:
        if kind != self.block_digest:
            log.info("block_digest_for_new_chunks", digest=kind, before=self.block_digest)
            self.block_digest = kind

    def oldest_running(self) -> datetime | None:
        """When the oldest upload still running began (None: none runs)."""
        return min(self._running.values(), default=None)

    def count_bytes(self, size: int) -> None:
        if self._on_bytes is not None:
            self._on_bytes(size)

    def parallelism(self) -> int:
        """Chunks of one stream sent at once: one per bot of the pool (with
        several instances, of the whole fleet's pool: the backlog this makes is
        what draws bots here)."""
        return max(1, self._dispatcher.pool_size())

    def require_room(self) -> None:
        """ChatsFull when no storage chat takes new chunks (each holds
        CHAT_MESSAGE_LIMIT messages): an upload fails before it sends any."""
        self._dispatcher.require_open_chats()

    def keeps_the_pool_busy(self, size: int) -> bool:
        """Would a stream of `size` bytes, cut into equal chunks, keep the
        bots busy on its own? At half the pool's width or more, its equal
        chunks (CHUNK_SIZE / 2 at least) go to every bot at once."""
        return 2 * size >= self.parallelism() * self.chunk_size

    async def write(
        self,
        stream: AsyncIterator[bytes],
        *,
        max_size: int | None = None,
        label: str = "",
        allow_inline: bool = True,
        expected_size: int | None = None,
    ) -> WrittenContent:
        """Store a whole stream. On any failure, nothing stays in Telegram.

        `allow_inline=False` stores even small content in Telegram (multipart
        parts: an object is inline or pieces, never both)."""
        with self.running():
            return await self._write(
                stream,
                max_size=max_size,
                label=label,
                allow_inline=allow_inline,
                expected_size=expected_size,
            )

    async def _write(
        self,
        stream: AsyncIterator[bytes],
        *,
        max_size: int | None,
        label: str,
        allow_inline: bool,
        expected_size: int | None,
    ) -> WrittenContent:
        # Refused before a byte is read when no chat takes new writes: small
        # content too, which could live inline, since no snapshot or journal
        # batch could then carry its row to the chats either.
        self.require_room()
        # A customer key's content is sealed in Telegram, never kept inline.
        inline = allow_inline and not customer_key_given()
        sealed = self.encryption.seals_new_chunks
        inline_threshold = self.inline_threshold if inline else 0
        lanes = self.parallelism()
        plan = plan_chunks(expected_size, self.chunk_size, lanes)
        reader = HashingReader(
            stream,
            max_size=max_size,
            on_bytes=self._on_bytes,
            block_digest=None if sealed else self.block_digest,
            joined=sealed,
        )
        # Content that may live inline is read without a buffer: it is small,
        # and the registry's many tiny files must not queue behind big uploads.
        # A body known to be bigger is not read at all until it has a buffer.
        if expected_size is None or expected_size <= inline_threshold:
            await reader.fill(inline_threshold + 1)
        if reader.eof and reader.total <= inline_threshold:
            inline_data = bytes(reader.take(reader.total))
            md5_hex, sha256_hex = await reader.digests()
            return WrittenContent(
                size=reader.total,
                md5_hex=md5_hex,
                sha256_hex=sha256_hex,
                pieces=[],
                inline_data=inline_data,
            )
        # Chunks of this stream in memory at once: `lanes` being sent, one filling.
        own = asyncio.Semaphore(lanes + 1)
        tasks: list[asyncio.Task[PieceSpec]] = []
        try:
            while not (reader.eof and reader.buffered == 0):
                await own.acquire()
                try:
                    await self.buffers.acquire()
                except BaseException:
                    own.release()
                    raise
                data = None
                try:
                    _raise_first_failure(tasks)
                    length = plan.length(len(tasks))
                    await reader.fill(length)
                    data = reader.take(length)
                finally:
                    if not data:  # failed, or the stream's end: no chunk holds them
                        self.buffers.release()
                        own.release()
                if not data:
                    break
                send = self._send(data, reader.hashing, own, label=label, index=len(tasks))
                tasks.append(asyncio.create_task(send))
                # The send task owns the chunk now; holding it here too would
                # keep it in memory past its buffer's release.
                del data
            pieces = list(await asyncio.gather(*tasks))
            md5_hex, sha256_hex = await reader.digests()
        except BaseException:
            reader.discard()
            await self._cleanup.abandon(tasks)
            raise
        return WrittenContent(
            size=reader.total,
            md5_hex=md5_hex,
            sha256_hex=sha256_hex,
            pieces=pieces,
            inline_data=None,
        )

    async def _send(
        self,
        data: ChunkPieces,
        hashing: asyncio.Future[ChunkDigests | None] | None,
        own: asyncio.Semaphore,
        *,
        label: str,
        index: int,
    ) -> PieceSpec:
        try:
            return await self.store_chunk(data, label=label, index=index, hashed=hashing)
        finally:
            del data
            # The hashing thread may still read the chunk: its buffer is free
            # only once nothing holds the bytes.
            if hashing is not None and not hashing.done():
                await asyncio.wait([hashing])
            self.buffers.release()
            own.release()

    async def store_chunk(
        self,
        data: bytes | bytearray | ChunkPieces,
        *,
        label: str = "",
        index: int = 0,
        hashed: asyncio.Future[ChunkDigests | None] | None = None,
    ) -> PieceSpec:
        """Send one chunk to Telegram as `replicas` independent copies, each
        an upload of its own, and record it (with them) as pending. The
        caller holds a buffer of the budget for `data`. A chunk is recorded
        only with all its copies: one that fails fails the chunk, and the
        copies sent meanwhile go to the GC. `hashed`: a HashingReader's
        hashing of `data`, which made its block digests on the way."""
        epoch = self._epoch
        self._refuse_if_fenced(epoch)
        with self.running():
            keys: ChunkKeys | None = None
            hashes: ChunkDigests | None = None
            if self.encryption.seals_new_chunks:
                # Sealed: each frame's tag checks it; plaintext hashes would
                # only tell the database holder what the bytes are.
                keys = self.encryption.new_chunk()
                data = contiguous(data)  # sealed frame by frame; taken joined (one piece)
            else:
                # Shielded: the reader's next chunk waits on this hashing.
                hashes = await asyncio.shield(hashed) if hashed is not None else None
                hashes = hashes or await block_hashes_off_loop(data, self.block_digest)
            if self.replicas > 1:
                chats = self._dispatcher.replica_chats(self.replicas)
                group: ReplicaGroup | None = ReplicaGroup()
            else:
                # One copy chooses its chat itself, as every send did before replicas.
                chats, group = [None], None
            sends = [
                asyncio.ensure_future(
                    self._send_copy(data, chat, group, keys, label=label, index=index)
                )
                for chat in chats
            ]
            try:
                await asyncio.wait(sends, return_when=asyncio.FIRST_EXCEPTION)
            except BaseException:
                for send in sends:
                    send.cancel()
                await self._cleanup.forget_copies(sends)
                raise
            failure = next(
                (s.exception() for s in sends if s.done() and s.exception() is not None), None
            )
            if failure is not None:
                for send in sends:
                    send.cancel()
                await self._cleanup.forget_copies(sends)
                raise failure
            copies = [send.result() for send in sends]
            documents = [document for document, _, _ in copies]
            intents = [intent for _, intent, _ in copies]
            seal = None
            if keys is not None:
                salts = [salt for _, _, salt in copies if salt is not None]
                seal = SealRecord(len(data), keys.key_id, keys.wrapped, salts)
            # Shielded: a cancellation arriving while the commit is on its way
            # cannot tell whether the row was written; the commit's own end can.
            recording = self._cleanup.detach(self._record(documents, hashes, intents, seal, epoch))
            try:
                chunk_id = await asyncio.shield(recording)
            except asyncio.CancelledError:
                await self._cleanup.abandon_recording(recording, documents, intents)
                raise
            except BaseException as exc:
                # Telegram has them but the database does not: they must not stay.
                await self._cleanup.ledger(documents, intents)
                if isinstance(exc, InstanceGone):
                    log.error("chunk_refused_instance_taken_for_dead", owner=exc.owner)
                    raise InstanceFenced(retry_after=FENCED_RETRY_AFTER) from None
                raise
            return PieceSpec(chunk_id=chunk_id, offset=0, length=len(data))

    async def _send_copy(
        self,
        data: bytes | bytearray | ChunkPieces,
        chat_id: int | None,
        group: ReplicaGroup | None,
        keys: ChunkKeys | None,
        *,
        label: str,
        index: int,
    ) -> tuple[StoredDocument, int | None, bytes | None]:
        """One copy sent, with the send intent that covers it (resolved by the
        chunk's record, or here if the send fails), and its salt if sealed."""
        filename = f"{secrets.token_hex(8)}.bin"
        # A sealed copy's caption would name what the sealing hides.
        caption = f"{label} #{index}" if label and keys is None else None
        salt, body = None, None
        if keys is not None:
            salt, body = self.encryption.seal_copy(keys.data_key, contiguous(data))
        intent = await self._intents.open()
        try:
            document = await self._dispatcher.send_document(
                data if body is None else body,
                filename,
                caption=caption,
                chat_id=chat_id,
                replicas=group,
            )
        except BaseException:
            # No chunk row will hold whatever Telegram posted: an orphan for
            # the dispatcher's on_orphan or for reconciliation to delete.
            await self._cleanup.resolve_intent(intent)
            raise
        finally:
            if body is not None:
                body.close()  # drops its hold on the chunk at once
        return document, intent, salt

    async def _record(
        self,
        documents: list[StoredDocument],
        hashes: ChunkDigests | None,
        intents: list[int | None],
        seal: SealRecord | None,
        epoch: int,
    ) -> int:
        """The chunk row with its copies, and the intents resolved, in one
        transaction; refused if this instance was fenced since `epoch`."""
        self._refuse_if_fenced(epoch)
        async with session_scope(self._sessionmaker) as session:
            chunk = await ChunkRepository(session).add_pending(
                documents,
                "" if hashes is None else hashes_root(hashes.hashes),
                owner=self._owner,
                block_hashes=None if hashes is None else hashes.hashes,
                block_digest=None if hashes is None or hashes.kind == SHA256 else hashes.kind,
                seal=seal,
                owner_registered=self._owner_registered,
            )
            for intent in intents:
                if intent is not None:
                    await IntentRepository(session).resolve(intent)
            # In the chats' order: two chunks recording copies in the same new
            # chats in different orders waited for each other's watermark
            # insert (Postgres: deadlock detected, a 500 on a first upload).
            for document in sorted(documents, key=lambda d: d.chat_id):
                if intents[0] is not None and document.chat_id not in self._watermarks_known:
                    await WatermarkRepository(session).ensure(document.chat_id, document.message_id)
        if intents[0] is not None:
            self._watermarks_known.update(document.chat_id for document in documents)
        return chunk.id

    async def settle(self) -> None:
        """Wait for the clean-up that outlived cancelled writes."""
        await self._cleanup.settle()


def _raise_first_failure(tasks: list[asyncio.Task[PieceSpec]]) -> None:
    """A chunk that already failed fails the whole stream now, not at the end."""
    for task in tasks:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error
