"""The database schema, as SQLAlchemy models, one module per domain:

* :mod:`~app.db.models.objects` -- stored objects, their pieces, buckets;
* :mod:`~app.db.models.chunks` -- chunks and their copies (and their read failures), the GC
  ledger, the messages left in the channel for good, send intents, chat watermarks and each
  chat's fill (what keeps every Telegram message accounted for);
* :mod:`~app.db.models.multipart` -- S3 multipart uploads, parts, part pieces,
  spooled parts;
* :mod:`~app.db.models.instances` -- instances, bot leases, shared file paths;
* :mod:`~app.db.models.keys` -- API keys, web sessions, failed key checks;
* :mod:`~app.db.models.tus` -- resumable uploads;
* :mod:`~app.db.models.trash` -- deleted and replaced objects kept restorable;
* :mod:`~app.db.models.dav` -- folders, dead properties and locks (WebDAV);
* :mod:`~app.db.models.snapshots` -- the messages of metadata snapshots, their writer's lease,
  the journal;
* :mod:`~app.db.models.shares` -- share links, their download sessions and wrong passwords.

Everything is re-exported here: import models from ``app.db.models``. Importing
this package puts every table on ``Base.metadata``, which Alembic's env.py
relies on. The migration in migrations/versions must match these models; a
test compares them.
"""

from app.db.models.base import NEVER_REUSE_IDS, Base
from app.db.models.chunks import (
    CHUNK_STATES,
    COPY_STATES,
    GC_REASONS,
    LEFT_WHYS,
    ChatFill,
    ChatWatermark,
    Chunk,
    ChunkCopy,
    ChunkState,
    CopyFailure,
    CopyState,
    GcEntry,
    GcReason,
    LeftMessage,
    LeftWhy,
    SendIntent,
)
from app.db.models.dav import (
    MAX_LOCK_TOKEN_LENGTH,
    MAX_PROPERTY_NAME_LENGTH,
    MAX_PROPERTY_NAMESPACE_LENGTH,
    DavLock,
    DeadProperty,
    Folder,
)
from app.db.models.instances import BotLease, Instance, SharedFilePath
from app.db.models.keys import KEY_SCOPES, ApiKey, KeyCheckFailure, KeyScope, WebSession
from app.db.models.multipart import (
    MAX_PART_NUMBER,
    UPLOAD_ID_LENGTH,
    MultipartUpload,
    PartPiece,
    PendingCopy,
    SpooledPart,
    UploadPart,
)
from app.db.models.objects import (
    MAX_BUCKET_NAME_LENGTH,
    MAX_CONTENT_TYPE_LENGTH,
    MAX_KEY_LENGTH,
    MAX_NAME_LENGTH,
    Bucket,
    Piece,
    StoredObject,
)
from app.db.models.shares import (
    DISPOSITIONS,
    SHARE_TOKEN_LENGTH,
    Disposition,
    Share,
    ShareFailure,
    ShareSession,
)
from app.db.models.snapshots import JournalEntry, SnapshotLease, SnapshotMessage
from app.db.models.trash import TRASH_REASONS, TrashEntry, TrashReason
from app.db.models.tus import TUS_KINDS, TusKind, TusUpload

__all__ = [
    "CHUNK_STATES",
    "COPY_STATES",
    "DISPOSITIONS",
    "GC_REASONS",
    "KEY_SCOPES",
    "LEFT_WHYS",
    "MAX_BUCKET_NAME_LENGTH",
    "MAX_CONTENT_TYPE_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_LOCK_TOKEN_LENGTH",
    "MAX_NAME_LENGTH",
    "MAX_PART_NUMBER",
    "MAX_PROPERTY_NAMESPACE_LENGTH",
    "MAX_PROPERTY_NAME_LENGTH",
    "NEVER_REUSE_IDS",
    "SHARE_TOKEN_LENGTH",
    "TRASH_REASONS",
    "TUS_KINDS",
    "UPLOAD_ID_LENGTH",
    "ApiKey",
    "Base",
    "BotLease",
    "Bucket",
    "ChatFill",
    "ChatWatermark",
    "Chunk",
    "ChunkCopy",
    "ChunkState",
    "CopyFailure",
    "CopyState",
    "DavLock",
    "DeadProperty",
    "Disposition",
    "Folder",
    "GcEntry",
    "GcReason",
    "Instance",
    "JournalEntry",
    "KeyCheckFailure",
    "KeyScope",
    "LeftMessage",
    "LeftWhy",
    "MultipartUpload",
    "PartPiece",
    "PendingCopy",
    "Piece",
    "SendIntent",
    "Share",
    "ShareFailure",
    "ShareSession",
    "SharedFilePath",
    "SnapshotLease",
    "SnapshotMessage",
    "SpooledPart",
    "StoredObject",
    "TrashEntry",
    "TrashReason",
    "TusKind",
    "TusUpload",
    "UploadPart",
    "WebSession",
]
