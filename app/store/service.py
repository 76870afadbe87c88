"""The object store: what the HTTP layers (native API, S3) call.

Writing is two steps, so a caller can learn things from the stream before it
names the object (a form's `fileName` field may come after the file):

1. `write_content(stream)` stores the bytes (chunks in Telegram, or inline when
   small) and returns their hashes and pieces; nothing is visible yet.
2. `commit(...)` makes the object visible in one transaction, replacing any
   object under the same key (last writer wins).

If step 2 fails or never happens, `discard(content)` releases the chunks to the
GC ledger. Reading resolves only the pieces a byte range touches and streams
them through the `RangeReader`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from app.db.object_rows import PartSummary as PartSummary
from app.db.object_rows import StoredChecksum as StoredChecksum
from app.db.objects import ListOrder as ListOrder  # for the API: orders of a listing
from app.db.objects import WriteCheck as WriteCheck  # for the APIs: a condition on a put
from app.db.sealing import OBJECT_SEALS, seal_rows

# COMPOSITE, FULL_OBJECT, PartSummary and StoredChecksum are re-exported for
# the HTTP layers, which never import app.db.
from app.kit.checksums import COMPOSITE as COMPOSITE
from app.kit.checksums import FULL_OBJECT as FULL_OBJECT
from app.store import encryption
from app.store.object_info import ObjectInfo as ObjectInfo
from app.store.object_seal import PLAIN, seal_from
from app.store.object_seal import ObjectSeal as ObjectSeal
from app.store.object_write import DEFAULT_CONTENT_TYPE as DEFAULT_CONTENT_TYPE
from app.store.object_write import ObjectWrite as ObjectWrite
from app.store.store_deletes import ObjectDeletes
from app.store.store_reads import ObjectReads
from app.store.store_writes import ObjectWrites


class ObjectStore(ObjectWrites, ObjectReads, ObjectDeletes):
    """Writes, reads and deletes over the parts of app.store.store_parts."""

    @property
    def encryption_enabled(self) -> bool:
        """Whether new chunks are sealed (ENCRYPTION_KEYS)."""
        return self._writer.encryption.enabled

    async def seal_of(self, info: ObjectInfo) -> ObjectSeal:
        """How the object's bytes in Telegram are sealed (docs/encryption.md).
        Objects without chunks ask nothing: they are in the database."""
        if info.size == 0 or info.inline_data is not None:
            return PLAIN
        rows = await self._statements.rows(OBJECT_SEALS, {"object_id": info.id})
        if not rows and await self._pending.is_pending(info.id):
            # No pieces yet: sealed as the flusher will seal its spooled parts
            # (never under a customer key: such parts are not spooled).
            seals = self._writer.encryption.seals_new_chunks
            return ObjectSeal(
                master=seals and self.encryption_enabled, customer=(), other_chunks=True
            )
        return seal_from(seal_rows(rows), master_keys=self.encryption_enabled)

    @staticmethod
    def customer_key(key: bytes | None) -> AbstractContextManager[None]:
        """Within the block, written chunks are sealed under the customer key
        `key` (S3 SSE-C), and chunks sealed under it open."""
        return encryption.customer_key(key)

    async def close(self) -> None:
        """Let statements in flight finish and close what they hold."""
        await self._statements.close()

    def keeps_the_pool_busy(self, size: int) -> bool:
        return self._writer.keeps_the_pool_busy(size)

    def require_room(self) -> None:
        """ChatsFull at once when no storage chat takes new writes (each
        holds CHAT_MESSAGE_LIMIT messages): before a byte is taken in."""
        self._writer.require_room()

    def count_uploaded_bytes(self, size: int) -> None:
        """Bytes received from a client that the writer did not see (spooled)."""
        self._writer.count_bytes(size)

    def wake_gc(self) -> None:
        self._gc.wake()
