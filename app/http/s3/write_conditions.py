"""Conditional writes: `If-Match` and `If-None-Match` on PutObject and
CompleteMultipartUpload.

They are checked twice. Before the body is read, against the object there
now: a refused PUT sends nothing to Telegram and answers 412
PreconditionFailed (404 NoSuchKey for an `If-Match` on a key with no
object, as AWS). Then at commit, under the key's lock in the transaction
that writes the object: a condition that held before and fails there lost a
race to a concurrent write, which is 409 ConditionalRequestConflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.http.s3.errors import S3Error
from app.http.shared.conditions import etag_matches
from app.store.service import WriteCheck


@dataclass(frozen=True, slots=True)
class WriteConditions:
    if_match: str | None
    if_none_match: str | None
    resource: str

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], resource: str) -> WriteConditions | None:
        """The request's conditions; None when it has none (the common case)."""
        if_match, if_none_match = headers.get("if-match"), headers.get("if-none-match")
        if if_match is None and if_none_match is None:
            return None
        return cls(if_match, if_none_match, resource)

    def refusal(self, etag: str | None) -> S3Error | None:
        """Why a write over an object with this ETag (None: no object) must
        not happen; None when it may."""
        if etag is None:
            if self.if_match is not None:
                return S3Error("NoSuchKey", resource=self.resource)
            return None
        if self.if_none_match is not None and etag_matches(self.if_none_match, etag):
            return S3Error("PreconditionFailed", resource=self.resource)
        if self.if_match is not None and not etag_matches(self.if_match, etag):
            return S3Error("PreconditionFailed", resource=self.resource)
        return None

    def check_now(self, etag: str | None) -> None:
        refusal = self.refusal(etag)
        if refusal is not None:
            raise refusal

    def at_commit(self) -> WriteCheck:
        """The check for the commit's transaction (after `check_now` passed)."""

        def check(etag: str | None) -> None:
            if self.refusal(etag) is not None:
                raise S3Error("ConditionalRequestConflict", resource=self.resource)

        return check
