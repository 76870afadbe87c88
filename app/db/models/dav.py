"""What WebDAV (app/http/dav) keeps beside the objects: folders, dead
properties and locks.

Names with `/` are folders: a folder exists while an object's key or a
`Folder` row lies under it. A `Folder` row keeps one that has no file (a
MKCOL, or the folder a file was deleted or moved out of). Its key ends with
`/`, as a common prefix of the listing does.

A `DeadProperty` is a property a client set with PROPPATCH (Windows sends
its `Win32*` times), kept per resource key: an object's key, or a folder's.

A `DavLock` is a WebDAV lock (RFC 4918 section 6): in the database, so that
every instance sees the locks every other took.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.models.base import NEVER_REUSE_IDS, Base
from app.db.models.objects import MAX_KEY_LENGTH
from app.db.types import BigIntPK, UtcDateTime, key_string, utcnow

#: A dead property's namespace and name, in characters.
MAX_PROPERTY_NAMESPACE_LENGTH = 255
MAX_PROPERTY_NAME_LENGTH = 255
#: A lock token: "urn:uuid:" and a UUID (45 characters).
MAX_LOCK_TOKEN_LENGTH = 64


class Folder(Base):
    """A folder kept although no object's key may lie under it."""

    __tablename__ = "folders"

    bucket: Mapped[str] = mapped_column(key_string(255), primary_key=True)
    # Ends with "/": "named/photos/2026/".
    key: Mapped[str] = mapped_column(key_string(MAX_KEY_LENGTH), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"Folder(bucket={self.bucket!r}, key={self.key!r})"


class DeadProperty(Base):
    """One property of one resource, as the client set it: its value is the
    XML inside the property's element, self-contained (every element in it
    declares its own namespace)."""

    __tablename__ = "dav_properties"
    # One row per (bucket, key, namespace, name), kept so by the repository
    # under the resource's lock: a unique index over two long names and a
    # key could outgrow what a Postgres index entry holds.
    __table_args__ = (Index(None, "bucket", "key"), NEVER_REUSE_IDS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    bucket: Mapped[str] = mapped_column(key_string(255))
    # A file's object key, or a folder's key (ending with "/").
    key: Mapped[str] = mapped_column(key_string(MAX_KEY_LENGTH))
    namespace: Mapped[str] = mapped_column(String(MAX_PROPERTY_NAMESPACE_LENGTH))
    name: Mapped[str] = mapped_column(String(MAX_PROPERTY_NAME_LENGTH))
    value: Mapped[str] = mapped_column(Text)

    def __repr__(self) -> str:
        return f"DeadProperty(key={self.key!r}, name={{{self.namespace}}}{self.name})"


class DavLock(Base):
    """A write lock on a resource (and, with `infinite`, everything under it)."""

    __tablename__ = "dav_locks"
    __table_args__ = (Index(None, "bucket", "key"),)

    # "urn:uuid:...": the lock token the client submits in If headers.
    token: Mapped[str] = mapped_column(String(MAX_LOCK_TOKEN_LENGTH), primary_key=True)
    bucket: Mapped[str] = mapped_column(key_string(255))
    # The lock root: a file's key, or a folder's key (ending with "/").
    key: Mapped[str] = mapped_column(key_string(MAX_KEY_LENGTH))
    # Depth infinity (a folder and everything under it) or 0.
    infinite: Mapped[bool] = mapped_column(Boolean)
    exclusive: Mapped[bool] = mapped_column(Boolean)
    # The client's <D:owner> element, as XML ("" when it sent none).
    owner: Mapped[str] = mapped_column(Text)
    # The API key that took it: only that key's requests may use its token.
    api_key_id: Mapped[int] = mapped_column(BigInteger)
    timeout_seconds: Mapped[int] = mapped_column(Integer)
    # Refreshing a lock moves it; an expired lock binds nobody.
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)

    def __repr__(self) -> str:
        return f"DavLock(token={self.token!r}, key={self.key!r}, exclusive={self.exclusive})"
