"""Which objects are pending (app.db.pending): one test, for every query
that must tell them apart. A module of its own so that the lowest layers of
app.db (the object rows' statements) can use it without importing the rest."""

from __future__ import annotations

from sqlalchemy import ColumnElement, exists

from app.db.models import MultipartUpload

_UPLOADS = MultipartUpload.__table__


def pending_object(object_id: ColumnElement[int]) -> ColumnElement[bool]:
    """Whether the object `object_id` names is pending: some of its bytes
    exist only in an instance's spool. A snapshot or journal must leave such
    an object out (restored, it could not be read); the chunkless
    one-statement writes must leave it to the session (its parts hold chunks)."""
    return exists().where(_UPLOADS.c.completed_object_id == object_id)
